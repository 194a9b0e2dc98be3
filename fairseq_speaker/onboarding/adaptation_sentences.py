"""The adaptation sentences: read from their files, checked, grouped by speaker, and turned into the token ids a
fit reads.

:func:`read_adaptation_files` reads ``PREFIX.{src}``, ``PREFIX.{tgt}`` and the speaker file beside them (the one
parser of a speaker file, :func:`~fairseq_speaker.data.read_speaker_file`), :func:`group_by_speaker` groups the
pairs by their speaker's label, :func:`check_pair_counts` refuses two lists of sentences of different lengths.
:class:`SentenceEncoding`, a part of :class:`~fairseq_speaker.onboarding.adapter.SpeakerAdapter`, encodes sentence
pairs with the model's dictionaries and refuses text in another form than the training data's (too many unknown
words; text in Unicode NFD is told apart, with how to convert it).
"""

import unicodedata
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from fairseq_speaker.data import read_lines, read_speaker_file
from fairseq_speaker.data.sentence_checks import sentence_problem
from fairseq_speaker.data.text_files import check_not_a_pipe
from fairseq_speaker.onboarding.checkpoint import OnboardingError
from fairseq_speaker.onboarding.scoring import Pair


class SentenceEncoding:
    """A part of :class:`~fairseq_speaker.onboarding.adapter.SpeakerAdapter` (whose constructor sets what it reads:
    the model's ``task`` and ``max_unknown_rate``): sentence pairs as the model's token ids, checked."""

    task: Any
    #: the largest share of words outside the model's dictionaries that :meth:`encode` accepts
    max_unknown_rate: float

    def encode(self, sources: Sequence[str], targets: Sequence[str],
               encode_fn: Optional[Callable[[str], str]] = None,
               where: str = "the adaptation sentences",
               encode_target_fn: Optional[Callable[[str], str]] = None) -> List[Pair]:
        """Token ids of sentence pairs (``encode_fn``: the model's tokenizer/BPE, if the text is raw;
        ``encode_target_fn``: the same for the targets, in the target language, by default ``encode_fn``)."""
        check_pair_counts(sources, targets)
        encode_fn = encode_fn or (lambda x: x)
        encode_target_fn = encode_target_fn or encode_fn
        pairs = self._token_ids(sources, targets, encode_fn, encode_target_fn)
        self.check_unknown_words(pairs, where, nfd=lambda: self._nfd(sources, targets, encode_fn, encode_target_fn))
        return pairs

    def _token_ids(self, sources: Sequence[str], targets: Sequence[str], encode_fn: Callable[[str], str],
                   encode_target_fn: Callable[[str], str]) -> List[Pair]:
        src, tgt = self.task.source_dictionary, self.task.target_dictionary
        return [(src.encode_line(encode_fn(s), add_if_not_exist=False).long(),
                 tgt.encode_line(encode_target_fn(t), add_if_not_exist=False).long())
                for s, t in zip(sources, targets)]

    def _unknown(self, pairs: Sequence[Pair]) -> Tuple[int, int]:
        """``(words outside the model's dictionaries, words)`` of ``pairs``."""
        words = unknown = 0
        for source, target in pairs:
            for tokens, dictionary in ((source, self.task.source_dictionary), (target, self.task.target_dictionary)):
                body = tokens[:-1]  # </s> is not a word
                words += int(body.numel())
                unknown += int((body == dictionary.unk()).sum())
        return unknown, words

    def _nfd(self, sources: Sequence[str], targets: Sequence[str], encode_fn: Callable[[str], str],
             encode_target_fn: Callable[[str], str]) -> Optional[str]:
        """Why the words of text with many unknown words are unknown, when it is that the text is not in Unicode
        NFC (an accent written as a character of its own, NFD: macOS file names, some editors) and the same text in
        NFC has fewer unknown words: which side and line, and how to convert it; None otherwise."""
        first = {side: next((i for i, text in enumerate(texts, 1) if not unicodedata.is_normalized("NFC", text)), None)
                 for side, texts in (("source", sources), ("target", targets))}
        if not any(first.values()):
            return None
        nfc = [unicodedata.normalize("NFC", text) for text in sources], [unicodedata.normalize("NFC", text)
                                                                           for text in targets]
        if self._unknown(self._token_ids(*nfc, encode_fn, encode_target_fn))[0] >= \
                self._unknown(self._token_ids(sources, targets, encode_fn, encode_target_fn))[0]:
            return None
        sides = " and ".join(f"the {side} text (from its line {line})" for side, line in first.items() if line)
        return (f"{sides} is in Unicode NFD, an accent written as a character of its own, while the model's words are "
                f"NFC: convert the file(s) to NFC, e.g. python -c \"import sys, unicodedata; "
                f"sys.stdout.write(unicodedata.normalize('NFC', sys.stdin.read()))\" < FILE > FILE.nfc "
                f"(or uconv -x NFC < FILE > FILE.nfc), and give those")

    def check_unknown_words(self, pairs: Sequence[Pair], where: str = "the adaptation sentences",
                            nfd: Optional[Callable[[], Optional[str]]] = None) -> float:
        """The share of words of ``pairs`` outside the model's dictionaries (``<unk>``), refused above
        :attr:`max_unknown_rate`: text in another form than the training data's (not tokenized, other casing,
        no BPE, NFD rather than NFC: ``nfd`` tells that one) would teach the speaker to say ``<unk>``."""
        unknown, words = self._unknown(pairs)
        rate = unknown / max(words, 1)
        if rate > self.max_unknown_rate:
            found = f"{where}: {100 * rate:.0f}% of the words ({unknown} of {words}) are not in the model's " \
                    f"dictionaries (more than {100 * self.max_unknown_rate:.0f}%): "
            why = nfd() if nfd is not None else None
            if why:
                raise OnboardingError(found + why)
            raise OnboardingError(
                found + "the text is probably not in the form of the training data (tokenized, lowercased, "
                "BPE-encoded); give the model's --tokenizer / --bpe options (and --bpe-codes), or prepare the text as "
                "the training data was; a max_unknown_rate of 1 (--max-unknown-rate 1 on the command line) accepts "
                "it as it is")
        return rate


def read_adaptation_files(prefix: str, source_lang: str, target_lang: str, speaker_suffix: str,
                          option: Optional[str] = None) -> Tuple[List[str], List[str], List[str]]:
    """The sentences and labels of ``PREFIX.{src}``, ``PREFIX.{tgt}``, ``PREFIX.{suffix}``, checked to align;
    ``option``: the option that gave ``prefix``, for messages."""
    paths = [f"{prefix}.{source_lang}", f"{prefix}.{target_lang}"]
    for path in (*paths, f"{prefix}.{speaker_suffix}"):
        check_not_a_pipe(path, option)
    sources, targets = (read_lines(p) for p in paths)
    if len(sources) != len(targets):
        raise OnboardingError(f"{paths[0]} has {len(sources)} lines but {paths[1]} has {len(targets)}: "
                              f"they must hold the same sentences, one a line, in the same order")
    if not sources:
        raise OnboardingError(f"{paths[0]} is empty: there are no sentences to adapt on")
    for path, lines in zip(paths, (sources, targets)):
        for number, line in enumerate(lines, 1):
            problem = sentence_problem(line)
            if problem:  # a speaker fitted on an empty pair learns the end of sentence alone
                raise OnboardingError(f"{path}:{number}: the sentence is {problem}: give the sentence, or remove the "
                                      f"line from the three files")
    labels = read_speaker_file(f"{prefix}.{speaker_suffix}", len(sources),
                               hint=f"; put the speaker of each line of {paths[0]} on the same line")
    return sources, targets, labels


def check_pair_counts(sources: Sequence[str], targets: Sequence[str],
                      named: Tuple[str, str] = ("source sentences", "target sentences")) -> None:
    """Refuse sentence pairs whose two lists differ in length; ``named``: the lists' names in the message."""
    if len(sources) != len(targets):
        raise OnboardingError(f"{len(sources)} {named[0]} but {len(targets)} {named[1]}: give one target sentence for "
                              f"each source sentence")


def group_by_speaker(labels: Sequence[str], pairs: Sequence[Pair]) -> Dict[str, List[Pair]]:
    grouped: Dict[str, List[Pair]] = {}
    for label, pair in zip(labels, pairs):
        grouped.setdefault(label, []).append(pair)
    return grouped
