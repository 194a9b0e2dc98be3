"""Writing files whole or not at all: a temporary file in the same folder, then ``os.replace``.

An interrupted command (Ctrl-C, a full disk, a killed job) leaves the earlier version of a file, or
none, never half of one.
"""

import contextlib
import json
import os
from typing import Any, Iterator

from fairseq_speaker.errors import UserError


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """A temporary path beside ``path`` (same extension, so that writers that go by it still do), moved
    onto ``path`` when the block ends without error and removed when it does not. A ``path`` that is a
    directory, or whose folder is missing or not writable, is refused (:class:`UserError`) before anything
    is written."""
    if os.path.isdir(path):
        raise UserError(f"{path} is a directory: give the path of a file to write")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UserError(f"cannot write {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise UserError(f"cannot write {path}: the folder {folder} is not writable")
    root, ext = os.path.splitext(path)
    tmp = f"{root}.tmp{os.getpid()}{ext}"
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_text(path: str, text: str) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)


def write_json(path: str, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
