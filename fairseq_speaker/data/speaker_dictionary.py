"""Speaker labels: the speaker file format and the speaker dictionary.

A speaker file has one label per line, aligned with the sentences of a split
(``train.spk`` beside ``train.en``/``train.fr``; SATED names it ``.usr``).
The file is UTF-8 (a byte-order mark at its start is ignored); lines end with
``\n`` or ``\r\n``. A label is the whole line, surrounding whitespace removed;
it may contain inner spaces (U+0020), but not be empty, be longer than 200 code
points, nor contain a control character (a tab, a lone ``\r``), a format or
invisible character, or another space: such a line is an error that names the
file and the line (:func:`~fairseq_speaker.data.speaker_labels.label_problem`,
the one check of every door). A new speaker's name meets more rules
(:func:`~fairseq_speaker.data.speaker_labels.new_label_problem`: NFC, one script
a word, not a lookalike of a known name); the rules are in
:mod:`~fairseq_speaker.data.speaker_labels`, the checks of a sentence in
:mod:`~fairseq_speaker.data.sentence_checks`. docs/usage.md ("File formats") and
docs/reliability.md ("Speaker labels") state the rules in full.

The speaker dictionary maps labels to the rows of the model's speaker
parameters. It is built from the training labels, saved as ``dict.spk.txt``
(``label<TAB>count`` a line, most frequent first) and carried inside every
checkpoint, so that a checkpoint maps a label to the same row whatever later
happens to the files in the data directory.
"""

import logging
import operator
import os
import unicodedata
from collections import Counter
from typing import Dict, Iterable, List, Optional, Sequence

import torch

from fairseq_speaker.atomic_write import atomic_path
from fairseq_speaker.data.speaker_labels import (
    label_problem,
    live_names,
    retired_name,
    retired_said,
    shown,
    surrounding_whitespace,
    visible_form,
)

from .text_files import SpeakerDataError, check_not_a_pipe, not_utf8  # noqa: F401  (SpeakerDataError: also its name)

#: id given to a speaker outside the dictionary who gets the mean of all speakers' biases
MEAN_SPEAKER = -1
#: id given to a speaker outside the dictionary who gets no bias at all
NO_SPEAKER = -2

UNKNOWN_SPEAKER_POLICIES = ("mean", "none", "fail")

logger = logging.getLogger(__name__)


BOM = "\ufeff"
#: the largest count of a ``dict.spk.txt`` line, in digits
MAX_COUNT_DIGITS = 18


def _sentence_count(count) -> Optional[int]:
    """``count`` as an int if it is a whole number of sentences that ``dict.spk.txt`` can hold, else None."""
    if isinstance(count, bool):
        return None
    try:
        number = operator.index(count)  # ints, numpy's and torch's integers; not 3.0
    except TypeError:
        return None
    return number if 0 <= number < 10 ** MAX_COUNT_DIGITS else None


def _decode_lines(path: str):
    """``(line number, text)`` of a UTF-8 file split at ``\n`` only (a ``\r`` inside a line stays, to be
    reported), a byte-order mark at the start dropped."""
    if os.path.isdir(path):
        raise SpeakerDataError(f"{path} is a directory, not a file")
    check_not_a_pipe(path)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise SpeakerDataError(f"{path}: cannot be read ({e.strerror})") from None
    with f:
        for lineno, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise not_utf8(path, lineno, e) from None
            if lineno == 1 and text.startswith(BOM):
                text = text[1:]
                if not text:  # nothing but the byte-order mark: an empty file
                    return
            if text.endswith("\n"):
                text = text[:-1]
            if text.endswith("\r"):
                text = text[:-1]
            yield lineno, text


def read_speaker_file(path: str, num_sentences: Optional[int] = None, hint: str = "",
                      split: Optional[str] = None) -> List[str]:
    """Read one label a line from ``path``.

    Args:
        path: the speaker file.
        num_sentences: when given, the number of sentences the labels must align with.
        hint: appended to the message when the file is missing (how to provide it).

    Raises:
        SpeakerDataError: the file is missing or unreadable, a line is empty,
            or the line count differs from ``num_sentences``.
    """
    if not os.path.exists(path):
        raise SpeakerDataError(f"speaker file not found: expected {path}{hint}")
    labels = []
    for lineno, text in _decode_lines(path):
        label = text.strip()
        problem = label_problem(label)
        if problem:
            raise SpeakerDataError(
                f"{path}:{lineno}: {problem}; every line must name the speaker "
                f"of the sentence on the same line of the text"
            )
        labels.append(label)
    if num_sentences is not None and len(labels) != num_sentences:
        text = f"the {split} split's text" if split else "the text"
        raise SpeakerDataError(
            f"{path}: {len(labels)} speaker labels but {text} has {num_sentences} sentences; "
            f"the speaker file needs exactly one label per sentence, in the same order"
        )
    return labels


class SpeakerDictionary:
    """Speaker label <-> row index, built from training labels.

    >>> d = SpeakerDictionary.from_labels(["bob", "ann", "bob"])
    >>> d.names, d.index("ann"), d.index("zoe")
    (['bob', 'ann'], 1, None)
    """

    def __init__(self, names: Sequence[str], counts: Optional[Sequence[int]] = None):
        self.names = list(names)
        self.counts = list(counts) if counts is not None else [0] * len(self.names)
        if len(self.counts) != len(self.names):
            raise ValueError("names and counts differ in length")
        self._index: Dict[str, int] = {}
        for i, name in enumerate(self.names):
            if name in self._index:
                raise ValueError(f"speaker {name!r} appears twice in the speaker dictionary")
            self._index[name] = i
        #: NFC form -> the label, to catch a label written in another Unicode normalization than a known one
        self._nfc: Dict[str, str] = {}
        #: visible form (:func:`visible_form`) -> the label, to catch a new label that looks like a known one
        self._visible: Dict[str, str] = {}
        for name in live_names(self.names):  # a retired speaker's rows are no one's: a label may look like their name
            self._visible.setdefault(visible_form(name), name)
        for name in self.names:
            twin = self._nfc.setdefault(unicodedata.normalize("NFC", name), name)
            if twin != name:
                logger.warning(f"speakers {shown(twin)} and {shown(name)} are the same letters in two Unicode "
                               f"normalizations (NFC/NFD), and so two speakers: write labels in one (NFC)")

    def normalization_twin(self, label: str) -> Optional[str]:
        """The known label that is ``label`` in another Unicode normalization, or None."""
        twin = self._nfc.get(unicodedata.normalize("NFC", label))
        return twin if twin is not None and twin != label else None

    def lookalike(self, label: str) -> Optional[str]:
        """The known label that looks like ``label`` (the same :func:`visible_form`) but is another, or None."""
        twin = self._visible.get(visible_form(label))
        return twin if twin is not None and twin != label else None

    def __len__(self) -> int:
        return len(self.names)

    def __eq__(self, other) -> bool:
        return isinstance(other, SpeakerDictionary) and self.names == other.names

    def __contains__(self, name: str) -> bool:
        return name in self._index

    def index(self, name: str) -> Optional[int]:
        return self._index.get(name)

    @classmethod
    def from_labels(cls, labels: Iterable[str]) -> "SpeakerDictionary":
        """Most frequent speaker first, ties broken by label, so the order is reproducible."""
        counts = Counter(labels)
        ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        return cls([name for name, _ in ordered], [count for _, count in ordered])

    # -- files ---------------------------------------------------------------------------
    def save(self, path: str) -> None:
        """Write ``label<TAB>count`` lines atomically: a reader never sees half a file, and a save that
        fails leaves the earlier file as it was.

        Raises:
            SpeakerDataError: a label that the file would not give back the same (see :func:`label_problem`;
                surrounding whitespace), or a count that is not a number of sentences; nothing is written.
        """
        counts = []
        for lineno, (name, count) in enumerate(zip(self.names, self.counts), start=1):
            problem = label_problem(name) or surrounding_whitespace(name)
            number = _sentence_count(count)
            if problem is None and number is None:
                problem = f"count {count!r} of speaker {shown(name)} is not a number of sentences"
            if problem:
                raise SpeakerDataError(f"{path}:{lineno}: cannot be written: {problem}")
            counts.append(number)
        with atomic_path(path) as tmp:
            with open(tmp, "w", encoding="utf-8", newline="\n") as f:
                for name, written in zip(self.names, counts):
                    f.write(f"{name}\t{written}\n")

    @classmethod
    def load(cls, path: str) -> "SpeakerDictionary":
        names, counts = [], []
        seen: Dict[str, int] = {}
        fix = "delete the file to rebuild it from the training speaker labels"
        for lineno, line in _decode_lines(path):
            name, sep, count = line.rpartition("\t")
            count = count.strip()
            # ASCII digits only: str.isdigit also takes '²', which int() refuses, and '٣', which it reads as 3
            if (not sep or not name.strip() or not count.isascii() or not count.isdigit()
                    or len(count) > MAX_COUNT_DIGITS):
                raise SpeakerDataError(f"{path}:{lineno}: expected 'label<TAB>count', got {shown(line)}; {fix}")
            problem = label_problem(name) or surrounding_whitespace(name)
            if problem:
                raise SpeakerDataError(f"{path}:{lineno}: {problem}; {fix}")
            if name in seen:
                raise SpeakerDataError(
                    f"{path}:{lineno}: speaker {shown(name)} already listed on line {seen[name]}; {fix}"
                )
            seen[name] = lineno
            names.append(name)
            counts.append(int(count))
        return cls(names, counts)

    # -- checkpoints -----------------------------------------------------------------------
    def state_dict(self) -> Dict[str, List]:
        # plain lists of str and int: loadable by torch.load(weights_only=True)
        return {"names": list(self.names), "counts": list(self.counts)}

    @classmethod
    def from_state_dict(cls, state: Dict[str, List]) -> "SpeakerDictionary":
        return cls(state["names"], state["counts"])

    # -- mapping ---------------------------------------------------------------------------
    def encode(self, labels: Sequence[str], unknown: str = "mean", source: str = "<labels>",
               advice: Optional[str] = None, lines: Optional[Sequence[int]] = None,
               places: Optional[Sequence[str]] = None) -> torch.Tensor:
        """Map labels to ids by name; ``unknown`` decides what labels outside the dictionary become.

        ``mean`` -> :data:`MEAN_SPEAKER`, ``none`` -> :data:`NO_SPEAKER`, ``fail`` raises
        :class:`SpeakerDataError` naming ``source`` and the line (label i is on line ``lines[i]``, by
        default i + 1), or label i's place as ``places[i]`` says it (``speakers[1]``), ending with ``advice`` (by
        default: the other policies).
        """
        if unknown not in UNKNOWN_SPEAKER_POLICIES:
            raise ValueError(f"unknown-speaker policy must be one of {UNKNOWN_SPEAKER_POLICIES}, got {unknown!r}")
        fallback = MEAN_SPEAKER if unknown == "mean" else NO_SPEAKER
        ids = torch.empty(len(labels), dtype=torch.long)
        for i, label in enumerate(labels):
            idx = self._index.get(label)
            if idx is None:
                where = places[i] if places is not None else f"{source}:{lines[i] if lines is not None else i + 1}"
                twin = self.normalization_twin(label)
                if twin is not None:  # whatever the policy: this is the known speaker, written otherwise
                    raise SpeakerDataError(
                        f"{where}: speaker {shown(label)} is {shown(twin)}, a speaker of the model, in another Unicode "
                        f"normalization (NFC/NFD): write the labels in the normalization of the training data (NFC)")
                if unknown == "fail":
                    if retired_name(label) in self._index:  # its rows kept under another name: no other data helps
                        raise SpeakerDataError(f"{where}: speaker {retired_said([label])}: restore it (then save "
                                               f"the model) to use its sentences, or leave them out")
                    advice = advice or ("use --unknown-speaker mean (the mean speaker) or none (no bias) to "
                                        "translate unseen speakers")
                    raise SpeakerDataError(f"{where}: speaker {label!r} is not among the model's "
                                           f"{len(live_names(self.names))} speakers; {advice}")
                idx = fallback
            ids[i] = idx
        return ids
