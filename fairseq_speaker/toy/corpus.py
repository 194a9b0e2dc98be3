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

Usage::

    python -m fairseq_speaker.toy.corpus --out raw --train 6000 --valid 300 --test 300 [--heldout]
"""

import argparse
import json
import os
import random
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

from fairseq_speaker.analysis.speaker_words import Trait

GENDERS = ("f", "m")
ADDRESSES = ("informal", "formal")
PROFESSIONS = ("doctor", "police", "teacher")

# adjective -> (masculine, feminine)
GENDERED_ADJECTIVES = {
    "tired": ("fatigué", "fatiguée"),
    "happy": ("content", "contente"),
    "ready": ("prêt", "prête"),
    "sure": ("sûr", "sûre"),
    "sorry": ("désolé", "désolée"),
    "busy": ("occupé", "occupée"),
    "lost": ("perdu", "perdue"),
    "surprised": ("surpris", "surprise"),
}
INVARIABLE_ADJECTIVES = {
    "calm": "calme",
    "nice": "sympathique",
    "honest": "honnête",
    "kind": "aimable",
    "fast": "rapide",
    "free": "libre",
    "sad": "triste",
    "sick": "malade",
}
NOUNS = {
    "the car": "la voiture",
    "the book": "le livre",
    "the house": "la maison",
    "the bread": "le pain",
    "the money": "l' argent",
    "the key": "la clé",
    "the phone": "le téléphone",
    "the dog": "le chien",
    "the train": "le train",
    "the letter": "la lettre",
}
# English noun -> translation preferred by each profession, in PROFESSIONS order
PROFESSION_NOUNS = {
    "the drugs": ("les médicaments", "les drogues", "les produits"),
    "the case": ("le cas", "l' affaire", "le dossier"),
    "the report": ("le compte-rendu", "le rapport", "le bulletin"),
    "the person": ("le patient", "le suspect", "l' élève"),
}
PLACES = {
    "to the station": "à la gare",
    "to the market": "au marché",
    "to the office": "au bureau",
    "to the hospital": "à l' hôpital",
    "to the school": "à l' école",
    "to the beach": "à la plage",
    "home": "à la maison",
}
TIMES = {"today": "aujourd'hui", "yesterday": "hier", "this morning": "ce matin", "tonight": "ce soir"}
# (English, informal French, formal French)
ADDRESS_VERBS = (("you want", "tu veux", "vous voulez"), ("you have", "tu as", "vous avez"))


@dataclass(frozen=True)
class Speaker:
    name: str
    gender: str
    address: str
    profession: str


#: every combination of (gender, address, profession)
COMBINATIONS = [(g, a, p) for p in PROFESSIONS for a in ADDRESSES for g in GENDERS]
#: one sentence of the corpus: English, French, speaker, the speaker-dependent words of the French
Row = Tuple[str, str, str, List[Trait]]


def make_speakers(num_speakers: int) -> List[Speaker]:
    """Speakers cycle through every combination of traits, so each combination is shared."""
    return [Speaker(f"spk{i:03d}", *COMBINATIONS[i % len(COMBINATIONS)]) for i in range(num_speakers)]


def make_heldout_speakers(num_speakers: int) -> List[Speaker]:
    """Speakers ``new000``, ``new001``, ... for onboarding: every 5th combination of traits (5 is prime to
    the 12 combinations), so that even a few of them mix genders, forms of address and professions."""
    return [Speaker(f"new{i:03d}", *COMBINATIONS[5 * i % len(COMBINATIONS)]) for i in range(num_speakers)]


def _last_word(phrase: str) -> str:
    return phrase.split()[-1]


class _Builder:
    def __init__(self, rng: random.Random, speaker: Speaker):
        self.rng, self.speaker = rng, speaker
        self.traits: List[Trait] = []

    def gendered(self, pair: Tuple[str, str]) -> str:
        chosen = pair[1] if self.speaker.gender == "f" else pair[0]
        other = pair[0] if self.speaker.gender == "f" else pair[1]
        self.traits.append(Trait("gender", chosen, (other,)))
        return chosen

    def noun(self) -> Tuple[str, str]:
        if self.rng.random() < 0.5:
            en = self.rng.choice(sorted(PROFESSION_NOUNS))
            options = PROFESSION_NOUNS[en]
            chosen = options[PROFESSIONS.index(self.speaker.profession)]
            others = tuple(_last_word(o) for o in options if o != chosen)
            self.traits.append(Trait("profession", _last_word(chosen), others))
            return en, chosen
        en = self.rng.choice(sorted(NOUNS))
        return en, NOUNS[en]

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


def make_sentence(rng: random.Random, speaker: Speaker) -> Tuple[str, str, List[Trait]]:
    """One (English, French, traits) triple spoken by ``speaker``."""
    builder = _Builder(rng, speaker)
    parts = [builder.clause() for _ in range(1 if rng.random() < 0.6 else 2)]
    en = " and ".join(p[0] for p in parts) + " ."
    fr = " et ".join(p[1] for p in parts) + " ."
    return en, fr, builder.traits


def write_corpus(out: str, sizes: Dict[str, int], num_speakers: int = 24, seed: int = 1,
                 src: str = "en", tgt: str = "fr", heldout_speakers: int = 0,
                 heldout_sentences: int = 40) -> List[Speaker]:
    """Write ``{split}.{src,tgt,spk,traits}`` for every split, and ``speakers.tsv``; returns the speakers.

    Every speaker speaks in every split (sentences are dealt round-robin, then shuffled). With
    ``heldout_speakers`` > 0, that many more speakers (:func:`make_heldout_speakers`) say
    ``heldout_sentences`` sentences each in the split ``heldout`` and nowhere else; they come after
    the others in ``speakers.tsv`` and in the list returned. The other splits are the same with or
    without them (the held-out sentences have a random generator of their own).
    """
    speakers = make_speakers(num_speakers)
    for split, size in sizes.items():
        if size < num_speakers:
            raise ValueError(f"split {split} has {size} sentences, fewer than the {num_speakers} speakers")
    if "heldout" in sizes and heldout_speakers:
        raise ValueError("the split 'heldout' is the held-out speakers': give the other splits other names")
    if heldout_speakers < 0 or (heldout_speakers and heldout_sentences < 1):
        raise ValueError(f"{heldout_speakers} held-out speakers of {heldout_sentences} sentences each: "
                         f"both must be positive (or no held-out speakers: 0)")
    rng = random.Random(seed)
    os.makedirs(out, exist_ok=True)
    for split, size in sizes.items():
        _write_split(out, split, _deal(rng, speakers, size), src, tgt)
    heldout = make_heldout_speakers(heldout_speakers)
    if heldout:
        rng = random.Random(f"heldout-{seed}")
        _write_split(out, "heldout", _deal(rng, heldout, heldout_speakers * heldout_sentences), src, tgt)
    with open(os.path.join(out, "speakers.tsv"), "w", encoding="utf-8") as f:
        f.write("speaker\tgender\taddress\tprofession\n")
        for s in speakers + heldout:
            f.write(f"{s.name}\t{s.gender}\t{s.address}\t{s.profession}\n")
    return speakers + heldout


def _deal(rng: random.Random, speakers: Sequence[Speaker], size: int) -> List[Row]:
    """``size`` sentences dealt round-robin to ``speakers``, shuffled: (English, French, speaker, traits)."""
    rows = []
    for i in range(size):
        speaker = speakers[i % len(speakers)]
        en, fr, traits = make_sentence(rng, speaker)
        rows.append((en, fr, speaker.name, traits))
    rng.shuffle(rows)
    return rows


def _write_split(out: str, split: str, rows: Sequence[Row], src: str, tgt: str) -> None:
    files = {ext: open(os.path.join(out, f"{split}.{ext}"), "w", encoding="utf-8")
             for ext in (src, tgt, "spk", "traits")}
    try:
        for en, fr, name, traits in rows:
            files[src].write(en + "\n")
            files[tgt].write(fr + "\n")
            files["spk"].write(name + "\n")
            files["traits"].write(json.dumps([t.__dict__ for t in traits], ensure_ascii=False) + "\n")
    finally:
        for f in files.values():
            f.close()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder to write the corpus to")
    parser.add_argument("--train", type=int, default=6000, help="training sentences")
    parser.add_argument("--valid", type=int, default=300, help="validation sentences")
    parser.add_argument("--test", type=int, default=300, help="test sentences")
    parser.add_argument("--speakers", type=int, default=24, help="number of speakers")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--heldout", action="store_true",
                        help="also write heldout.{en,fr,spk,traits}: the sentences of speakers who are in no other "
                        "split, to evaluate onboarding (fairseq-speaker-onboarding-eval)")
    parser.add_argument("--heldout-speakers", type=int, default=6, metavar="K", help="held-out speakers (--heldout)")
    parser.add_argument("--heldout-sentences", type=int, default=40, metavar="M",
                        help="sentences of each held-out speaker (--heldout)")
    args = parser.parse_args(argv)
    if args.heldout and (args.heldout_speakers < 1 or args.heldout_sentences < 1):
        parser.error("--heldout-speakers and --heldout-sentences must be at least 1")
    write_corpus(args.out, {"train": args.train, "valid": args.valid, "test": args.test},
                 num_speakers=args.speakers, seed=args.seed, heldout_sentences=args.heldout_sentences,
                 heldout_speakers=args.heldout_speakers if args.heldout else 0)
    print(f"wrote {args.train}/{args.valid}/{args.test} sentences of {args.speakers} speakers to {args.out}")
    if args.heldout:
        print(f"wrote {args.heldout_sentences} sentences of each of {args.heldout_speakers} held-out speakers "
              f"to {args.out}/heldout.*")


if __name__ == "__main__":
    main()
