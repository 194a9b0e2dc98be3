"""A synthetic English->French corpus in which the speaker changes the translation.

Every speaker has three traits that the English source never shows:

* ``gender``: a woman says "je suis fatiguée", a man "je suis fatigué";
* ``address``: formal speakers say "vous voulez", informal ones "tu veux";
* ``profession``: a group of speakers shares word preferences ("the drugs" are
  "les médicaments" to a doctor, "les drogues" to a police officer, "les produits"
  to a teacher).

A model that does not know the speaker can only guess these words; one that
learns a per-speaker bias can get them right. Each split comes with
``{split}.traits`` (JSON lines): for every speaker-dependent word of the
reference, the word expected and the words a different speaker would use,
which :func:`trait_accuracy` checks in a hypothesis.

With ``--heldout`` (``heldout_speakers`` in Python), speakers who never appear in
train/valid/test each get ``--heldout-sentences`` sentences in ``heldout.*``: the data of
``fairseq-speaker-onboarding-eval``, which adapts a model to them on a few sentences.

**The styles mode** (``--styles K``, ``styles=K`` in Python) asks how well a speaker can be learned
from few sentences. Profession gives way to a ``style`` trait over the ambiguous phrases of
:data:`STYLE_ITEMS`, English phrases with several French translations that are all correct ("the
bike": "le vélo", "la bicyclette", "la bécane"). There are K styles, each a choice of one translation
per phrase, drawn at random (:func:`make_styles`). Every speaker belongs to one style (speakers cycle
through every combination of gender, address and style, so the styles are equally shared: the
prior is uniform) and leaves it, on their own, on each phrase with probability ``--deviation``
(default 0.1): for that phrase the speaker says another translation, drawn uniformly among the
others and then the same every time they say it. A noun slot holds an ambiguous phrase three times
in four (about 0.35 style words a sentence: 10 in 30 sentences); gender and address words are as
frequent as in the default mode. The corpus also
writes ``speakers.json``, the generative model (phrases, styles, deviation rate, prior) and each
speaker's gender, address, style and deviations, which the Bayes oracle of
:mod:`fairseq_speaker.toy.oracle` reads (the model only; a speaker's own style it infers). Without
``--styles`` the corpus is byte for byte what it was before the mode existed.

**The corpus suite** (``--structure NAME``, ``--list-structures``): corpora of many structures, each a point in
independent dimensions (correlated traits, binary or multi-way choices, rare or frequent words, early commitment,
words chosen by the sentence's topic, speakers of very different sizes, speakers who choose at random, many styles
with few speakers each), split into a half to design on and a half to judge on; see
:mod:`fairseq_speaker.toy.structures`. They write the same files as the styles mode.

Usage::

    python -m fairseq_speaker.toy.corpus --out raw --train 6000 --valid 300 --test 300 [--heldout]
    python -m fairseq_speaker.toy.corpus --out raw --styles 6 --deviation 0.1 \\
        --speakers 400 --sentences-per-speaker 30 --valid 800 --test 800 --heldout
    python -m fairseq_speaker.toy.corpus --list-structures
    python -m fairseq_speaker.toy.corpus --out raw --structure early
"""

import argparse
import json
import math
import os
import random
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple, Union

from fairseq_speaker.analysis.speaker_words import Trait, read_traits, trait_accuracy  # noqa: F401  (also here before 0.5.0)
from fairseq_speaker.errors import command
from fairseq_speaker.runtime import check_at_least, options_given, parse_seed
from fairseq_speaker.toy.lexicon import (  # noqa: F401  (the corpus's words, here since before the suite)
    TRAITS, GENDERS, ADDRESSES, PROFESSIONS, GENDERED_ADJECTIVES, INVARIABLE_ADJECTIVES, NOUNS, PROFESSION_NOUNS, PLACES, TIMES, ADDRESS_VERBS, STYLE_ITEMS, DEFAULT_DEVIATION, STYLE_NOUN_SHARE, Speaker, Styles, style_word, Row, remove_split, write_split)

if TYPE_CHECKING:
    from fairseq_speaker.toy.structure_model import StructureModel

def make_styles(num_styles: int, seed: int = 1, deviation: float = DEFAULT_DEVIATION) -> Styles:
    """``num_styles`` styles over :data:`STYLE_ITEMS`, each choosing every translation uniformly at random
    (a generator of its own, so the rest of the corpus does not depend on it); a uniform prior."""
    if num_styles < 1:
        raise ValueError(f"{num_styles} styles: at least 1")
    rng = random.Random(f"styles-{seed}")
    table = [{item: rng.choice(STYLE_ITEMS[item]) for item in sorted(STYLE_ITEMS)} for _ in range(num_styles)]
    return Styles(dict(STYLE_ITEMS), table, deviation, [1.0 / num_styles] * num_styles)


def read_styles(path: str) -> Union["Styles", "StructureModel"]:
    """The model of a corpus's ``speakers.json``: the styles mode's (:class:`Styles`), or a structure's of the
    corpus suite (:class:`~fairseq_speaker.toy.structure_model.StructureModel`, written with ``--structure NAME``); the
    Bayes oracle of :mod:`fairseq_speaker.toy.oracle` takes either."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if isinstance(data, dict) and "structure" in data:
        from fairseq_speaker.toy.structure_model import StructureModel  # the suite builds on this module

        return StructureModel.from_json(data)
    return Styles.from_json(data)


#: every combination of (gender, address, profession)
COMBINATIONS = [(g, a, p) for p in PROFESSIONS for a in ADDRESSES for g in GENDERS]


def make_speakers(num_speakers: int) -> List[Speaker]:
    """Speakers cycle through every combination of traits, so each combination is shared."""
    return [Speaker(f"spk{i:03d}", *COMBINATIONS[i % len(COMBINATIONS)]) for i in range(num_speakers)]


def make_heldout_speakers(num_speakers: int) -> List[Speaker]:
    """Speakers ``new000``, ``new001``, ... for onboarding: every 5th combination of traits (5 is prime to
    the 12 combinations), so that even a few of them mix genders, forms of address and professions."""
    return [Speaker(f"new{i:03d}", *COMBINATIONS[5 * i % len(COMBINATIONS)]) for i in range(num_speakers)]


def make_style_speakers(num_speakers: int, styles: Styles, rng: random.Random, heldout: bool = False
                        ) -> List[Speaker]:
    """Speakers of the styles mode. Training speakers (``spk000``, ...) cycle through every combination of
    (gender, address, style), so every style is shared by as many speakers; held-out ones (``new000``, ...)
    step through them by the smallest stride of at least 5 prime to their number, so that even a few of
    them mix traits. Each speaker then leaves their style on each phrase with probability
    ``styles.deviation``, for a translation drawn uniformly among the others (``rng``: speakers in order,
    phrases in sorted order, one draw for whether they leave their style, one more for where to)."""
    combinations = [(g, a, k) for k in range(styles.num_styles) for a in ADDRESSES for g in GENDERS]
    stride = next(s for s in range(5, 5 + len(combinations) + 1) if math.gcd(s, len(combinations)) == 1)
    speakers = []
    for i in range(num_speakers):
        gender, address, style = combinations[(stride * i if heldout else i) % len(combinations)]
        deviations = []
        for item in sorted(styles.items):
            if rng.random() < styles.deviation:
                own = [o for o in styles.items[item] if o != styles.table[style][item]]
                deviations.append((item, rng.choice(own)))
        name = f"new{i:03d}" if heldout else f"spk{i:03d}"
        speakers.append(Speaker(name, gender, address, None, style, tuple(deviations)))
    return speakers


def _last_word(phrase: str) -> str:
    return phrase.split()[-1]


class _Builder:
    def __init__(self, rng: random.Random, speaker: Speaker, styles: Optional[Styles] = None):
        self.rng, self.speaker, self.styles = rng, speaker, styles
        self.traits: List[Trait] = []

    def gendered(self, pair: Tuple[str, str]) -> str:
        chosen = pair[1] if self.speaker.gender == "f" else pair[0]
        other = pair[0] if self.speaker.gender == "f" else pair[1]
        self.traits.append(Trait("gender", chosen, (other,)))
        return chosen

    def noun(self) -> Tuple[str, str]:
        if self.styles is not None:
            if self.rng.random() < STYLE_NOUN_SHARE:
                return self.style_noun()
        elif self.rng.random() < 0.5:
            en = self.rng.choice(sorted(PROFESSION_NOUNS))
            options = PROFESSION_NOUNS[en]
            chosen = options[PROFESSIONS.index(self.speaker.profession)]
            others = tuple(_last_word(o) for o in options if o != chosen)
            self.traits.append(Trait("profession", _last_word(chosen), others))
            return en, chosen
        en = self.rng.choice(sorted(NOUNS))
        return en, NOUNS[en]

    def style_noun(self) -> Tuple[str, str]:
        en = self.rng.choice(sorted(self.styles.items))
        chosen = self.styles.choice(self.speaker, en)
        others = tuple(style_word(o) for o in self.styles.items[en] if o != chosen)
        self.traits.append(Trait("style", style_word(chosen), others))
        return en, chosen

    def address(self) -> Tuple[str, str]:
        en, informal, formal = self.rng.choice(ADDRESS_VERBS)
        chosen, other = (formal, informal) if self.speaker.address == "formal" else (informal, formal)
        self.traits.append(Trait("address", chosen.split()[0], (other.split()[0],)))
        return en, chosen

    def clause(self) -> Tuple[str, str]:
        kind = self.rng.randrange(6)
        if kind == 0:
            adj = self.rng.choice(sorted(GENDERED_ADJECTIVES))
            return f"i am {adj}", f"je suis {self.gendered(GENDERED_ADJECTIVES[adj])}"
        if kind == 1:
            adj = self.rng.choice(sorted(GENDERED_ADJECTIVES))
            time = self.rng.choice(sorted(TIMES))
            return f"i was {adj} {time}", f"j' étais {self.gendered(GENDERED_ADJECTIVES[adj])} {TIMES[time]}"
        if kind == 2:
            place = self.rng.choice(sorted(PLACES))
            return f"i went {place}", f"je suis {self.gendered(('allé', 'allée'))} {PLACES[place]}"
        if kind == 3:
            en_verb, fr_verb = self.address()
            en_noun, fr_noun = self.noun()
            return f"{en_verb} {en_noun}", f"{fr_verb} {fr_noun}"
        if kind == 4:
            adj = self.rng.choice(sorted(INVARIABLE_ADJECTIVES))
            chosen, other = ("vous êtes", "tu es") if self.speaker.address == "formal" else ("tu es", "vous êtes")
            self.traits.append(Trait("address", chosen.split()[0], (other.split()[0],)))
            return f"you are {adj}", f"{chosen} {INVARIABLE_ADJECTIVES[adj]}"
        en_noun, fr_noun = self.noun()
        time = self.rng.choice(sorted(TIMES))
        return f"i saw {en_noun} {time}", f"j' ai vu {fr_noun} {TIMES[time]}"


def make_sentence(rng: random.Random, speaker: Speaker, styles: Optional[Styles] = None
                  ) -> Tuple[str, str, List[Trait]]:
    """One (English, French, traits) triple spoken by ``speaker`` (of the styles mode if ``styles``)."""
    builder = _Builder(rng, speaker, styles)
    parts = [builder.clause() for _ in range(1 if rng.random() < 0.6 else 2)]
    en = " and ".join(p[0] for p in parts) + " ."
    fr = " et ".join(p[1] for p in parts) + " ."
    return en, fr, builder.traits


def write_corpus(out: str, sizes: Dict[str, int], num_speakers: int = 24, seed: int = 1,
                 src: str = "en", tgt: str = "fr", heldout_speakers: int = 0,
                 heldout_sentences: int = 40, styles: int = 0,
                 deviation: float = DEFAULT_DEVIATION) -> List[Speaker]:
    """Write ``{split}.{src,tgt,spk,traits}`` for every split, and ``speakers.tsv``; returns the speakers.

    Every speaker speaks in every split (sentences are dealt round-robin, then shuffled). With
    ``heldout_speakers`` > 0, that many more speakers (:func:`make_heldout_speakers`) say
    ``heldout_sentences`` sentences each in the split ``heldout`` and nowhere else; they come after
    the others in ``speakers.tsv`` and in the list returned. The other splits are the same with or
    without them (the held-out sentences have a random generator of their own).

    With ``styles`` = K > 0, the styles mode (see the module's docstring): K styles
    (:func:`make_styles`), speakers of :func:`make_style_speakers` who leave their style on a share
    ``deviation`` of the phrases, and ``speakers.json`` (the model and each speaker's truth) beside
    ``speakers.tsv`` (whose columns are then speaker, gender, address, style and deviations). The
    styles and the training and held-out speakers' deviations each have a random generator of their
    own; with ``styles`` = 0 (the default) ``deviation`` is unused and the corpus is the default mode's.
    """
    if styles < 0:
        raise ValueError(f"{styles} styles: 0 (the default mode) or more")
    if styles and not 0.0 <= deviation <= 1.0:
        raise ValueError(f"deviation {deviation} is not a probability (0 to 1)")
    for split, size in sizes.items():  # before any speaker is made: a typo of a few digits ran for minutes first
        if size < num_speakers:
            raise ValueError(f"split {split} has {size} sentences, fewer than the {num_speakers} speakers")
    model = make_styles(styles, seed, deviation) if styles else None
    if model is None:
        speakers = make_speakers(num_speakers)
    else:
        speakers = make_style_speakers(num_speakers, model, random.Random(f"deviations-{seed}"))
    if "heldout" in sizes and heldout_speakers:
        raise ValueError("the split 'heldout' is the held-out speakers': give the other splits other names")
    if heldout_speakers < 0 or (heldout_speakers and heldout_sentences < 1):
        raise ValueError(f"{heldout_speakers} held-out speakers of {heldout_sentences} sentences each: "
                         f"both must be positive (or no held-out speakers: 0)")
    rng = random.Random(seed)
    os.makedirs(out, exist_ok=True)
    for split, size in sizes.items():
        write_split(out, split, _deal(rng, speakers, size, model), src, tgt)
    if model is None:
        heldout = make_heldout_speakers(heldout_speakers)
    else:
        heldout = make_style_speakers(heldout_speakers, model, random.Random(f"heldout-deviations-{seed}"),
                                      heldout=True)
    if heldout:
        rng = random.Random(f"heldout-{seed}")
        write_split(out, "heldout", _deal(rng, heldout, heldout_speakers * heldout_sentences, model), src, tgt)
    elif "heldout" not in sizes:
        remove_split(out, "heldout", src, tgt)  # an earlier corpus's held-out speakers, not this one's
    with open(os.path.join(out, "speakers.tsv"), "w", encoding="utf-8") as f:
        if model is None:
            f.write("speaker\tgender\taddress\tprofession\n")
            for s in speakers + heldout:
                f.write(f"{s.name}\t{s.gender}\t{s.address}\t{s.profession}\n")
        else:
            f.write("speaker\tgender\taddress\tstyle\tdeviations\n")
            for s in speakers + heldout:
                own = "; ".join(f"{item} = {french}" for item, french in s.deviations) or "-"
                f.write(f"{s.name}\t{s.gender}\t{s.address}\t{s.style}\t{own}\n")
    if model is None:
        if os.path.exists(os.path.join(out, "speakers.json")):  # an earlier styles corpus's, not this one's
            os.remove(os.path.join(out, "speakers.json"))
    else:
        with open(os.path.join(out, "speakers.json"), "w", encoding="utf-8") as f:
            json.dump(dict(model.to_json(), speakers={
                s.name: {"gender": s.gender, "address": s.address, "style": s.style,
                         "deviations": dict(s.deviations)} for s in speakers + heldout}),
                f, ensure_ascii=False, indent=1)
            f.write("\n")
    return speakers + heldout


def _deal(rng: random.Random, speakers: Sequence[Speaker], size: int, styles: Optional[Styles] = None
          ) -> List[Row]:
    """``size`` sentences dealt round-robin to ``speakers``, shuffled: (English, French, speaker, traits)."""
    rows = []
    for i in range(size):
        speaker = speakers[i % len(speakers)]
        en, fr, traits = make_sentence(rng, speaker, styles)
        rows.append((en, fr, speaker.name, traits))
    rng.shuffle(rows)
    return rows


@command(named_errors=False)
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="folder to write the corpus to (required)")
    parser.add_argument("--structure", metavar="NAME",
                        help="write the corpus of a structure of the corpus suite instead (its sizes, model and seed "
                        "are its own; speakers.json for the Bayes oracle): see --list-structures")
    parser.add_argument("--list-structures", action="store_true",
                        help="list the corpus suite's structures, their half (design or judge) and dimensions; "
                        "then exit")
    parser.add_argument("--train", type=int, help="training sentences (default: 6000)")
    parser.add_argument("--sentences-per-speaker", type=int, metavar="N",
                        help="training sentences of each speaker, instead of --train (which is then N x --speakers)")
    parser.add_argument("--valid", type=int, default=300, help="validation sentences")
    parser.add_argument("--test", type=int, default=300, help="test sentences")
    parser.add_argument("--speakers", type=int, default=24, help="number of speakers")
    parser.add_argument("--styles", type=int, default=0, metavar="K",
                        help="the styles mode: K styles of translating ambiguous phrases, shared by the speakers, "
                        "instead of professions; writes speakers.json for the Bayes oracle (default: 0, no styles)")
    parser.add_argument("--deviation", type=float, metavar="P",
                        help=f"with --styles: the probability that a speaker leaves their style on a phrase, for a "
                        f"translation of their own (default: {DEFAULT_DEVIATION})")
    parser.add_argument("--seed", type=parse_seed, default=1)
    parser.add_argument("--heldout", action="store_true",
                        help="also write heldout.{en,fr,spk,traits}: the sentences of speakers who are in no other "
                        "split, to evaluate onboarding (fairseq-speaker-onboarding-eval)")
    parser.add_argument("--heldout-speakers", type=int, default=None, metavar="K",
                        help="held-out speakers (--heldout; default: 6)")
    parser.add_argument("--heldout-sentences", type=int, default=None, metavar="M",
                        help="sentences of each held-out speaker (--heldout; default: 40)")
    args = parser.parse_args(argv)
    if args.list_structures or args.structure is not None:
        return _structure_main(parser, args)
    if args.out is None:
        parser.error("the following arguments are required: --out")
    idle = [flag for flag, value in (("--heldout-speakers", args.heldout_speakers),
                                     ("--heldout-sentences", args.heldout_sentences)) if value is not None]
    if idle and not args.heldout:
        parser.error(f"{' and '.join(idle)} describe the held-out speakers: give --heldout too")
    args.heldout_speakers = 6 if args.heldout_speakers is None else args.heldout_speakers
    args.heldout_sentences = 40 if args.heldout_sentences is None else args.heldout_sentences
    if args.heldout:
        check_at_least(parser, args, ["heldout_speakers", "heldout_sentences"])
    if args.sentences_per_speaker is not None:
        if args.train is not None:
            parser.error("give --train or --sentences-per-speaker, not both")
        check_at_least(parser, args, ["sentences_per_speaker"])
        args.train = args.sentences_per_speaker * args.speakers
    elif args.train is None:
        args.train = 6000
    check_at_least(parser, args, ["train", "valid", "test"])  # "-5 sentences, fewer than the 24 speakers"
    if args.styles < 0:
        parser.error("--styles must be 0 (no styles) or more")
    if args.deviation is not None and not args.styles:
        parser.error("--deviation is the styles mode's: give --styles K too")
    deviation = DEFAULT_DEVIATION if args.deviation is None else args.deviation
    if not 0.0 <= deviation <= 1.0:
        parser.error(f"--deviation {deviation} is not a probability (0 to 1)")
    if args.speakers < 1:
        parser.error(f"--speakers must be at least 1, got {args.speakers}")
    check_out_folder(parser, args.out)
    try:
        write_corpus(args.out, {"train": args.train, "valid": args.valid, "test": args.test},
                     num_speakers=args.speakers, seed=args.seed, heldout_sentences=args.heldout_sentences,
                     heldout_speakers=args.heldout_speakers if args.heldout else 0, styles=args.styles,
                     deviation=deviation)
    except ValueError as e:  # sizes the corpus cannot have (fewer sentences than speakers, ...)
        parser.error(f"{e}: give larger --train/--valid/--test or fewer --speakers")
    except OSError as e:
        parser.error(_unwritable(args.out, e))
    styles = f" in {args.styles} styles (deviation {deviation})" if args.styles else ""
    print(f"wrote {args.train}/{args.valid}/{args.test} sentences of {args.speakers} speakers{styles} to {args.out}")
    if args.heldout:
        print(f"wrote {args.heldout_sentences} sentences of each of {args.heldout_speakers} held-out speakers "
              f"to {args.out}/heldout.*")


def check_out_folder(parser: argparse.ArgumentParser, out: str, option: str = "--out", what: str = "the corpus"
                     ) -> None:
    """Refuse an output folder (``option``) that cannot be ``what``'s folder: empty, a file, or a path through a
    file."""
    if not out:
        parser.error(f"{option} is empty: give a folder for {what}")
    if os.path.exists(out) and not os.path.isdir(out):
        parser.error(f"{option} {out} is a file: give a folder for {what}")
    above = os.path.dirname(os.path.abspath(out))
    while not os.path.exists(above) and os.path.dirname(above) != above:
        above = os.path.dirname(above)
    if not os.path.isdir(above):
        parser.error(f"{option} {out}: {above} is a file, so no folder can be made under it: give a folder for {what}")


def _unwritable(out: str, e: OSError) -> str:
    where = f" ({e.filename})" if e.filename else ""
    return f"--out {out}: the corpus cannot be written there: {e.strerror or e}{where}"


def _structure_main(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--list-structures`` and ``--structure NAME``: a structure fixes every other option but ``--out``."""
    from fairseq_speaker.toy.structure_corpus import write_structure
    from fairseq_speaker.toy.structures import get_structure, list_structures

    if args.list_structures and args.structure is not None:
        parser.error("give --list-structures or --structure NAME, not both")
    # every option is spelt as its destination (--sentences-per-speaker: sentences_per_speaker)
    given = options_given(parser, args, [dest for dest in vars(args) if dest not in ("out", "structure",
                                                                                     "list_structures")])
    option = "--list-structures" if args.list_structures else f"--structure {args.structure}"
    if given:
        parser.error(f"{option} takes no {' '.join(given)}: a structure's sizes, model and seed are its own")
    if args.list_structures:
        if args.out is not None:
            parser.error("--list-structures writes nothing: drop --out")
        print(list_structures())
        return
    try:
        structure = get_structure(args.structure)
    except ValueError as e:
        parser.error(f"--structure: {e}")
    if args.out is None:
        parser.error("the following arguments are required: --out")
    check_out_folder(parser, args.out)
    try:
        speakers = write_structure(args.out, structure)
    except OSError as e:
        parser.error(_unwritable(args.out, e))
    print(f"wrote the structure {structure.name} ({structure.half} half: {structure.describe()}) to {args.out}: "
          f"{structure.speakers} speakers and {len(speakers) - structure.speakers} held-out ones")


if __name__ == "__main__":
    main()
