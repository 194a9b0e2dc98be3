"""Writing files whole or not at all: a temporary file in the same folder, then ``os.replace``.

An interrupted command (Ctrl-C, a full disk, a killed job) leaves the earlier version of a file, or
none, never half of one.
"""

import contextlib
import json
import os
from typing import Any, Iterator


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """A temporary path beside ``path`` (same extension, so that writers that go by it still do), moved
    onto ``path`` when the block ends without error and removed when it does not."""
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
