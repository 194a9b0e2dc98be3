"""The rules of speaker labels, the one check of every door (speaker files, ``dict.spk.txt``, vectors files, the
Python API, the service and its store): :func:`label_problem` for any label (not empty, at most
:data:`MAX_LABEL_CHARS` code points, no control, format or invisible character, no space but U+0020), and
:func:`new_label_problem` for a new speaker's name (also NFC, one script a word, not a lookalike of a known name:
:func:`visible_form`); :func:`shown`, how messages quote a label. docs/reliability.md ("Speaker labels") states the
rules in full. Its siblings: the speaker file and dictionary (:mod:`~fairseq_speaker.data.speaker_dictionary`), the
checks of a sentence (:mod:`~fairseq_speaker.data.sentence_checks`).
"""

import functools
import re
import unicodedata
from typing import Iterable, List, Optional, Protocol, Sequence

import regex


class KnownNames(Protocol):
    """What :func:`new_label_problem` asks of the known speakers (a
    :class:`~fairseq_speaker.data.speaker_dictionary.SpeakerDictionary`): whether a label is one, and which one a
    label looks like."""

    def __contains__(self, label: object) -> bool: ...

    def lookalike(self, label: str) -> Optional[str]: ...


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


def described_character(c: str) -> str:
    """A character as a message shows it: its ``repr``, code point and name, if it has one (``'\\u200b' (U+200B ZERO
    WIDTH SPACE)``, ``'\\n' (U+000A)``)."""
    name = unicodedata.name(c, "")
    return f"{c!r} (U+{ord(c):04X}{' ' + name if name else ''})"


def retired_name(name: str) -> str:
    """The name ``SpeakerTranslator.retire_speakers`` gives the rows of ``name``: one no speaker can have (its
    surrounding spaces: the label rules refuse them at every door), and whose look is not ``name``'s."""
    return f" {name} (deleted) "


def retired_among(unknown: Sequence[str], names: Iterable[str]) -> str:
    """``"; 'x' was retired ..."`` for the names of ``unknown`` whose rows ``names`` (a model's) keep as a retired
    speaker's, for a message that says a name is not a speaker; empty if none."""
    kept = set(names)
    retired = [name for name in unknown if retired_name(name) in kept]
    return f"; {retired_said(retired)}" if retired else ""


def retired_said(names: Sequence[str]) -> str:
    """``"'x' was a speaker of this model, since retired (...)"``: what a message says of retired speakers' names."""
    return (f"{', '.join(map(shown, names[:5]))} {'was a speaker' if len(names) == 1 else 'were speakers'} of this "
            f"model, since retired (SpeakerTranslator.retire_speakers; restore_speakers gives the rows back)")


def live_names(names: Iterable[str]) -> List[str]:
    """The speakers of a model whose rows are named ``names``: the rows of retired speakers (:func:`retired_name`)
    left out."""
    return [name for name in names if not is_retired_name(name)]


def is_retired_name(name: str) -> bool:
    """Whether ``name`` is one the rows of a retired speaker keep (``SpeakerTranslator.retire_speakers``): surrounding
    spaces, which no label can have, so that no speaker is listed, exported or translated as under it."""
    return bool(name) and name != name.strip()


def invisible_in(text: str) -> Optional[str]:
    """The first character of ``text`` that shows nothing inside a word (a format character such as U+200B or
    U+00AD, or one of :data:`INVISIBLE`), described with its place (``'\\u200b' (U+200B ZERO WIDTH SPACE) at character
    9``), or None."""
    for i, c in enumerate(text):
        if unicodedata.category(c) == "Cf" or ord(c) in INVISIBLE:
            return f"{described_character(c)} at character {i + 1}"
    return None


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
        listed = ", ".join(map(described_character, bad[:5])) + (", ..." if len(bad) > 5 else "")
        why = ("tabs and control characters are not allowed in a label" if control else
               "invisible and format characters, and spaces other than U+0020, are not allowed in a label")
        return f"speaker label {shown(label)} contains {listed} ({why})"
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


def new_label_problem(label, dictionary: Optional[KnownNames] = None) -> Optional[str]:
    """Why ``label`` cannot name a new speaker (added by onboarding, a vectors file, the API, the service or its
    store), or None: the rules of a speaker file's labels (:func:`label_problem`, no surrounding whitespace, a
    string), in NFC, no word mixing scripts, and not a known speaker's name in another Unicode normalization or
    with invisible characters added. A speaker of ``dictionary`` is always a valid name (old data keeps its names)."""
    if not isinstance(label, str):
        return f"a speaker label must be a string, got {type(label).__name__} {label!r}"
    if dictionary is not None and label in dictionary and not is_retired_name(label):
        return None
    problem = label_problem(label) or surrounding_whitespace(label)
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


def surrounding_whitespace(label: str) -> Optional[str]:
    """The problem of a label that a speaker file would give back stripped, or None."""
    return f"speaker label {shown(label)} with surrounding whitespace" if label != label.strip() else None
