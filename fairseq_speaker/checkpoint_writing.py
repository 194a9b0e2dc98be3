"""Writing a checkpoint whole or not at all, through fairseq's own saving.

fairseq-train writes a checkpoint with ``torch_persistent_save`` (through a temporary file of its own, left behind
by a killed run) and copies it to ``checkpoint_best.pt`` and ``checkpoint_last.pt`` with a plain copy, which a run
killed half way leaves truncated. :func:`atomic_persistent_save` and :func:`atomic_copies` make both go through the
package's atomic writer (:mod:`fairseq_speaker.atomic_write`); they are installed in fairseq by
:mod:`fairseq_speaker.fairseq_patches`.
"""

import os
from typing import Any, Callable

import torch

from fairseq_speaker.atomic_write import atomic_path, copy_file


def _local(path) -> bool:
    return isinstance(path, str) and "://" not in path


def atomic_persistent_save(original: Callable) -> Callable:
    """fairseq's ``torch_persistent_save`` writing a local checkpoint through :func:`atomic_path` (a hidden
    temporary file that says whose it is, removed or replaced by the next write once its writer is gone);
    other destinations (ioPath URLs, asynchronous writes) are left to fairseq."""
    def torch_persistent_save(obj, filename, async_write: bool = False):
        if async_write or not _local(filename):
            return original(obj, filename, async_write=async_write)
        with atomic_path(filename) as tmp, open(tmp, "wb") as f:
            torch.save(obj, f)
    return torch_persistent_save


def atomic_copies(path_manager: Any) -> type:
    """fairseq's ``PathManager`` whose ``copy`` of a local file is atomic: fairseq-train copies the checkpoint it
    just wrote to ``checkpoint_best.pt`` and ``checkpoint_last.pt``, and a plain copy killed half way would
    leave a truncated ``checkpoint_last.pt`` that the next run resumes from."""
    class AtomicCopies(path_manager):
        @staticmethod
        def copy(src_path: str, dst_path: str, overwrite: bool = False) -> bool:
            if not (_local(src_path) and _local(dst_path)):
                return path_manager.copy(src_path, dst_path, overwrite=overwrite)
            if os.path.exists(dst_path) and not overwrite:
                return False
            copy_file(src_path, dst_path)
            return True

    AtomicCopies.__name__ = AtomicCopies.__qualname__ = path_manager.__name__
    return AtomicCopies
