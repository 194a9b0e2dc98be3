"""What a speaker model remembers of its speakers' words (``fairseq-speaker-words``), as a translator answers it: the
part of :class:`~fairseq_speaker.onboarding.translator.SpeakerTranslator` that tells what each speaker's words
suggest of them (:class:`SpeakerTrait`), the words of sentences as the memory keeps a speaker's, and a speaker's words
forgotten (:class:`TranslatorWords`).
"""

from collections import Counter
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import scipy.sparse

from fairseq_speaker.modules.speaker_words import speaker_words_of
from fairseq_speaker.modules.word_kinds import kind_posteriors, kind_words
from fairseq_speaker.onboarding.arguments import name_list
from fairseq_speaker.onboarding.checkpoint import OnboardingError
from fairseq_speaker.onboarding.translator_base import TranslatorBase, serialized


@dataclass(frozen=True)
class SpeakerTrait:
    """What a speaker's words suggest of one trait of the model's kinds of speaker (``fairseq-speaker-words``;
    :mod:`fairseq_speaker.analysis.choices`): the trait (1, 2, ... in the order of the model's record, as the command
    lists them), the speaker's likeliest ``kind`` of its ``kinds`` (1, 2, ...) and its posterior ``probability``,
    ``evidence`` (how many of the trait's alternatives the speaker said), and ``words``, the words that tell that
    kind from the others (:func:`~fairseq_speaker.modules.word_kinds.kind_words`)."""

    trait: int
    kind: int
    kinds: int
    probability: float
    evidence: int
    words: Tuple[str, ...]


class TranslatorWords(TranslatorBase):
    """A part of :class:`~fairseq_speaker.onboarding.translator.SpeakerTranslator`: see the module documentation."""

    @serialized
    def speaker_traits(self, names: Optional[Sequence[str]] = None, known_only: bool = False
                       ) -> Optional[Dict[str, List[SpeakerTrait]]]:
        """What each speaker's words suggest of them (``names``, speakers of the model, each once; default every
        speaker; a name the model does not know is refused, or left out with ``known_only``, as the service lists the
        speakers of its store): for each trait of the model's kinds of speaker with more than one kind, of which the
        speaker said at least one alternative, a :class:`SpeakerTrait`. None for a model that keeps no kinds of
        speaker (no memory of its speakers' words, or one built with ``--no-kinds`` or where no trait has two
        kinds)."""
        if not isinstance(known_only, bool):  # "no" would be read as True
            raise OnboardingError(f"speaker_traits: known_only must be True or False, got {known_only!r}")
        if names is not None:
            names = name_list(names, "speaker_traits")
            twice = [name for name, n in Counter(names).items() if n > 1]
            if twice:  # each of its traits was listed twice: twice the evidence to a caller that counts them
                raise OnboardingError(f"speaker_traits: speaker(s) {', '.join(map(repr, twice[:5]))} named twice: "
                                      f"name each once")
            if not known_only:
                names = self._known_names(names, "speaker_traits", "described")
        memory = speaker_words_of(self.model)
        traits = [(i, trait) for i, trait in enumerate(memory.kinds if memory is not None else [], 1)
                  if len(trait.prior) > 1]
        if memory is None or not traits:
            return None
        dictionary = self.task.speaker_dictionary
        names = [name for name in (names if names is not None else dictionary.names) if name in dictionary]
        said_words = [memory.words_of(dictionary.index(name)) for name in names]
        ids = np.concatenate(said_words).astype(np.int64) if said_words else np.zeros(0, np.int64)
        said = scipy.sparse.csr_matrix((np.ones(len(ids)), ids, np.cumsum([0] + [len(w) for w in said_words])),
                                       shape=(len(names), memory.vocab))  # [N, V]: who said what
        out: Dict[str, List[SpeakerTrait]] = {name: [] for name in names}
        target = self.task.target_dictionary
        for number, trait in traits:
            posterior = kind_posteriors(trait, said)  # [N, K]
            evidence = np.asarray(said[:, np.concatenate(trait.choices)].sum(axis=1)).ravel()
            described = {}
            for name, row, count in zip(names, posterior, evidence):
                if count == 0:  # said none of its alternatives: the prior, nothing the speaker showed
                    continue
                kind = int(np.argmax(row))
                if kind not in described:
                    described[kind] = tuple(target[i] for i in kind_words(trait, kind))
                out[name].append(SpeakerTrait(number, kind + 1, len(trait.prior), float(row[kind]), int(count),
                                              described[kind]))
        return out

    def sentence_words(self, pairs: Sequence[Tuple[str, str]]):
        """The word ids of the translations of raw sentence ``pairs`` as the model's memory of its speakers' words
        keeps a speaker's (``fairseq-speaker-words``); None for a model without one."""
        for i, pair in enumerate(pairs or ()):  # a triple ended in a ValueError of unpacking
            if isinstance(pair, str) or not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise OnboardingError(f"sentence_words: pairs[{i}] must be a (source, target) pair of sentences, got "
                                      f"{pair!r:.60}")
        words = speaker_words_of(self.model)
        if words is None or not pairs:
            return None
        encoded = self.encode_pairs([source for source, _ in pairs], [target for _, target in pairs])
        return words.ids([target for _, target in encoded])

    @serialized
    def forget_words(self, names: Sequence[str]) -> None:
        """The model's memory of its speakers' words (``fairseq-speaker-words``; nothing without one) forgets those
        of ``names`` (a list of speakers the model knows): a speaker deleted from a service must not shape the others'
        neighbours. A string instead of a list, an empty list, or a name the model does not know, is refused: nothing
        would be forgotten."""
        self._forget_words_of(self._known_names(names, "forget_words", "forgotten"))
