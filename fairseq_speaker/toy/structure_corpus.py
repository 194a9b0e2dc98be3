"""The corpus of a structure of the corpus suite (:mod:`fairseq_speaker.toy.structures`): its speakers
(:class:`StructureSpeaker`, drawn from the structure's model by :func:`make_structure_speakers`), their sentences (the
styles mode's frames, the phrases of the structure's traits in them: :func:`make_structure_sentence`), how many each
training speaker says (:func:`training_sizes`), and the corpus written as the styles mode writes its own
(:func:`write_structure`). Its siblings: :mod:`fairseq_speaker.toy.structures` (the structures of the suite) and
:mod:`fairseq_speaker.toy.structure_model` (the generative model the speakers and sentences are drawn from).
"""

import json
import os
import random
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_speaker.analysis.speaker_words import Trait
from fairseq_speaker.toy.lexicon import (
    ADDRESS_VERBS, GENDERED_ADJECTIVES, INVARIABLE_ADJECTIVES, NOUNS, PLACES, STYLE_NOUN_SHARE, TIMES, remove_split,
    style_word, write_split)
from fairseq_speaker.toy.structure_model import RANDOM, TOPIC, TOPICS, StructureModel, build_model
from fairseq_speaker.toy.structures import Structure, structure_json

#: with ``topics``, the probability that a topic sentence is of the speaker's own topic (else one drawn uniformly)
OWN_TOPIC = 0.8
#: with ``sizes`` = ``zipf``, the fewest and the most training sentences of a speaker
ZIPF_RANGE = (1, 200)


@dataclass(frozen=True)
class StructureSpeaker:
    """A speaker of a structure: the value of each trait, the phrases where they leave their style
    ((phrase, their own translation), in sorted order), their topic (with ``topics``)."""

    name: str
    values: Tuple[Tuple[str, str], ...]
    deviations: Tuple[Tuple[str, str], ...] = ()
    topic: Optional[str] = None

    def value(self, trait: str) -> str:
        return dict(self.values)[trait]

    def truth(self) -> Dict:
        return {**dict(self.values), "deviations": dict(self.deviations), "topic": self.topic}


def _draw(rng: random.Random, weights: Dict, keys: Sequence):
    u, acc = rng.random(), 0.0
    for key in keys:
        acc += float(weights[key])
        if u < acc:
            return key
    return keys[-1]


def make_structure_speakers(model: StructureModel, count: int, rng: random.Random, prefix: str = "spk"
                            ) -> List[StructureSpeaker]:
    """``count`` speakers drawn independently from ``model``: the traits' values from the joint prior, then the
    phrases where they leave their style (each with the style's deviation rate, for a translation drawn uniformly
    among the others), then their topic (uniform)."""
    keys = sorted(model.joint)
    speakers = []
    for i in range(count):
        values = _draw(rng, model.joint, keys)
        deviations = []
        for trait, value in zip(model.traits, values):
            if value == RANDOM or not trait.deviation:
                continue
            for item in sorted(trait.items):
                if rng.random() < trait.deviation:
                    deviations.append((item, rng.choice([o for o in trait.items[item]
                                                         if o != trait.table[value][item]])))
        topic = rng.choice(sorted(model.topics)) if model.topics else None
        speakers.append(StructureSpeaker(f"{prefix}{i:03d}", tuple((t.name, v) for t, v in zip(model.traits, values)),
                                         tuple(deviations), topic))
    return speakers


class _SentenceBuilder:
    """The sentences of a structure: the styles mode's frames, the phrases of the structure's traits in them."""

    def __init__(self, rng: random.Random, model: StructureModel, speaker: StructureSpeaker):
        self.rng, self.model, self.speaker = rng, model, speaker
        self.traits: List[Trait] = []

    def say(self, trait_name: str, item: str) -> str:
        trait = self.model.trait(trait_name)
        value = self.speaker.value(trait_name)
        if value == RANDOM:
            chosen = self.rng.choice(trait.items[item])
        else:
            chosen = dict(self.speaker.deviations).get(item, trait.table[value][item]) if trait_name == "style" \
                else trait.table[value][item]
        self.record(trait_name, chosen, trait.items[item])
        return chosen

    def record(self, trait: str, chosen: str, options: Sequence[str]) -> None:
        self.traits.append(Trait(trait, style_word(chosen), tuple(style_word(o) for o in options if o != chosen)))

    def noun(self) -> Tuple[str, str]:
        if self.rng.random() < STYLE_NOUN_SHARE:
            en = self.rng.choice(sorted(self.model.trait("style").items))
            return en, self.say("style", en)
        en = self.rng.choice(sorted(NOUNS))
        return en, NOUNS[en]

    def you(self) -> bool:
        """Whether the speaker says "vous" (recorded)."""
        return self.say("address", "you") == "vous"

    def clause(self) -> Tuple[str, str]:
        kind = self.rng.randrange(7 if self.model.topics else 6)
        if kind == 0:
            adj = self.rng.choice(sorted(GENDERED_ADJECTIVES))
            return f"i am {adj}", f"je suis {self.say('gender', adj)}"
        if kind == 1:
            adj = self.rng.choice(sorted(GENDERED_ADJECTIVES))
            time = self.rng.choice(sorted(TIMES))
            return f"i was {adj} {time}", f"j' étais {self.say('gender', adj)} {TIMES[time]}"
        if kind == 2:
            place = self.rng.choice(sorted(PLACES))
            return f"i went {place}", f"je suis {self.say('gender', 'went')} {PLACES[place]}"
        if kind == 3:
            en_verb, informal, formal = self.rng.choice(ADDRESS_VERBS)
            fr_verb = formal if self.you() else informal
            en_noun, fr_noun = self.noun()
            return f"{en_verb} {en_noun}", f"{fr_verb} {fr_noun}"
        if kind == 4:
            adj = self.rng.choice(sorted(INVARIABLE_ADJECTIVES))
            return f"you are {adj}", f"{'vous êtes' if self.you() else 'tu es'} {INVARIABLE_ADJECTIVES[adj]}"
        if kind == 5:
            en_noun, fr_noun = self.noun()
            time = self.rng.choice(sorted(TIMES))
            return f"i saw {en_noun} {time}", f"j' ai vu {fr_noun} {TIMES[time]}"
        topic = self.speaker.topic if self.rng.random() < OWN_TOPIC else self.rng.choice(sorted(self.model.topics))
        item = self.rng.choice(sorted(self.model.topic_items))
        chosen = self.model.topics[topic][item]
        self.record(TOPIC, chosen, self.model.topic_items[item])
        en_context, fr_context = TOPICS[topic]
        return f"{en_context} i saw {item}", f"{fr_context} j' ai vu {chosen}"


def make_structure_sentence(rng: random.Random, model: StructureModel, speaker: StructureSpeaker
                            ) -> Tuple[str, str, List[Trait]]:
    """One (English, French, speaker words) triple of ``speaker``."""
    builder = _SentenceBuilder(rng, model, speaker)
    parts = [builder.clause() for _ in range(1 if rng.random() < 0.6 else 2)]
    return " and ".join(p[0] for p in parts) + " .", " et ".join(p[1] for p in parts) + " .", builder.traits


def training_sizes(structure: Structure) -> List[int]:
    """The training sentences of each training speaker: ``sentences`` each, or with ``zipf`` drawn from
    p(c) ∝ 1/c on :data:`ZIPF_RANGE`."""
    if structure.sizes == "uniform":
        return [structure.sentences] * structure.speakers
    rng = random.Random(f"sizes-{structure.seed}")
    counts = list(range(ZIPF_RANGE[0], ZIPF_RANGE[1] + 1))
    return rng.choices(counts, weights=[1 / c for c in counts], k=structure.speakers)


def _sentences(rng: random.Random, model: StructureModel, speakers: Sequence[StructureSpeaker], sizes: Sequence[int]
               ) -> List[Tuple[str, str, str, List[Trait]]]:
    rows = []
    for speaker, size in zip(speakers, sizes):
        for _ in range(size):
            en, fr, traits = make_structure_sentence(rng, model, speaker)
            rows.append((en, fr, speaker.name, traits))
    rng.shuffle(rows)
    return rows


def _heldout_rows(rng: random.Random, model: StructureModel, speakers: Sequence[StructureSpeaker], size: int
                  ) -> List[Tuple[str, str, str, List[Trait]]]:
    """The held-out speakers' sentences, dealt round-robin (each speaker's in the order they are known)."""
    rows = []
    for _ in range(size):
        for speaker in speakers:
            en, fr, traits = make_structure_sentence(rng, model, speaker)
            rows.append((en, fr, speaker.name, traits))
    return rows


def write_structure(out: str, structure: Structure, src: str = "en", tgt: str = "fr") -> List[StructureSpeaker]:
    """Write ``structure``'s corpus to ``out`` (see :mod:`fairseq_speaker.toy.structures`); returns its speakers,
    training ones (``spk000``, ...) then held-out ones (``new000``, ...)."""
    model = build_model(structure)
    train = make_structure_speakers(model, structure.speakers, random.Random(f"speakers-{structure.seed}"))
    heldout = make_structure_speakers(model, structure.heldout_speakers,
                                      random.Random(f"heldout-speakers-{structure.seed}"), prefix="new")
    os.makedirs(out, exist_ok=True)
    rng = random.Random(f"sentences-{structure.seed}")
    write_split(out, "train", _sentences(rng, model, train, training_sizes(structure)), src, tgt)
    for split in ("valid", "test"):
        write_split(out, split, _sentences(rng, model, train, [structure.eval_sentences] * len(train)), src, tgt)
    if heldout:
        write_split(out, "heldout", _heldout_rows(random.Random(f"heldout-sentences-{structure.seed}"), model,
                                                   heldout, structure.heldout_sentences), src, tgt)
    else:
        remove_split(out, "heldout", src, tgt)  # an earlier corpus's held-out speakers, not this one's
    names = [t.name for t in model.traits]
    with open(os.path.join(out, "speakers.tsv"), "w", encoding="utf-8") as f:
        f.write("\t".join(["speaker", *names, "deviations", "topic"]) + "\n")
        for s in train + heldout:
            own = "; ".join(f"{item} = {french}" for item, french in s.deviations) or "-"
            f.write("\t".join([s.name, *(s.value(n) for n in names), own, s.topic or "-"]) + "\n")
    with open(os.path.join(out, "speakers.json"), "w", encoding="utf-8") as f:
        json.dump(dict(model.to_json(), dimensions=structure_json(structure),
                       speakers={s.name: s.truth() for s in train + heldout}), f, ensure_ascii=False, indent=1)
        f.write("\n")
    return train + heldout

