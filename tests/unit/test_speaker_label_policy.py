"""docs/reliability.md "Speaker labels": the one policy every door applies to a speaker's name, and what it
refuses in a new name that the speaker files' rules let through (another normalization, mixed scripts, a known
name with invisible characters added)."""

import pytest

from fairseq_speaker.data import SpeakerDictionary
from fairseq_speaker.data.speaker_labels import MAX_LABEL_CHARS, label_problem, new_label_problem, visible_form

KNOWN = SpeakerDictionary(["lee", "dr lee", "h\u00e9l\u00e8ne", "spk\u200b000"])  # the last: old data, now refused


@pytest.mark.parametrize("label,problem", [
    ("lee\u200b", "contains '\\u200b' (U+200B ZERO WIDTH SPACE)"),
    ("\u202elee", "U+202E RIGHT-TO-LEFT OVERRIDE"),
    ("le\u200de", "U+200D ZERO WIDTH JOINER"),
    ("\ufefflee", "contains '\\ufeff'"),
    ("lee\u00ad", "U+00AD SOFT HYPHEN"),
    ("\u3164", "U+3164 HANGUL FILLER"),
    ("a\u115fb", "U+115F HANGUL CHOSEONG FILLER"),
    ("\u2800", "U+2800 BRAILLE PATTERN BLANK"),
    ("lee\ufe0f", "U+FE0F VARIATION SELECTOR-16"),
    ("dr\u00a0lee", "U+00A0 NO-BREAK SPACE"),
    ("dr\u3000lee", "U+3000 IDEOGRAPHIC SPACE"),
    ("a\ufffdb", "U+FFFD REPLACEMENT CHARACTER"),
    ("a\ufffeb", "U+FFFE"),
    ("x" * (MAX_LABEL_CHARS + 1), f"is longer than {MAX_LABEL_CHARS} characters"),
    ("a\tb", "(tabs and control characters are not allowed in a label)"),
])
def test_every_door_refuses_invisible_format_control_characters_odd_spaces_and_long_labels(label, problem):
    assert problem in label_problem(label)
    assert problem in new_label_problem(label, KNOWN)


@pytest.mark.parametrize("label", [
    "Ann", "dr-lee", "Zo\u00eb 3", "O\u2019Brien", "\u0414\u043c\u0438\u0442\u0440\u0438\u0439",
    "\u6771\u4eac\u30bf\u30ef\u30fcabc", "\u5f20\u4f1f", "\uae40\ubbfc\uc900 Kim", "\u03b1\u03b8\u03b7\u03bd\u03ac",
    "x" * MAX_LABEL_CHARS, "Dr. Lee (talk 12)"])
def test_names_in_one_script_a_word_and_of_allowed_length_are_accepted(label):
    assert label_problem(label) is None and new_label_problem(label, KNOWN) is None


def test_a_new_name_that_looks_like_a_known_one_is_refused_with_the_reason():
    assert "it looks like 'lee', a known speaker" in new_label_problem("lee\u200b", KNOWN)
    assert "it looks like 'dr lee', a known speaker" in new_label_problem("dr\u00a0lee", KNOWN)
    assert "in another Unicode normalization (NFC/NFD)" in new_label_problem("he\u0301le\u0300ne", KNOWN)
    assert visible_form("dr\u00a0lee\u200b") == visible_form("dr lee")


def test_a_new_name_is_in_nfc_and_no_word_mixes_scripts():
    assert "is not in Unicode's NFC form: write it as 'Zo\u00eb'" in new_label_problem("Zoe\u0308", KNOWN)
    cyrillic_a = "l\u0435e"  # Cyrillic 'е' among Latin letters: looks like "lee"
    assert "mixes the scripts Latin and Cyrillic in the word" in new_label_problem(cyrillic_a, KNOWN)
    assert "Greek" in new_label_problem("ann\u03b1", KNOWN)
    assert new_label_problem("lee \u0414\u043c\u0438\u0442\u0440\u0438\u0439", KNOWN) is None  # a word each


def test_a_known_speaker_of_old_data_stays_a_valid_name():
    """A label valid before this policy (a zero-width space inside) still names its speaker where the model knows
    it; a new one like it is refused."""
    assert new_label_problem("spk\u200b000", KNOWN) is None
    assert "U+200B" in new_label_problem("spk\u200b001", KNOWN)
