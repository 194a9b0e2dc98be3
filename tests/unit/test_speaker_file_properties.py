"""Speaker files and ``dict.spk.txt`` of generated content (bytes, text, BOMs, line ends, control
characters, invalid UTF-8, long lines): read as docs/usage.md's "File formats" says, or refused with a
:class:`UserError` naming the file, the line and the problem; a dictionary is saved whole or not at all.

The oracle below is docs/usage.md's rules written again, not the code under test.
"""

import errno
import os
import tempfile
import unicodedata
from collections import Counter
from typing import List, NamedTuple, Set, Union

import pytest
from hypothesis import given, strategies as st

from fairseq_speaker.atomic_write import NoSpaceLeft
from fairseq_speaker.data import SpeakerDictionary, read_speaker_file
from fairseq_speaker.data import speaker_dictionary as speaker_dictionary_module
from fairseq_speaker.errors import UserError
from fairseq_speaker.tasks.speaker_translation import SpeakerTranslationConfig, SpeakerTranslationTask
from tests.helpers import make_dictionary

# -- docs/usage.md "File formats", as a reference reader ------------------------------------------

UTF8_BOM = b"\xef\xbb\xbf"
DIGITS = "0123456789"


class Refused(NamedTuple):
    line: int
    problems: Set[str]  # any of them may be the one reported


#: docs/reliability.md "Speaker labels": characters that show nothing although they are letters or symbols
INVISIBLE = {0x115F, 0x1160, 0x3164, 0xFFA0, 0x2800, 0x034F, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D, 0x180F, 0xFFFC,
             0xFFFD, *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)}
MAX_LABEL = 200


def refused_character(c: str) -> bool:
    """Control characters, line and paragraph separators, format characters (a byte-order mark, zero-width
    ones, direction overrides), invisible letters and symbols, spaces other than U+0020, noncharacters (and
    surrogates, which no UTF-8 file holds but a Python string may)."""
    o = ord(c)
    return (o < 0x20 or 0x7F <= o < 0xA0 or o in (0x2028, 0x2029, 0xFEFF) or 0xD800 <= o < 0xE000
            or unicodedata.category(c) == "Cf" or o in INVISIBLE or (unicodedata.category(c) == "Zs" and c != " ")
            or o % 0x10000 in (0xFFFE, 0xFFFF) or 0xFDD0 <= o <= 0xFDEF)


def label_problems(label: str) -> Set[str]:
    """What the character rules and the length bound say of a label (stripped, not empty)."""
    problems = {"refused"} if any(map(refused_character, label)) else set()
    return problems | ({"long"} if len(label) > MAX_LABEL else set())


def strip_whitespace(text: str) -> str:
    start, end = 0, len(text)
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return text[start:end]


def lines_of(data: bytes) -> List[bytes]:
    """A leading BOM dropped, split at ``\\n`` (the last line's end ends it), one ``\\r`` before it dropped."""
    if data.startswith(UTF8_BOM):
        data = data[len(UTF8_BOM):]
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return [line[:-1] if line.endswith(b"\r") else line for line in lines]


def expected_speaker_file(data: bytes) -> Union[List[str], Refused]:
    labels = []
    for lineno, raw in enumerate(lines_of(data), start=1):
        try:
            label = strip_whitespace(raw.decode("utf-8"))
        except UnicodeDecodeError:
            return Refused(lineno, {"utf8"})
        if not label:
            return Refused(lineno, {"empty"})
        if label_problems(label):
            return Refused(lineno, label_problems(label))
        labels.append(label)
    return labels


def entry_problems(label: str) -> Set[str]:
    """What keeps ``label`` from reading back the same from ``dict.spk.txt``."""
    problems = set()
    if not label:
        problems.add("empty")
    problems |= label_problems(label) if label else set()
    if label != strip_whitespace(label):
        problems.add("whitespace")
    return problems


def expected_dictionary(data: bytes) -> Union[SpeakerDictionary, Refused]:
    names, counts, first_line = [], [], {}
    for lineno, raw in enumerate(lines_of(data), start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return Refused(lineno, {"utf8"})
        if "\t" not in text:
            return Refused(lineno, {"format"})
        label, count = text[:text.rindex("\t")], strip_whitespace(text[text.rindex("\t") + 1:])
        problems = entry_problems(label) - {"empty"}
        if not strip_whitespace(label) or not (1 <= len(count) <= 18 and all(c in DIGITS for c in count)):
            problems.add("format")
        if not problems and label in first_line:
            problems.add(f"duplicate of {first_line[label]}")
        if problems:
            return Refused(lineno, problems)
        first_line[label] = lineno
        names.append(label)
        counts.append(int(count))
    return SpeakerDictionary(names, counts)


PHRASES = {
    "utf8": "not valid UTF-8",
    "empty": "empty speaker label",
    "refused": "are not allowed in a label)",
    "long": "is longer than 200 characters",
    "format": "expected 'label<TAB>count'",
    "whitespace": "with surrounding whitespace",
}


def assert_names_file_line_and_problem(error: UserError, path: str, expected: Refused) -> None:
    message = str(error)
    assert message.startswith(f"{path}:{expected.line}: "), message
    phrases = [PHRASES.get(p) or f"already listed on line {p.split()[-1]}" for p in expected.problems]
    assert any(phrase in message for phrase in phrases), (expected, message)
    assert len(message) < len(path) + 1000, "a message quotes a long line whole"


# -- generated content -----------------------------------------------------------------------------

INTERESTING = ["a", "Z", "7", "é", "语", "\U0001F600", " ", "\t", "\r", "\n", "\x00", "\x0b", "\x0c", "\x1b",
               "\x1c", "\x7f", "\x85", "\xa0", "\u1680", "\u200b", "\u2028", "\u2029", "\u3000", "\ufeff",
               "\ufffe", "\ud800"]
characters = st.one_of(st.sampled_from(INTERESTING), st.characters())
long_text = st.builds(lambda piece, n: piece * n, st.sampled_from(["a", "ab c", "\t", "é", "\x00"]),
                      st.integers(1_000, 100_000))
text = st.one_of(st.text(characters, max_size=12), long_text)
NOT_UTF8 = [b"\xff", b"\xfe", b"\x80", b"\xc3", b"\xc0\xaf", b"\xe2\x82", b"\xed\xa0\x80", b"\xf4\x90\x80\x80"]


def encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")  # a surrogate becomes bytes that are not UTF-8


line_bytes = st.one_of(
    text.map(encode),
    st.tuples(text, st.sampled_from(NOT_UTF8), text).map(lambda t: encode(t[0]) + t[1] + encode(t[2])),
)
LINE_ENDS = [b"\n", b"\n", b"\r\n", b"\r", b"\r\r\n", b"\n\n"]


@st.composite
def files(draw, lines):
    """Lines with any line ends, perhaps a BOM (or two) first, perhaps no end after the last line."""
    body = b""
    drawn = draw(st.lists(lines, max_size=6))
    for i, line in enumerate(drawn):
        last = i == len(drawn) - 1
        body += line + (b"" if last and draw(st.booleans()) else draw(st.sampled_from(LINE_ENDS)))
    return draw(st.sampled_from([b"", b"", UTF8_BOM, UTF8_BOM * 2])) + body


good_label = st.text(st.one_of(st.sampled_from("ab ZéS语-_.'\U0001F600\xa0\u200b"), st.characters()),
                     min_size=1, max_size=10).filter(lambda s: not entry_problems(s))
padding = st.text(st.sampled_from(" \t\r\xa0\u3000\x1c\x85"), max_size=3)


def well_formed(lines):
    """Files of ``lines`` with ``\n`` or ``\r\n`` ends, perhaps a BOM first."""
    return st.builds(
        lambda bom, drawn, end, last: bom + end.join(drawn) + (end if drawn and last else b""),
        st.sampled_from([b"", UTF8_BOM]), st.lists(lines, max_size=8), st.sampled_from([b"\n", b"\r\n"]),
        st.booleans(),
    )


padded_label = st.tuples(padding, good_label, padding).map(lambda t: encode("".join(t)))
speaker_files = st.one_of(st.binary(max_size=64), files(line_bytes), well_formed(padded_label),
                          well_formed(padded_label))

POOL = ["ann", "bob", "Dr. Lee"]  # drawn often, so that labels repeat
COUNTS = ["", "0", " 3", "3 ", "007", "-1", "+1", "1.5", "\u00b2", "\u0663", "1e3", "9" * 18, "9" * 19, "9" * 5000]
count_text = st.one_of(st.integers(0, 10 ** 18 - 1).map(str), st.sampled_from(COUNTS))
dictionary_lines = st.builds(
    lambda label, sep, count: encode(label + sep + count),
    st.one_of(text, st.sampled_from(POOL), good_label), st.sampled_from(["\t", "\t", " ", "\t\t", ""]), count_text,
)
entries = st.builds(
    lambda label, before, count, after: encode(f"{label}\t{before}{count}{after}"),
    st.one_of(good_label, good_label, st.sampled_from(POOL)), st.sampled_from(["", "", " ", "\u3000"]),
    st.integers(0, 10 ** 18 - 1), st.sampled_from(["", "", " ", "\xa0"]),
)
dictionary_files = st.one_of(st.binary(max_size=64), files(dictionary_lines), files(line_bytes),
                             well_formed(entries), well_formed(entries))


def write(folder: str, name: str, data: bytes) -> str:
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


# -- properties ------------------------------------------------------------------------------------

@given(speaker_files)
def test_a_speaker_file_reads_as_the_rules_say_or_is_refused_with_file_line_and_problem(data):
    with tempfile.TemporaryDirectory() as folder:
        path = write(folder, "train.spk", data)
        expected = expected_speaker_file(data)
        if isinstance(expected, Refused):
            with pytest.raises(UserError) as error:
                read_speaker_file(path)
            assert_names_file_line_and_problem(error.value, path, expected)
        else:
            assert read_speaker_file(path) == expected
            assert read_speaker_file(path, num_sentences=len(expected)) == expected
            with pytest.raises(UserError, match=f"{path}: {len(expected)} speaker labels but the text has"):
                read_speaker_file(path, num_sentences=len(expected) + 1)


@given(dictionary_files)
def test_a_dictionary_file_reads_as_the_rules_say_or_is_refused_with_file_line_and_problem(data):
    with tempfile.TemporaryDirectory() as folder:
        path = write(folder, "dict.spk.txt", data)
        expected = expected_dictionary(data)
        if isinstance(expected, Refused):
            with pytest.raises(UserError) as error:
                SpeakerDictionary.load(path)
            assert_names_file_line_and_problem(error.value, path, expected)
        else:
            loaded = SpeakerDictionary.load(path)
            assert (loaded.names, loaded.counts) == (expected.names, expected.counts)


@given(speaker_files)
def test_the_task_reads_any_training_speaker_file_and_its_dictionary_file_back_the_same(data):
    """What the task builds from train.spk and saves as dict.spk.txt, a later run reads back identical."""
    with tempfile.TemporaryDirectory() as folder:
        path = write(folder, "train.spk", data)

        def task():
            cfg = SpeakerTranslationConfig(data=folder, source_lang="en", target_lang="fr", train_subset="train")
            return SpeakerTranslationTask(cfg, make_dictionary(), make_dictionary())

        expected = expected_speaker_file(data)
        if isinstance(expected, Refused):
            with pytest.raises(UserError) as error:
                task().speaker_dictionary
            assert_names_file_line_and_problem(error.value, path, expected)
            assert os.listdir(folder) == ["train.spk"]
            return
        built = task().speaker_dictionary
        most_frequent_first = sorted(Counter(expected).items(), key=lambda kv: (-kv[1], kv[0]))
        assert list(zip(built.names, built.counts)) == most_frequent_first
        assert sorted(os.listdir(folder)) == ["dict.spk.txt", "train.spk"]
        reread = task().speaker_dictionary  # from dict.spk.txt now
        assert (reread.names, reread.counts) == (built.names, built.counts)


def dictionaries(labels, counts):
    """``(names, counts)`` of a dictionary: distinct labels, one count each."""
    return st.lists(labels, unique=True, max_size=6).flatmap(
        lambda names: st.tuples(st.just(names), st.lists(counts, min_size=len(names), max_size=len(names))))


whole_counts = st.integers(0, 10 ** 18 - 1)
any_dictionaries = st.one_of(
    dictionaries(good_label, whole_counts),
    dictionaries(st.one_of(good_label, st.text(characters, max_size=8), long_text),
                 st.one_of(whole_counts, st.sampled_from([-1, 10 ** 18, 3.0, True, "3", None]))),
)


def expected_save(names, counts) -> Union[bytes, Refused]:
    """The bytes of ``dict.spk.txt``, or the first entry that would not read back the same."""
    for lineno, (name, count) in enumerate(zip(names, counts), start=1):
        problems = entry_problems(name)
        if not problems and not (type(count) is int and 0 <= count < 10 ** 18):
            problems.add("count")
        if problems:
            return Refused(lineno, problems)
    return "".join(f"{name}\t{count}\n" for name, count in zip(names, counts)).encode("utf-8")


OLD_DICTIONARY = b"old\t1\n"


@given(any_dictionaries)
def test_a_saved_dictionary_reads_back_identical_or_is_refused_before_anything_is_written(dictionary):
    names, counts = dictionary
    with tempfile.TemporaryDirectory() as folder:
        path = write(folder, "dict.spk.txt", OLD_DICTIONARY)
        expected = expected_save(names, counts)
        if isinstance(expected, Refused):
            with pytest.raises(UserError) as error:
                SpeakerDictionary(names, counts).save(path)
            assert str(error.value).startswith(f"{path}:{expected.line}: cannot be written: "), str(error.value)
            if "count" in expected.problems:
                assert "is not a number of sentences" in str(error.value)
            else:
                assert_names_file_line_and_problem(error.value, path, expected)
            assert open(path, "rb").read() == OLD_DICTIONARY
        else:
            SpeakerDictionary(names, counts).save(path)
            assert open(path, "rb").read() == expected
            loaded = SpeakerDictionary.load(path)
            assert (loaded.names, loaded.counts) == (names, counts)
        assert os.listdir(folder) == ["dict.spk.txt"]


class FailingWriter:
    """A text file that fails with "no space left" after ``writes`` writes (the disk filling up)."""

    def __init__(self, f, writes: int):
        self.f, self.writes = f, writes

    def write(self, text):
        if self.writes == 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.writes -= 1
        return self.f.write(text)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


@given(st.lists(good_label, unique=True, min_size=1, max_size=6), st.data())
def test_a_save_that_fails_mid_way_leaves_the_old_file_and_no_temporary_file(names, data):
    writes = data.draw(st.integers(0, len(names) - 1), label="writes before the disk is full")
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        path = write(folder, "dict.spk.txt", OLD_DICTIONARY)
        patch.setattr(speaker_dictionary_module, "open",
                      lambda *args, **kwargs: FailingWriter(open(*args, **kwargs), writes), raising=False)
        with pytest.raises(NoSpaceLeft, match="no space left on device writing .*dict.spk.txt; the earlier file is kept"):
            SpeakerDictionary(names, [1] * len(names)).save(path)
        assert open(path, "rb").read() == OLD_DICTIONARY
        assert os.listdir(folder) == ["dict.spk.txt"]


def test_a_save_whose_rename_fails_leaves_the_old_file_and_no_temporary_file(tmp_path, monkeypatch):
    path = write(str(tmp_path), "dict.spk.txt", OLD_DICTIONARY)

    def failing_replace(src, dst):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(speaker_dictionary_module.os, "replace", failing_replace)
    with pytest.raises(OSError, match="Input/output error"):
        SpeakerDictionary(["ann", "bob"], [2, 1]).save(path)
    assert open(path, "rb").read() == OLD_DICTIONARY
    assert os.listdir(tmp_path) == ["dict.spk.txt"]
