"""Writing files whole or not at all: a temporary file in the same folder, then ``os.replace``.

An interrupted command (Ctrl-C, a full disk, a killed job, a power cut: the file is synced to disk before
the rename) leaves the earlier version of a file, or none, never half of one. Every file the package writes goes through
:func:`atomic_path` (checkpoints of ``fairseq-train`` included, see :mod:`fairseq_speaker.fairseq_patches`).

The temporary file is hidden and says whose it is: ``PATH`` = ``folder/model.pt`` is written as
``folder/.model.fairseq-speaker-tmp-HOST-PID-N.pt`` (``HOST`` the machine, ``PID`` the writing process, ``N``
its count of writes; the extension is kept for writers that go by it). A process killed with ``kill -9``
(which nothing can catch) leaves that file behind; the next write of the same ``PATH`` on the same machine
removes it once its process is gone (:func:`remove_leftovers`). Leftovers of another machine (a shared
folder) are never removed here: a process of that machine may still be writing them.

Test hook: with the environment variable ``FAIRSEQ_SPEAKER_KILL_DURING_WRITE=NAME`` (a file name, shell
wildcards allowed), a process that writes a file of that name kills itself with SIGKILL once the
temporary file is written, after cutting it to half its size: what a kill in the middle of a write leaves.
``tests/integration/test_fault_injection.py`` uses it; it is not meant for anything else.
"""

import contextlib
import errno
import fnmatch
import itertools
import json
import os
import re
import shutil
import signal
import socket
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple

from fairseq_speaker.errors import UserError

#: what names a temporary file of this package
TMP_MARK = "fairseq-speaker-tmp"
#: the test hook (see the module's text)
KILL_DURING_WRITE_VARIABLE = "FAIRSEQ_SPEAKER_KILL_DURING_WRITE"

_writes = itertools.count(1)


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname())[:40] or "host"


def _parts(path: str):
    folder, name = os.path.split(os.path.abspath(path))
    root, ext = os.path.splitext(name)
    return folder, root, ext


def temporary_path(path: str) -> str:
    """The (unique) temporary file :func:`atomic_path` writes before it becomes ``path``."""
    folder, root, ext = _parts(path)
    return os.path.join(folder, f".{root}.{TMP_MARK}-{_host()}-{os.getpid()}-{next(_writes)}{ext}")


def _leftovers(path: str):
    """``(file, host, pid)`` of every temporary file of ``path`` in its folder."""
    folder, root, ext = _parts(path)
    pattern = re.compile(rf"\.{re.escape(root)}\.{TMP_MARK}-(?P<host>.+)-(?P<pid>\d+)-\d+{re.escape(ext)}")
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [(os.path.join(folder, name), m.group("host"), int(m.group("pid")))
            for name in sorted(names) for m in [pattern.fullmatch(name)] if m]


def leftovers(path: str) -> List[str]:
    """Temporary files of ``path`` in its folder, of any machine, whether their writer still runs or not."""
    return [tmp for tmp, _, _ in _leftovers(path)]


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # another user's process, or no way to tell: keep its file
    return True


def remove_leftovers(path: str) -> List[str]:
    """Remove the temporary files of ``path`` left by processes of this machine that no longer run (killed
    while writing it); returns them. Files of running processes and of other machines are kept."""
    removed = []
    for tmp, host, pid in _leftovers(path):
        if host != _host() or pid == os.getpid() or _running(pid):
            continue
        with contextlib.suppress(OSError):
            os.remove(tmp)
            removed.append(tmp)
    return removed


def _kill_hook(path: str, tmp: str) -> None:
    """The test hook of the module's text."""
    pattern = os.environ.get(KILL_DURING_WRITE_VARIABLE)
    if not pattern or not fnmatch.fnmatch(os.path.basename(path), pattern):
        return
    if os.path.isfile(tmp):
        with open(tmp, "r+b") as f:
            f.truncate(os.path.getsize(tmp) // 2)
    os.kill(os.getpid(), signal.SIGKILL)


def _sync(path: str) -> None:
    """``fsync`` a file or a folder where the system allows it (not every one lets a folder be synced)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def check_writable(path: str) -> None:
    """Refuse (:class:`UserError`) a ``path`` that is empty, a symbolic link, a directory or another file than a regular
    one (a device, a pipe: the rename would put a regular file in its place), or whose folder is missing or not
    writable."""
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise UserError(f"cannot write {path!r}: give the path of a file to write")
    if os.path.islink(path):  # the rename would replace the link, not write the file it names (/dev/stdout)
        raise UserError(f"cannot write {path}: it is a symbolic link (to {os.readlink(path)}), which the written file "
                        f"would replace, leaving the file it names as it was: give the path of the file itself")
    if os.path.isdir(path):
        raise UserError(f"{path} is a directory: give the path of a file to write")
    if os.path.exists(path) and not os.path.isfile(path):
        raise UserError(f"cannot write {path}: it is not a regular file (a device, a pipe or a socket), which a "
                        f"written file would replace: give the path of a file")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UserError(f"cannot write {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise UserError(f"cannot write {path}: the folder {folder} is not writable")


def same_file(one: str, other: str) -> bool:
    """Whether two paths name one file: the file itself where both exist (links, ``..`` and hard links seen through),
    else the same resolved path."""
    try:
        if os.path.exists(one) and os.path.exists(other):
            return os.path.samefile(one, other)
    except OSError:
        pass
    return os.path.realpath(one) == os.path.realpath(other)


def check_not_an_input(path: str, option: str, inputs: Sequence[Tuple[str, Optional[str]]] = (),
                       folders: Sequence[Tuple[str, Optional[str]]] = ()) -> None:
    """Refuse (:class:`UserError`) an output ``path`` (given by ``option``) that names a file the command reads: one of
    ``inputs`` (``(what it is, path)``, e.g. ``("the checkpoint given by --path", args.path)``) or a file in one of
    ``folders`` (``(what it is, folder)``: a data folder's dictionaries and binarized splits). The write would replace
    it whole (:func:`atomic_path`): a checkpoint exported over itself, a dictionary of the data folder."""
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        return  # check_writable names it
    for what, source in inputs:
        if source and same_file(path, source):
            raise UserError(f"{option} {path} is {what}, which the command reads: writing it would replace it; give "
                            f"another file")
    for what, folder in folders:
        if folder and os.path.isdir(folder) and os.path.exists(path) and any(
                same_file(path, os.path.join(folder, name)) for name in os.listdir(folder)):
            raise UserError(f"{option} {path} is a file of {what} ({folder}), which the command reads: writing it "
                            f"would replace it; give a file outside that folder")


#: the system's errors of a disk with no room left for the file (a full disk, a quota reached)
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class NoSpaceLeft(UserError):
    """A write that found no space on its disk; the earlier file is kept."""


def _behind(error: Optional[BaseException], errnos: Tuple[int, ...], torch_text: str,
            torch_error: Callable[[str], OSError]) -> Optional[OSError]:
    """The ``OSError`` of one of ``errnos`` behind ``error`` (its causes and contexts, followed once each), or the one
    ``torch_error`` makes of a ``RuntimeError`` whose text holds ``torch_text`` (torch's writer wraps its file's
    ``OSError`` so); None if there is neither."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, OSError) and error.errno in errnos:
            return error
        if isinstance(error, RuntimeError) and torch_text in str(error):
            return torch_error(str(error))
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _no_space(error: Optional[BaseException]) -> Optional[OSError]:
    """The :data:`NO_SPACE` error behind ``error``, or None."""
    return _behind(error, NO_SPACE, "No space left on device",
                   lambda _: OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))


#: the system's errors of a file it will not create where it is asked to (``/proc``, a read-only file system)
NOT_CREATED = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.ENXIO)


def _os_error(error: Optional[BaseException]) -> Optional[OSError]:
    """The system's refusal to create the file behind ``error`` (:data:`NOT_CREATED`), or None: other errors (of the
    disk, of the caller) stay as they are."""
    return _behind(error, NOT_CREATED, "open file failed with strerror:",
                   lambda text: OSError(errno.EIO, text.split("strerror:", 1)[1].strip()))


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """A temporary path beside ``path`` (see the module's text), moved onto ``path`` when the block ends without
    error and removed when it does not. A ``path`` that is a directory, or whose folder is missing or not
    writable, is refused (:class:`UserError`) before anything is written; leftovers of earlier writers of
    ``path`` that were killed are removed first. A disk that fills up during the write ends it with
    :class:`NoSpaceLeft` (a user error: one message), the temporary file removed and the earlier file kept."""
    check_writable(path)
    remove_leftovers(path)
    tmp = temporary_path(path)
    try:
        yield tmp
        _kill_hook(path, tmp)
        _sync(tmp)  # on disk before the rename: a power cut leaves the old file or the new one, never an empty one
        os.replace(tmp, path)
        _sync(os.path.dirname(os.path.abspath(path)))  # the rename itself
    except (OSError, RuntimeError) as e:
        full = _no_space(e)
        failed = full or _os_error(e)
        if failed is None:  # neither a full disk nor a file the system will not create: not ours to name
            raise
        kept = "the earlier file is kept" if os.path.exists(path) else "no file was written"
        if full is None:
            raise UserError(f"cannot write {path}: {failed.strerror or failed}; {kept}") from None
        quota = " (a disk quota reached)" if full.errno == errno.EDQUOT else ""
        raise NoSpaceLeft(f"no space left on device writing {path}{quota}; {kept}. Free space in "
                          f"{os.path.dirname(os.path.abspath(path))} (or write elsewhere) and run again") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_text(path: str, text: str) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)


def write_json(path: str, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def copy_file(source: str, path: str) -> None:
    """Copy ``source`` to ``path`` atomically: ``path`` is the old file or the whole copy, never part of it."""
    with atomic_path(path) as tmp:
        shutil.copyfile(source, tmp)


def make_folder(path: str, option: str) -> None:
    """Make the output folder ``path`` of ``option`` (and its parents) if missing; a file in its place or a
    place that cannot be written is refused (:class:`UserError`)."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise UserError(f"{option} {path} is a file: give a folder (it is made if missing)")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise UserError(f"{option} {path}: the folder cannot be made ({e.strerror})") from None
    if not os.access(path, os.W_OK):
        raise UserError(f"{option} {path}: the folder is not writable")
