"""Files written whole or not at all (fairseq_speaker/atomic_write.py), and refused before anything is written."""

import builtins
import errno
import os

import pytest

from fairseq_speaker import atomic_write
from fairseq_speaker.atomic_write import NoSpaceLeft, atomic_path, write_text
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


class _FullDisk:
    """A file whose disk fills up: a write puts half its data down, then fails as the system does."""

    def __init__(self, f, code: int):
        self.f, self.code = f, code

    def write(self, data):
        self.f.write(data[: len(data) // 2])
        raise OSError(self.code, os.strerror(self.code))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT], ids=["ENOSPC", "EDQUOT"])
@pytest.mark.parametrize("earlier", [True, False], ids=["over an earlier file", "a new file"])
def test_a_full_disk_ends_in_one_message_and_keeps_the_earlier_file(tmp_path, monkeypatch, code, earlier):
    path = str(tmp_path / "model.pt")
    if earlier:
        write_text(path, "the earlier model\n")
    monkeypatch.setattr(atomic_write, "open", lambda name, *args, **kwargs: _FullDisk(builtins.open(name, *args,
                                                                                                       **kwargs), code),
                        raising=False)
    with pytest.raises(NoSpaceLeft) as full:
        write_text(path, "a model larger than the disk\n")
    assert isinstance(full.value, UserError)
    kept = "the earlier file is kept" if earlier else "no file was written"
    assert str(full.value).startswith(f"no space left on device writing {path}")
    assert f"; {kept}. Free space in {tmp_path} (or write elsewhere) and run again" in str(full.value)
    assert (open(path).read() == "the earlier model\n") if earlier else not os.path.exists(path)
    assert os.listdir(tmp_path) == (["model.pt"] if earlier else [])  # no temporary file left


def test_a_full_disk_under_torch_s_writer_is_recognized(tmp_path):
    """torch.save reports its file's failed write as a RuntimeError."""
    path = str(tmp_path / "model.pt")
    with pytest.raises(NoSpaceLeft, match="no space left on device writing"):
        with atomic_path(path):
            raise RuntimeError("[enforce fail at inline_container.cc:778] . PytorchStreamWriter failed writing file "
                               "data/0: file write failed: No space left on device")
    with pytest.raises(RuntimeError, match="another failure"):  # any other failure is left as it is
        with atomic_path(path):
            raise RuntimeError("another failure")


def test_a_path_that_is_no_regular_file_is_refused_and_left_as_it_is(tmp_path):
    """A pipe (as a device, /dev/full: the rename would have put a regular file in its place, run as root)."""
    import stat

    from fairseq_speaker.atomic_write import write_text
    from fairseq_speaker.errors import UserError

    pipe = str(tmp_path / "pipe")
    os.mkfifo(pipe)
    with pytest.raises(UserError, match="it is not a regular file"):
        write_text(pipe, "text")
    assert stat.S_ISFIFO(os.stat(pipe).st_mode) and os.listdir(tmp_path) == ["pipe"]
    with pytest.raises(UserError, match="cannot write '': give the path of a file to write"):
        write_text("", "text")


@pytest.mark.parametrize("target", ["real.npz", "gone.npz"])
def test_a_symbolic_link_is_refused_and_neither_it_nor_its_file_changes(tmp_path, target):
    """The rename replaced the link with a regular file and left the file it names as it was: run as root with
    --out /dev/stdout, the system's /dev/stdout became a regular file. A dangling link too."""
    from fairseq_speaker.atomic_write import write_text
    from fairseq_speaker.errors import UserError

    (tmp_path / "real.npz").write_text("OLD")
    link = tmp_path / "link.npz"
    link.symlink_to(target)
    with pytest.raises(UserError, match=f"it is a symbolic link \\(to {target}\\)"):
        write_text(str(link), "NEW")
    assert link.is_symlink() and os.readlink(link) == target and (tmp_path / "real.npz").read_text() == "OLD"
    assert sorted(os.listdir(tmp_path)) == ["link.npz", "real.npz"]


def test_a_file_the_system_will_not_create_ends_in_one_message(tmp_path, monkeypatch):
    """An error of the system other than a full disk (a read-only file system, /proc): one message, nothing left."""
    import errno

    import torch

    from fairseq_speaker.atomic_write import atomic_path
    from fairseq_speaker.errors import UserError

    def refused(obj, f, *args, **kwargs):
        raise RuntimeError(f"[enforce fail at inline_container.cc:747] . open file failed with strerror: "
                           f"{os.strerror(errno.EROFS)}")

    monkeypatch.setattr(torch, "save", refused)
    path = str(tmp_path / "model.pt")
    with pytest.raises(UserError, match="cannot write .*model.pt: Read-only file system; no file was written"):
        with atomic_path(path) as tmp:
            torch.save({}, tmp)
    assert os.listdir(tmp_path) == []
