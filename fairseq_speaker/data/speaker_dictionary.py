"""Speaker labels: the speaker file format and the speaker dictionary.

A speaker file has one label per line, aligned with the sentences of a split
(``train.spk`` beside ``train.en``/``train.fr``; SATED names it ``.usr``).
The file is UTF-8 (a byte-order mark at its start is ignored); lines end with
``\n`` or ``\r\n``. A label is the whole line, surrounding whitespace removed;
it may contain inner spaces (U+0020), but not be empty, be longer than 200 code
points, nor contain a control character (a tab, a lone ``\r``), a format or
invisible character, or another space: such a line is an error that names the
file and the line (:func:`label_problem`, the one check of every door). A new
speaker's name meets more rules (:func:`new_label_problem`: NFC, one script a
word, not a lookalike of a known name). docs/usage.md ("File formats") and
docs/reliability.md ("Speaker labels") state the rules in full.

The speaker dictionary maps labels to the rows of the model's speaker
parameters. It is built from the training labels, saved as ``dict.spk.txt``
(``label<TAB>count`` a line, most frequent first) and carried inside every
checkpoint, so that a checkpoint maps a label to the same row whatever later
happens to the files in the data directory.
"""

import functools
import logging
import operator
import os
import re
import unicodedata
from collections import Counter
from typing import Dict, Iterable, List, Optional, Sequence

import regex
import torch

from fairseq_speaker.atomic_write import atomic_path

from .text_files import SpeakerDataError, not_utf8  # noqa: F401  (SpeakerDataError: also this module's name)

#: id given to a speaker outside the dictionary who gets the mean of all speakers' biases
MEAN_SPEAKER = -1
#: id given to a speaker outside the dictionary who gets no bias at all
NO_SPEAKER = -2

UNKNOWN_SPEAKER_POLICIES = ("mean", "none", "fail")

logger = logging.getLogger(__name__)


BOM = "\ufeff"
#: Unicode categories refused in a label: control characters (tab, ``\r``, NUL, ...), format characters (invisible:
#: a byte-order mark, U+200B zero-width space, U+200D zero-width joiner, U+202E right-to-left override, U+00AD soft
#: hyphen, ...), line and paragraph separators, and surrogates (not text: UTF-8 cannot hold them)
REFUSED_CATEGORIES = ("Cc", "Cf", "Zl", "Zp", "Cs")
#: characters that show nothing although their category is a letter or a symbol (fillers, a blank, invisible
#: combining marks, variation selectors), and the replacement character U+FFFD (what a name that was not valid
#: UTF-8 becomes): refused in a label. Spaces other than U+0020 are refused too (:func:`_invisible`).
INVISIBLE = frozenset(
    [0x115F, 0x1160, 0x3164, 0xFFA0,  # Hangul fillers
     0x2800,  # Braille pattern blank
     0x034F, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D, 0x180F,  # combining grapheme joiner, Khmer, Mongolian selectors
     0xFFFC, 0xFFFD]  # object replacement, replacement character
    + list(range(0xFE00, 0xFE10)) + list(range(0xE0100, 0xE01F0)))  # variation selectors
#: the longest label, in code points (a name, not a text)
MAX_LABEL_CHARS = 200
#: the most one word of a new speaker's name may mix scripts (Unicode's "highly restrictive" level, UTS #39 5.2):
#: one script, or Latin with Han and Japanese kana, with Han and Bopomofo, or with Han and Hangul
ALLOWED_SCRIPT_MIXES = (frozenset({"Latin", "Han", "Hiragana", "Katakana"}), frozenset({"Latin", "Han", "Bopomofo"}),
                        frozenset({"Latin", "Han", "Hangul"}))
#: the largest count of a ``dict.spk.txt`` line, in digits
MAX_COUNT_DIGITS = 18
#: the scripts a character is told apart by (Unicode's Script property); a letter of another script is known by the
#: first word of its name
_SCRIPTS = ("Latin", "Greek", "Cyrillic", "Armenian", "Hebrew", "Arabic", "Syriac", "Thaana", "Devanagari", "Bengali",
            "Gurmukhi", "Gujarati", "Oriya", "Tamil", "Telugu", "Kannada", "Malayalam", "Sinhala", "Thai", "Lao",
            "Tibetan", "Myanmar", "Georgian", "Hangul", "Ethiopic", "Cherokee", "Canadian_Aboriginal", "Khmer",
            "Mongolian", "Hiragana", "Katakana", "Bopomofo", "Han", "Yi", "Coptic", "Common", "Inherited")
_SCRIPT_PATTERN = regex.compile("|".join(f"(?P<{name}>\\p{{Script={name}}})" for name in _SCRIPTS))


def shown(text: str, limit: int = 60) -> str:
    """``repr(text)`` for a message, cut after ``limit`` characters."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} characters)"


def _invisible(c: str) -> bool:
    """A character a label may not hold although it is not a control character: a format character, one of
    :data:`INVISIBLE`, a space other than U+0020, or a noncharacter (U+FFFE, U+FFFF, ...)."""
    o = ord(c)
    category = unicodedata.category(c)
    return (category == "Cf" or o in INVISIBLE or (category == "Zs" and c != " ") or (o & 0xFFFE) == 0xFFFE
            or 0xFDD0 <= o <= 0xFDEF)


def _described(c: str) -> str:
    name = unicodedata.name(c, "")
    return repr(c) if unicodedata.category(c) == "Cc" else f"{c!r} (U+{ord(c):04X}{' ' + name if name else ''})"


@functools.lru_cache(maxsize=65536)  # a speaker file repeats each label on every line of its speaker
def label_problem(label: str) -> Optional[str]:
    """Why ``label`` (already stripped) cannot be a speaker label, or None if it can: the rules every door follows
    (speaker files, ``dict.spk.txt``, and every way a speaker is added: :func:`new_label_problem`)."""
    if not label:
        return "empty speaker label"
    if len(label) > MAX_LABEL_CHARS:
        return f"speaker label {shown(label)} is longer than {MAX_LABEL_CHARS} characters"
    control = sorted({c for c in label if unicodedata.category(c) in ("Cc", "Zl", "Zp", "Cs")})
    invisible = sorted({c for c in label if c not in control and _invisible(c)})
    bad = control + invisible
    if bad:
        listed = ", ".join(map(_described, bad[:5])) + (", ..." if len(bad) > 5 else "")
        why = ("tabs and control characters are not allowed in a label" if control else
               "invisible and format characters, and spaces other than U+0020, are not allowed in a label")
        return f"speaker label {shown(label)} contains {listed} ({why})"
    return None


#: the symbols of fairseq's dictionaries that are no words (beginning and end of sentence, padding): written in a
#: sentence they are read as control codes (``<pad>`` is dropped, ``</s>`` ends the sentence where it stands)
CONTROL_SYMBOLS = ("<s>", "<pad>", "</s>")
#: the words fairseq pads a dictionary with to a multiple of 8 (``madeupword0000``, ...)
FILLER = re.compile(r"madeupword\d{4}")


def sentence_problem(sentence: str) -> Optional[str]:
    """Why ``sentence`` cannot be read as a sentence, or None: :func:`blank_problem`, or a word that is one of
    fairseq's :data:`CONTROL_SYMBOLS` (a source of ``<pad>`` was translated as nothing, ``</s>`` as an invented
    sentence, and a target of ``<pad> <pad>`` onboarded a speaker on the end of sentence alone)."""
    blank = blank_problem(sentence)
    if blank:
        return blank
    words = sentence.split()
    control = next((w for w in words if w in CONTROL_SYMBOLS), None)
    if control is not None:
        return (f"holding {control!r} (word {words.index(control) + 1}), a symbol of fairseq's dictionaries that the "
                f"model reads as a control code, not a word")
    filler = next((w for w in words if w == "<unk>" or FILLER.fullmatch(w)), None)
    if filler is not None:  # a speaker onboarded on them learns fairseq's placeholders
        return (f"holding {filler!r} (word {words.index(filler) + 1}), a placeholder of fairseq's dictionaries (the "
                f"unknown word, or a filler that pads the dictionary), not a word")
    hidden = next((c for c in sentence if unicodedata.category(c) == "Cc" and not c.isspace()), None)
    if hidden is not None:  # the word it touches would be read as unknown, without a word
        return (f"holding the control character U+{ord(hidden):04X} at character {sentence.index(hidden) + 1}, "
                f"which no word of a model holds: remove it")
    return None


def blank_problem(sentence: str) -> Optional[str]:
    """Why ``sentence`` shows nothing, or None: empty, only whitespace, or only characters that show nothing
    (zero-width and format characters, controls such as NUL, invisible letters): a model answers a sentence of nothing
    with an invented one."""
    if not sentence:
        return "empty"
    if not sentence.strip():
        return "only whitespace"
    if not visible_form(sentence):
        shown_chars = ", ".join(f"U+{ord(c):04X}" for c in dict.fromkeys(sentence))
        return f"only characters that show nothing ({shown_chars[:60]})"
    return None


def visible_form(label: str) -> str:
    """``label`` as a reader sees it: in NFKC (full-width letters, subscript digits and the ligature ``ﬁ`` read as
    the letters, digits and ``fi`` they show), without the characters a label may not hold (invisible, format,
    control characters), every run of spaces one plain space (as a web page shows them), none around it. Two labels
    with the same visible form look alike."""
    kept = "".join(" " if unicodedata.category(c) == "Zs" else c for c in label
                   if not (unicodedata.category(c) in REFUSED_CATEGORIES or (_invisible(c) and
                                                                               unicodedata.category(c) != "Zs")))
    return re.sub(" +", " ", unicodedata.normalize("NFKC", kept).replace("\u3000", " ")).strip(" ")


def _scripts(word: str) -> List[str]:
    """The scripts of ``word``'s characters, Common and Inherited ones (digits, punctuation, marks) left out."""
    found = []
    for c in word:
        script = _script(c)
        if script not in ("Common", "Inherited", "Unknown") and script not in found:
            found.append(script)
    return found


@functools.lru_cache(maxsize=4096)
def _script(c: str) -> str:
    found = _SCRIPT_PATTERN.match(c)
    if found:
        return found.lastgroup
    return unicodedata.name(c, "Unknown").split()[0].title() if unicodedata.category(c).startswith("L") else "Common"


def mixed_script_problem(label: str) -> Optional[str]:
    """The problem of a name with a word that mixes scripts (Latin 'a' and Cyrillic 'а' look alike: a name
    written with both looks like another), or None. Mixes that Unicode's "highly restrictive" level allows
    (:data:`ALLOWED_SCRIPT_MIXES`: Japanese, Chinese, Korean with Latin) are accepted."""
    for word in regex.split(r"[\s\p{P}\p{S}]+", label):
        scripts = _scripts(word)
        if len(scripts) > 1 and not any(set(scripts) <= allowed for allowed in ALLOWED_SCRIPT_MIXES):
            return (f"speaker label {shown(label)} mixes the scripts {' and '.join(scripts)} in the word {word!r} "
                    f"(letters of different scripts look alike: write each word in one script)")
    return None


def new_label_problem(label, dictionary: Optional["SpeakerDictionary"] = None) -> Optional[str]:
    """Why ``label`` cannot name a new speaker (added by onboarding, a vectors file, the API, the service or its
    store), or None: the rules of a speaker file's labels (:func:`label_problem`, no surrounding whitespace, a
    string), in NFC, no word mixing scripts, and not a known speaker's name in another Unicode normalization or
    with invisible characters added. A speaker of ``dictionary`` is always a valid name (old data keeps its names)."""
    if not isinstance(label, str):
        return f"a speaker label must be a string, got {type(label).__name__} {label!r}"
    if dictionary is not None and label in dictionary:
        return None
    problem = label_problem(label) or _surrounding_whitespace(label)
    twin = dictionary.lookalike(label) if dictionary is not None else None
    if twin is not None and unicodedata.normalize("NFC", label) == unicodedata.normalize("NFC", twin):
        return (f"speaker label {shown(label)} is {shown(twin)}, a known speaker, in another Unicode "
                f"normalization (NFC/NFD): write labels in one normalization (NFC)")
    if problem is not None:
        if twin is not None:
            problem += f"; it looks like {shown(twin)}, a known speaker: use that name, or one that looks different"
        return problem
    if twin is not None:  # NFKC or spaces: full-width or subscript letters and digits, a ligature, a double space
        return (f"speaker label {shown(label)} looks like {shown(twin)}, a known speaker (other forms of the same "
                f"letters or digits, or other spaces): use that name, or one that looks different")
    if unicodedata.normalize("NFC", label) != label:
        return (f"speaker label {shown(label)} is not in Unicode's NFC form: write it as "
                f"{shown(unicodedata.normalize('NFC', label))} (unicodedata.normalize('NFC', name))")
    return mixed_script_problem(label)


def _surrounding_whitespace(label: str) -> Optional[str]:
    """The problem of a label that a speaker file would give back stripped, or None."""
    return f"speaker label {shown(label)} with surrounding whitespace" if label != label.strip() else None


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
        for name in self.names:
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
            problem = label_problem(name) or _surrounding_whitespace(name)
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
            problem = label_problem(name) or _surrounding_whitespace(name)
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
               advice: Optional[str] = None, lines: Optional[Sequence[int]] = None) -> torch.Tensor:
        """Map labels to ids by name; ``unknown`` decides what labels outside the dictionary become.

        ``mean`` -> :data:`MEAN_SPEAKER`, ``none`` -> :data:`NO_SPEAKER`, ``fail`` raises
        :class:`SpeakerDataError` naming ``source`` and the line (label i is on line ``lines[i]``, by
        default i + 1), ending with ``advice`` (by default: the other policies).
        """
        if unknown not in UNKNOWN_SPEAKER_POLICIES:
            raise ValueError(f"unknown-speaker policy must be one of {UNKNOWN_SPEAKER_POLICIES}, got {unknown!r}")
        fallback = MEAN_SPEAKER if unknown == "mean" else NO_SPEAKER
        ids = torch.empty(len(labels), dtype=torch.long)
        for i, label in enumerate(labels):
            idx = self._index.get(label)
            if idx is None:
                twin = self.normalization_twin(label)
                if twin is not None:  # whatever the policy: this is the known speaker, written otherwise
                    raise SpeakerDataError(
                        f"{source}:{lines[i] if lines is not None else i + 1}: speaker {shown(label)} is "
                        f"{shown(twin)}, a speaker of the model, in another Unicode normalization (NFC/NFD): "
                        f"write the labels in the normalization of the training data (NFC)")
                if unknown == "fail":
                    advice = advice or ("use --unknown-speaker mean (the mean speaker) or none (no bias) to "
                                        "translate unseen speakers")
                    raise SpeakerDataError(
                        f"{source}:{lines[i] if lines is not None else i + 1}: speaker {label!r} is not among "
                        f"the {len(self)} speakers the model was trained on; {advice}"
                    )
                idx = fallback
            ids[i] = idx
        return ids
