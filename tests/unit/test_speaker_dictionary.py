"""Speaker files and the speaker dictionary."""

import os

import pytest
import torch

from fairseq_speaker.data import (
    MEAN_SPEAKER,
    NO_SPEAKER,
    SpeakerDataError,
    SpeakerDictionary,
    read_speaker_file,
)
from fairseq_speaker.data.speaker_dictionary import UNKNOWN_SPEAKER_POLICIES
from fairseq_speaker.data.speaker_labels import new_label_problem


def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return str(path)


def test_most_frequent_first_ties_by_name():
    d = SpeakerDictionary.from_labels(["carol", "bob", "ann", "bob", "carol", "dave", "carol"])
    assert d.names == ["carol", "bob", "ann", "dave"]
    assert d.counts == [3, 2, 1, 1]


def test_encode_maps_by_name_with_the_unknown_policies():
    d = SpeakerDictionary(["ann", "bob"])
    assert d.encode(["bob", "ann", "zoe"], "mean").tolist() == [1, 0, MEAN_SPEAKER]
    assert d.encode(["zoe"], "none").tolist() == [NO_SPEAKER]
    with pytest.raises(SpeakerDataError, match=r"test.spk:3: speaker 'zoe' is not among the model's 2 speakers"):
        d.encode(["bob", "ann", "zoe"], "fail", source="test.spk")


def test_save_load_round_trip_keeps_labels_with_spaces(tmp_path):
    d = SpeakerDictionary.from_labels(["Dr. Jane Doe", "talk 12", "talk 12"])
    path = str(tmp_path / "dict.spk.txt")
    d.save(path)
    assert os.listdir(tmp_path) == ["dict.spk.txt"]  # no temporary file left behind
    loaded = SpeakerDictionary.load(path)
    assert loaded == d and loaded.counts == [2, 1]
    assert loaded.index("Dr. Jane Doe") == 1


def test_checkpoint_state_is_plain_data_and_keeps_the_mapping(tmp_path):
    d = SpeakerDictionary.from_labels(["b", "a", "a"])
    state = d.state_dict()
    path = str(tmp_path / "state.pt")
    torch.save(state, path)
    restored = SpeakerDictionary.from_state_dict(torch.load(path, weights_only=True))
    assert restored.encode(["a", "b"]).tolist() == d.encode(["a", "b"]).tolist() == [0, 1]


def test_a_reordered_dictionary_file_cannot_change_what_a_checkpoint_maps(tmp_path):
    """Labels are mapped through the dictionary a model was trained with, by name."""
    trained = SpeakerDictionary.from_labels(["ann", "ann", "bob", "cy"])
    path = str(tmp_path / "dict.spk.txt")
    trained.save(path)
    lines = open(path, encoding="utf-8").read().splitlines()
    write(path, "\n".join(reversed(lines)) + "\n")
    on_disk = SpeakerDictionary.load(path)
    assert on_disk.index("ann") != trained.index("ann")
    restored = SpeakerDictionary.from_state_dict(trained.state_dict())
    assert restored.encode(["ann", "bob", "cy"]).tolist() == [0, 1, 2]


@pytest.mark.parametrize("text,message", [
    ("ann\t3\nann\t2\n", r"dict.spk.txt:2: speaker 'ann' already listed on line 1"),
    ("ann 3\n", r"dict.spk.txt:1: expected 'label<TAB>count'"),
    ("ann\tmany\n", r"dict.spk.txt:1: expected 'label<TAB>count'"),
])
def test_malformed_dictionary_file(tmp_path, text, message):
    path = write(tmp_path / "dict.spk.txt", text)
    with pytest.raises(SpeakerDataError, match=message):
        SpeakerDictionary.load(path)


def test_read_speaker_file(tmp_path):
    path = write(tmp_path / "train.spk", "ann\n  bob  \nann\n")
    assert read_speaker_file(path, num_sentences=3) == ["ann", "bob", "ann"]


def test_missing_speaker_file_names_the_expected_path(tmp_path):
    path = str(tmp_path / "valid.spk")
    with pytest.raises(SpeakerDataError, match=rf"speaker file not found: expected {path}; copy it"):
        read_speaker_file(path, hint="; copy it")


def test_empty_label_names_file_and_line(tmp_path):
    path = write(tmp_path / "train.spk", "ann\nbob\n\nann\n")
    with pytest.raises(SpeakerDataError, match=r"train.spk:3: empty speaker label"):
        read_speaker_file(path)


def test_line_count_mismatch(tmp_path):
    path = write(tmp_path / "train.spk", "ann\nbob\n")
    with pytest.raises(SpeakerDataError, match=r"train.spk: 2 speaker labels but the text has 3 sentences"):
        read_speaker_file(path, num_sentences=3)


def test_invalid_utf8_names_the_line(tmp_path):
    path = tmp_path / "train.spk"
    path.write_bytes(b"ann\n\xff\xfe\n")
    with pytest.raises(SpeakerDataError, match=r"train.spk:2: not valid UTF-8"):
        read_speaker_file(str(path))


def test_byte_order_mark_and_crlf_are_not_part_of_a_label(tmp_path):
    path = tmp_path / "train.spk"
    path.write_bytes("\ufeffspk005\r\nspk001\r\nspk005".encode("utf-8"))
    assert read_speaker_file(str(path)) == ["spk005", "spk001", "spk005"]
    d = SpeakerDictionary.from_labels(read_speaker_file(str(path)))
    d.save(str(tmp_path / "dict.spk.txt"))
    raw = (tmp_path / "dict.spk.txt").read_bytes()
    (tmp_path / "bom.txt").write_bytes(b"\xef\xbb\xbf" + raw.replace(b"\n", b"\r\n"))
    assert SpeakerDictionary.load(str(tmp_path / "bom.txt")).names == ["spk005", "spk001"]


@pytest.mark.parametrize("label", ["ab\rcd", "ab\tcd", "ab\x00cd", "ab\u2028cd", "ab\x1bcd", "a\ufeffb"])
def test_control_characters_in_a_label_name_the_line(tmp_path, label):
    path = tmp_path / "train.spk"
    path.write_bytes(f"spk001\n{label}\nspk002\n".encode("utf-8"))
    with pytest.raises(SpeakerDataError, match=r"train.spk:2: speaker label .* contains"):
        read_speaker_file(str(path))
    (tmp_path / "dict.spk.txt").write_bytes(f"spk001\t3\n{label}\t2\n".encode("utf-8"))
    with pytest.raises(SpeakerDataError, match=r"dict.spk.txt:2: speaker label .* contains .*delete the file"):
        SpeakerDictionary.load(str(tmp_path / "dict.spk.txt"))


def test_a_labels_file_that_cannot_be_written_back_is_never_accepted(tmp_path):
    """Whatever a speaker file holds, the dictionary built from it reads back the same."""
    path = tmp_path / "train.spk"
    path.write_bytes("  ann smith \nbob\x85x\n".encode("utf-8"))
    with pytest.raises(SpeakerDataError, match="train.spk:2"):
        read_speaker_file(str(path))
    path.write_bytes("  ann smith \nbob\n".encode("utf-8"))
    d = SpeakerDictionary.from_labels(read_speaker_file(str(path)))
    d.save(str(tmp_path / "dict.spk.txt"))
    assert SpeakerDictionary.load(str(tmp_path / "dict.spk.txt")).names == d.names == ["ann smith", "bob"]


def test_binary_dictionary_and_directory_name_the_path(tmp_path):
    (tmp_path / "dict.spk.txt").write_bytes(b"\x80\x81\tx\n")
    with pytest.raises(SpeakerDataError, match=r"dict.spk.txt:1: not valid UTF-8"):
        SpeakerDictionary.load(str(tmp_path / "dict.spk.txt"))
    os.makedirs(tmp_path / "train.spk")
    with pytest.raises(SpeakerDataError, match=r"train.spk is a directory"):
        read_speaker_file(str(tmp_path / "train.spk"))


@pytest.mark.parametrize("count", ["\u00b2", "\u0663", "9" * 19, "9" * 5000])
def test_a_count_is_ascii_digits_that_fit(tmp_path, count):
    """'²' passed str.isdigit but not int(); '٣' was read as 3; 5000 digits exceed int()'s limit."""
    path = write(tmp_path / "dict.spk.txt", f"ann\t{count}\n")
    with pytest.raises(SpeakerDataError, match=r"dict.spk.txt:1: expected 'label<TAB>count'"):
        SpeakerDictionary.load(path)


@pytest.mark.parametrize("label,problem", [
    ("x\t5\ny", "contains"),  # was written as two speakers, x and y
    (" ann", "with surrounding whitespace"),
    ("", "empty speaker label"),
    ("a\ud800", "contains"),  # failed half-way through writing, leaving the temporary file
])
def test_save_refuses_a_label_that_would_not_read_back_the_same(tmp_path, label, problem):
    path = write(tmp_path / "dict.spk.txt", "old\t1\n")
    with pytest.raises(SpeakerDataError, match=rf"dict.spk.txt:2: cannot be written: .*{problem}"):
        SpeakerDictionary(["bob", label], [2, 1]).save(path)
    assert os.listdir(tmp_path) == ["dict.spk.txt"]
    assert open(path, encoding="utf-8").read() == "old\t1\n"


@pytest.mark.parametrize("count", [-1, 1.5, True, "3", None])
def test_save_refuses_a_count_that_is_not_a_number_of_sentences(tmp_path, count):
    with pytest.raises(SpeakerDataError, match=r"dict.spk.txt:1: cannot be written: count .* not a number"):
        SpeakerDictionary(["ann"], [count]).save(str(tmp_path / "dict.spk.txt"))
    assert os.listdir(tmp_path) == []


def test_a_file_holding_only_a_byte_order_mark_is_empty(tmp_path):
    (tmp_path / "train.spk").write_bytes(b"\xef\xbb\xbf")
    assert read_speaker_file(str(tmp_path / "train.spk")) == []
    (tmp_path / "dict.spk.txt").write_bytes(b"\xef\xbb\xbf")
    assert len(SpeakerDictionary.load(str(tmp_path / "dict.spk.txt"))) == 0


def test_a_missing_dictionary_names_the_path(tmp_path):
    with pytest.raises(SpeakerDataError, match=r"dict.spk.txt: cannot be read \(No such file"):
        SpeakerDictionary.load(str(tmp_path / "dict.spk.txt"))


def test_a_long_bad_label_is_cut_in_the_message(tmp_path):
    path = write(tmp_path / "train.spk", "a" * 100_000 + "\x00\n")
    with pytest.raises(SpeakerDataError, match=r"train.spk:1: speaker label 'a+'\.\.\. \(100001 characters\)") as e:
        read_speaker_file(path)
    assert len(str(e.value)) < 400


NFC, NFD = "h\u00e9l\u00e8ne", "he\u0301le\u0300ne"  # the same letters, composed and decomposed


def test_a_label_in_another_unicode_normalization_is_refused_not_taken_for_an_unseen_speaker():
    d = SpeakerDictionary([NFC, "bob"])
    for policy in UNKNOWN_SPEAKER_POLICIES:
        with pytest.raises(SpeakerDataError, match=r"test.spk:2: speaker .* is 'h\u00e9l\u00e8ne', a speaker of the "
                                                   r"model, in another Unicode normalization"):
            d.encode(["bob", NFD], policy, source="test.spk")
    assert d.encode(["zoe"], "mean").tolist() == [MEAN_SPEAKER]  # a truly unseen speaker is still one


def test_two_training_speakers_differing_only_by_normalization_are_warned_about(caplog):
    with caplog.at_level("WARNING", logger="fairseq_speaker.data.speaker_dictionary"):
        d = SpeakerDictionary.from_labels([NFC, NFD, NFC])
    assert len(d) == 2 and "two Unicode normalizations" in caplog.text


@pytest.mark.parametrize("label,problem", [
    ("", "empty speaker label"),
    (" ann", "surrounding whitespace"),
    ("ann\t1", "contains '\\t'"),
    ("\ufeffann", "contains '\\ufeff'"),
    (None, "must be a string, got NoneType"),
    (7, "must be a string, got int"),
    (NFD, "another Unicode normalization"),
])
def test_a_new_speakers_label_follows_the_speaker_files_rules(label, problem):
    assert problem in new_label_problem(label, SpeakerDictionary([NFC]))
    assert new_label_problem("dr lee", SpeakerDictionary([NFC])) is None
