"""The corpus suite: toy corpora of many structures, each with its exact Bayes limit, split into a half to design
on and a half to judge on.

A structure is a point in independent dimensions (:class:`Structure`, :data:`DIMENSIONS`):

* ``correlated``: the traits vary independently (``none``), or the form of address (``address``) or the gender
  (``gender``) belongs to a style: each style has its own, which its speakers keep with probability
  :data:`~fairseq_speaker.toy.structure_model.BELONGS` (a joint prior over the traits' values, not a product);
* ``items`` and ``ways``: the style is marked on that many phrases, each with that many translations: binary
  choices over many words, or multi-way choices over few; many phrases are rare words (at 160, each phrase a
  speaker says is said once or twice in 30 sentences), few are frequent ones;
* ``early``: the translations of a phrase differ from their first word, an article or an adjective agreeing with
  the noun chosen ("le vélo" / "la bicyclette", "le petit vélo" / "la petite bicyclette"): a decoder commits to
  the choice before the noun. The word scored is still the noun (the choice, whichever position reveals it);
  without ``early`` every translation of a phrase starts with the same article;
* ``topics``: some phrases are translated by the topic of the sentence, not by the speaker: the source shows the
  topic ("at the hospital i saw the X"), so the choice is predictable from the source alone. Each speaker talks of
  one topic most (four sentences in five), so that a memory of a speaker's words would learn a topic as theirs.
  These words are scored under the trait ``topic``;
* ``sizes``: every speaker says as many training sentences (``uniform``), or speakers of very different sizes
  (``zipf``: p(c) ∝ 1/c on 1 to 200 sentences, about 34 on average);
* ``random_share``: the share of speakers who have no style: each of their style words is drawn uniformly, each
  time anew (a value ``random`` of the style trait);
* ``styles``: the number of styles (80 over 400 speakers: many styles with few speakers each);
* ``deviation``: the share of phrases on which a speaker leaves their style, as in the styles mode.

The phrases of a structure are made-up words ("the dabiko" -> "le tumafe" / "le sorilu"), drawn for its seed, so
that items and ways can be as many as a structure asks; gender and address are marked as in the styles mode.

:data:`SUITE` holds the named structures, each with its fixed seed: the ``design`` half varies one dimension at a
time from ``base``; the ``judge`` half is drawn from :data:`DIMENSIONS` with :data:`JUDGE_SEED` (several
dimensions at once, seeds of their own), and :func:`draw_structures` draws a fresh judging half from any seed
(``drawn-SEED-I``, the I-th structure drawn with SEED, is a name every command accepts). A method is designed on
the first half and reported on the second; one that wins on the first and not on the second has learned the corpus.

:func:`~fairseq_speaker.toy.structure_corpus.write_structure` writes a structure's corpus as the styles mode writes
its own (``{split}.{en,fr,spk,traits}`` for train, valid, test and heldout; ``speakers.tsv``; ``speakers.json``, the
model and every speaker's truth), so that ``trait_accuracy``, the demo's table, ``fairseq-speaker-onboarding-eval``
and the Bayes oracle of :mod:`fairseq_speaker.toy.oracle` read it. From the command line::

    python -m fairseq_speaker.toy.corpus --list-structures
    python -m fairseq_speaker.toy.corpus --out raw --structure early
    python -m fairseq_speaker.toy.oracle raw --shots 0 1 3 10 30

This module holds the suite: what a structure is (:class:`Structure`), the dimensions it is drawn from, the two halves
and their drawing (:data:`DESIGN`, :func:`draw_structures`, :data:`JUDGE`, :data:`SUITE`, :func:`get_structure`).
Its parts: :mod:`fairseq_speaker.toy.structure_model` (a structure's generative model, all its Bayes oracle knows:
its traits, made-up phrases and joint prior, :func:`~fairseq_speaker.toy.structure_model.build_model`) and
:mod:`fairseq_speaker.toy.structure_corpus` (its speakers and sentences drawn from that model, and the corpus
written).
"""

import random
import re
from dataclasses import dataclass, fields
from fractions import Fraction
from typing import Dict, List, Optional, Sequence, Tuple

#: the largest ``ways`` with ``early`` (le, la, les petits, les petites)
EARLY_WAYS = 4


@dataclass(frozen=True)
class Structure:
    """A corpus structure: a point in :data:`DIMENSIONS`, its half, its seed and its sizes.

    ``speakers`` training speakers say ``sentences`` training sentences each (``uniform``; with ``zipf``, a number
    drawn per speaker), and ``eval_sentences`` in valid and in test each; ``heldout_speakers`` more say
    ``heldout_sentences`` in ``heldout`` only.
    """

    name: str
    half: str
    seed: int
    correlated: str = "none"
    styles: int = 6
    items: int = 16
    ways: int = 3
    early: bool = False
    topics: bool = False
    sizes: str = "uniform"
    random_share: Fraction = Fraction(0)
    deviation: Fraction = Fraction(1, 10)
    speakers: int = 400
    sentences: int = 30
    eval_sentences: int = 2
    heldout_speakers: int = 200
    heldout_sentences: int = 60

    def __post_init__(self):
        for axis, values in DIMENSIONS.items():
            if getattr(self, axis) not in values:
                raise ValueError(f"structure {self.name}: {axis} = {getattr(self, axis)!r}, not one of {values}")
        if self.half not in HALVES:
            raise ValueError(f"structure {self.name}: half {self.half!r}, not one of {HALVES}")
        if self.early and self.ways > EARLY_WAYS:
            raise ValueError(f"structure {self.name}: early commitment has at most {EARLY_WAYS} ways")

    def point(self) -> Tuple:
        """Its coordinates in :data:`DIMENSIONS`."""
        return tuple(getattr(self, axis) for axis in DIMENSIONS)

    def describe(self) -> str:
        base = Structure("", "design", 0)
        changed = [f"{axis} {_show(getattr(self, axis))}" for axis in DIMENSIONS
                   if getattr(self, axis) != getattr(base, axis)]
        return ", ".join(changed) or "the base point"


def _show(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


#: the dimensions a structure is drawn from: axis -> its values (the first of each is ``base``'s, but ``styles``)
DIMENSIONS = {
    "correlated": ("none", "address", "gender"),
    "styles": (6, 4, 12, 80),
    "items": (16, 4, 48, 160),
    "ways": (3, 2, 4),
    "early": (False, True),
    "topics": (False, True),
    "sizes": ("uniform", "zipf"),
    "random_share": (Fraction(0), Fraction(1, 4)),
    "deviation": (Fraction(1, 10), Fraction(1, 5)),
}
HALVES = ("design", "judge")
#: the seed the judging half is drawn with
JUDGE_SEED = 20261127
#: the number of structures of the judging half
JUDGE_COUNT = 6
#: the most structures one draw makes (``drawn-SEED-I``: I up to this)
MOST_DRAWN = 100

#: the design half: ``base`` and one dimension changed at a time, each with a fixed seed
DESIGN = [
    Structure("base", "design", 101),
    Structure("correlated-address", "design", 102, correlated="address"),
    Structure("binary-many", "design", 103, items=48, ways=2),
    Structure("multiway-few", "design", 104, items=4, ways=4),
    Structure("rare-words", "design", 105, items=160, ways=2),
    Structure("early", "design", 106, early=True),
    Structure("topic", "design", 107, topics=True),
    Structure("zipf", "design", 108, sizes="zipf"),
    Structure("random-choosers", "design", 109, random_share=Fraction(1, 4)),
    Structure("many-styles", "design", 110, styles=80),
]


def draw_structures(seed: int, count: int, prefix: Optional[str] = None, avoid: Sequence[Structure] = DESIGN
                    ) -> List[Structure]:
    """``count`` judging structures drawn with ``seed``, balanced on every axis of :data:`DIMENSIONS`: each axis
    deals its values in turn, in an order drawn anew for each round of them (so that every value comes about
    equally often and the axes are independent of each other); a point of ``avoid`` or one already drawn is
    drawn again. Each has a corpus seed of its own (from 1,000 up: the design half's are below). Named
    ``{prefix}-{i}`` (default ``drawn-{seed}-{i}``), i from 1."""
    if not 0 <= count <= MOST_DRAWN:
        raise ValueError(f"{count} structures drawn: 0 to {MOST_DRAWN}")
    rng = random.Random(f"suite-{seed}")
    taken = {s.point() for s in avoid}
    decks: Dict[str, List] = {axis: [] for axis in DIMENSIONS}
    drawn: List[Structure] = []
    prefix = f"drawn-{seed}" if prefix is None else prefix
    while len(drawn) < count:
        point = {}
        for axis, values in DIMENSIONS.items():
            if not decks[axis]:
                decks[axis] = rng.sample(values, len(values))
            point[axis] = decks[axis].pop()
        if tuple(point.values()) in taken or (point["early"] and point["ways"] > EARLY_WAYS):
            continue
        taken.add(tuple(point.values()))
        drawn.append(Structure(f"{prefix}-{len(drawn) + 1}", "judge", rng.randrange(1000, 10 ** 6), **point))
    return drawn


#: the judging half, drawn once from the dimensions (see :func:`draw_structures`)
JUDGE = draw_structures(JUDGE_SEED, JUDGE_COUNT, prefix="judge")
#: every named structure: name -> structure (the design half, then the judging half)
SUITE: Dict[str, Structure] = {s.name: s for s in DESIGN + JUDGE}


def get_structure(name: str) -> Structure:
    """The structure named ``name``: one of :data:`SUITE`, or ``drawn-SEED-I`` (the I-th of
    :func:`draw_structures` with SEED)."""
    if name in SUITE:
        return SUITE[name]
    drawn = re.fullmatch(r"drawn-(0|[1-9][0-9]*)-([1-9][0-9]*)", name)  # one spelling each: ASCII, no leading 0
    if drawn is not None and int(drawn.group(2)) <= MOST_DRAWN:
        return draw_structures(int(drawn.group(1)), int(drawn.group(2)))[-1]
    raise ValueError(f"no structure {name!r}; the structures: {', '.join(SUITE)} (or drawn-SEED-I, I from 1 to "
                     f"{MOST_DRAWN}: a fresh draw of the judging half's dimensions)")



def structure_json(structure: Structure) -> Dict:
    """A structure's fields, as JSON (fractions as text)."""
    return {f.name: (str(getattr(structure, f.name)) if isinstance(getattr(structure, f.name), Fraction)
                     else getattr(structure, f.name)) for f in fields(structure)}


def list_structures() -> str:
    """One line per named structure: its name, half, seed and where it differs from ``base``."""
    width = max(len(name) for name in SUITE)
    return "\n".join(f"{s.name:<{width}}  {s.half:<6}  seed {s.seed:<6}  {s.describe()}" for s in SUITE.values())

