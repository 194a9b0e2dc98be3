"""The toy corpus's words and traits (:mod:`fairseq_speaker.toy.corpus`), what its modes and the structures of the
corpus suite (:mod:`fairseq_speaker.toy.structures`) write sentences from: the traits, the English phrases with their
French translations, a speaker's traits, the styles model, and how a split's files are written."""

import json
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_speaker.analysis.speaker_words import Trait

#: the corpus's traits, in the order of the tables (profession in the default mode, style in the styles mode and
#: the structures of :mod:`fairseq_speaker.toy.structures`, topic in those whose sentences' topics choose words)
TRAITS = ("gender", "address", "profession", "style", "topic")
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
#: the styles mode's ambiguous phrases: English -> its French translations, all correct. The last word
#: of each translation tells it from the others; it is in no other translation and nowhere else in the
#: corpus, so that a hypothesis's words show which one it chose
STYLE_ITEMS = {
    "the bike": ("le vélo", "la bicyclette", "la bécane"),
    "the job": ("le travail", "le boulot", "l' emploi", "le taf"),
    "the guy": ("le type", "le gars", "le mec"),
    "the shoes": ("les chaussures", "les godasses", "les pompes"),
    "the food": ("la nourriture", "la bouffe"),
    "the kid": ("l' enfant", "le gamin", "le gosse", "le môme"),
    "the flat": ("l' appartement", "l' appart", "le logement"),
    "the computer": ("l' ordinateur", "l' ordi", "le pc"),
    "the friend": ("l' ami", "le pote", "le copain"),
    "the cash": ("les sous", "le fric", "le pognon", "la thune"),
    "the mistake": ("l' erreur", "la faute", "la bêtise"),
    "the party": ("la fête", "la soirée", "la teuf"),
    "the cop": ("le policier", "le flic", "le keuf"),
    "the novel": ("le roman", "le bouquin"),
    "the bus": ("le bus", "l' autobus", "le car"),
    "the fridge": ("le réfrigérateur", "le frigo", "le frigidaire"),
}
#: the styles mode's default share of phrases on which a speaker leaves their style
DEFAULT_DEVIATION = 0.1
#: in the styles mode, the share of noun slots that hold an ambiguous phrase (the default mode: half
#: of them a profession noun)
STYLE_NOUN_SHARE = 0.75


@dataclass(frozen=True)
class Speaker:
    """A speaker's traits. In the styles mode ``profession`` is None, ``style`` the index of the speaker's
    style in :attr:`Styles.table` and ``deviations`` the phrases on which they leave it:
    (English phrase, their own French), in the order of ``sorted(STYLE_ITEMS)``."""

    name: str
    gender: str
    address: str
    profession: Optional[str]
    style: Optional[int] = None
    deviations: Tuple[Tuple[str, str], ...] = ()


@dataclass
class Styles:
    """The generative model of the styles mode, all the Bayes oracle may know of it.

    ``items``: English phrase -> its French translations; ``table[k]``: style k's translation of every
    phrase; ``deviation``: the probability that a speaker leaves their style on a phrase (then saying
    another translation, uniformly drawn, every time); ``prior``: the share of speakers in each style
    (uniform in the corpus the toy writes).
    """

    items: Dict[str, Tuple[str, ...]]
    table: List[Dict[str, str]]
    deviation: float
    prior: List[float]

    def __post_init__(self):
        if not self.table:
            raise ValueError("a styles model needs at least one style")
        if not 0.0 <= self.deviation <= 1.0:
            raise ValueError(f"deviation {self.deviation} is not a probability (0 to 1)")
        if len(self.prior) != len(self.table) or any(p < 0 for p in self.prior) or not sum(self.prior) > 0:
            raise ValueError(f"the prior {self.prior} is not a distribution over the {len(self.table)} styles")
        words: Dict[str, str] = {}
        for item, options in self.items.items():
            if len(options) < 2:
                raise ValueError(f"the phrase {item!r} has {len(options)} translation(s): at least 2 make a choice")
            for option in options:
                word = style_word(option)
                if words.setdefault(word, item) != item or sum(style_word(o) == word for o in options) > 1:
                    raise ValueError(f"the word {word!r} ends two translations ({item!r}, {words[word]!r}): "
                                     f"a style word must tell its translation from every other")
        for k, choices in enumerate(self.table):
            if set(choices) != set(self.items) or any(choices[i] not in self.items[i] for i in choices):
                raise ValueError(f"style {k} must choose one of the translations of every phrase")

    @property
    def num_styles(self) -> int:
        return len(self.table)

    def choice(self, speaker: Speaker, item: str) -> str:
        """What ``speaker`` says for the phrase ``item``: their own translation, or their style's."""
        return dict(speaker.deviations).get(item, self.table[speaker.style][item])

    def to_json(self) -> Dict:
        return {"deviation": self.deviation, "prior": self.prior,
                "items": {item: list(options) for item, options in self.items.items()},
                "styles": self.table}

    @classmethod
    def from_json(cls, data: Dict) -> "Styles":
        return cls({item: tuple(options) for item, options in data["items"].items()},
                   [dict(choices) for choices in data["styles"]], float(data["deviation"]),
                   [float(p) for p in data["prior"]])


def style_word(translation: str) -> str:
    """The word that tells a translation of an ambiguous phrase from the others: its last."""
    return translation.split()[-1]


#: one sentence of the corpus: English, French, speaker, the speaker-dependent words of the French
Row = Tuple[str, str, str, List[Trait]]


def remove_split(out: str, split: str, src: str, tgt: str) -> None:
    """Remove the files :func:`write_split` writes for ``split`` in ``out``: a corpus written where an earlier one was
    must not leave that one's split beside its own (another corpus's held-out speakers, read as this one's)."""
    for ext in (src, tgt, "spk", "traits"):
        path = os.path.join(out, f"{split}.{ext}")
        if os.path.isfile(path):
            os.remove(path)


def write_split(out: str, split: str, rows: Sequence[Row], src: str, tgt: str) -> None:
    """Write ``{split}.{src,tgt,spk,traits}`` of ``rows`` (English, French, speaker, speaker words) in ``out``."""
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
