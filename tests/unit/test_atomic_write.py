"""Files written whole or not at all (fairseq_speaker/atomic_write.py), and refused before anything is written."""

import os

import pytest

from fairseq_speaker.atomic_write import atomic_path, write_text
from fairseq_speaker.errors import UserError


def test_a_file_is_replaced_whole_and_no_temporary_file_is_left(tmp_path):
    path = str(tmp_path / "out.txt")
    write_text(path, "first\n")
    with pytest.raises(RuntimeError):
        with atomic_path(path) as tmp:
            open(tmp, "w").write("half")
            raise RuntimeError("interrupted")
    assert open(path).read() == "first\n" and os.listdir(tmp_path) == ["out.txt"]


def test_a_directory_or_a_missing_folder_is_refused_before_writing(tmp_path):
    (tmp_path / "adir").mkdir()
    with pytest.raises(UserError, match="adir is a directory: give the path of a file to write"):
        write_text(str(tmp_path / "adir"), "x")
    with pytest.raises(UserError, match="cannot write .*: the folder .*nowhere does not exist"):
        write_text(str(tmp_path / "nowhere" / "out.txt"), "x")
    assert sorted(os.listdir(tmp_path)) == ["adir"] and os.listdir(tmp_path / "adir") == []
