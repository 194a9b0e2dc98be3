"""Let torch >= 2.6 load fairseq checkpoints without turning off ``weights_only``.

Since torch 2.6, ``torch.load`` unpickles only tensors, plain containers and
allow-listed classes. A checkpoint written by ``fairseq-train`` can hold more:
numpy arrays and scalars in its saved metrics (BLEU counts with
``--eval-bleu``, a numpy ``best`` score) and an ``argparse.Namespace`` in
checkpoints of the legacy argparse path; stock ``fairseq-generate`` then fails
with "Weights only load failed". Importing this package (``--user-dir``)
allow-lists exactly those classes (:func:`allow_fairseq_checkpoints`), so a
checkpoint from an untrusted source still cannot run code when it is loaded.

It also upgrades checkpoints written before 0.3.0 as fairseq reads them (:func:`upgrade`):
their speaker rows get the names of the speaker dictionary saved beside them (the
task state), so that ``fairseq-train --restore-file`` maps them by name. Both are
installed in fairseq and torch by :mod:`fairseq_speaker.fairseq_patches`.
"""

import argparse
import contextlib
import pickle
import re
from typing import Callable, List

import numpy as np
import torch

from fairseq_speaker.errors import UserError


def _numpy_globals():
    """numpy's array/scalar reconstructors, under the module names of numpy 1 and numpy 2."""
    multiarray = getattr(np, "_core", None)
    multiarray = multiarray.multiarray if multiarray is not None else np.core.multiarray
    entries = [np.ndarray, np.dtype]
    # numpy >= 1.25 pickles a dtype through its class (numpy.dtypes.Int64DType, ...); numbers only
    dtypes = getattr(np, "dtypes", None)
    if dtypes is not None:
        numeric = (np.bool_, np.integer, np.floating, np.complexfloating)
        entries += [
            cls for name in dir(dtypes) if name.endswith("DType")
            for cls in [getattr(dtypes, name)]
            if isinstance(cls, type) and getattr(cls, "type", None) is not None
            and isinstance(cls.type, type) and issubclass(cls.type, numeric)
        ]
    for name in ("_reconstruct", "scalar"):
        fn = getattr(multiarray, name)
        entries += [(fn, f"numpy._core.multiarray.{name}"), (fn, f"numpy.core.multiarray.{name}")]
    return entries


def checkpoint_globals():
    """What fairseq 0.12 checkpoints may hold beyond tensors and containers."""
    return [argparse.Namespace] + _numpy_globals()


def allow_fairseq_checkpoints() -> None:
    add_safe_globals = getattr(torch.serialization, "add_safe_globals", None)
    if add_safe_globals is None:  # torch < 2.4 loads everything anyway
        return
    try:
        add_safe_globals(checkpoint_globals())
    except (TypeError, AttributeError):  # torch 2.4 takes no (object, name) pairs
        add_safe_globals([g for g in checkpoint_globals() if not isinstance(g, tuple)])


SPEAKER_NAMES_KEY = "decoder.speaker_bias._extra_state"


class CheckpointError(UserError):
    """A checkpoint that cannot or must not be loaded; the message names it."""


def add_speaker_names(state: dict) -> dict:
    """Name the speaker rows of a checkpoint written before 0.3.0 after its task state's speaker
    dictionary (the one its model was built with). Other checkpoints are returned as they are."""
    model = state.get("model") if isinstance(state, dict) else None
    task_state = state.get("task_state") if isinstance(state, dict) else None
    if not isinstance(model, dict) or SPEAKER_NAMES_KEY in model or not isinstance(task_state, dict):
        return state
    speakers = task_state.get("speaker_dictionary")
    if not isinstance(speakers, dict) or not any(k.startswith("decoder.speaker_bias.") for k in model):
        return state
    model[SPEAKER_NAMES_KEY] = {"speakers": list(speakers["names"])}
    return state


#: functions ``state -> state`` that upgrade or complete every checkpoint as it is read (:func:`upgrade`)
_ON_LOAD: List[Callable[[dict], dict]] = [add_speaker_names]


def on_checkpoint_load(fn: Callable[[dict], dict]) -> None:
    """Have ``fn`` upgrade or complete every checkpoint as fairseq (or :func:`read_checkpoint`) reads it."""
    _ON_LOAD.append(fn)


def upgrade(state: dict) -> dict:
    for fn in _ON_LOAD:
        state = fn(state)
    return state


@contextlib.contextmanager
def readable(path: str):
    """Turn what ``torch.load`` raises for a checkpoint that cannot or must not be loaded into a
    :class:`CheckpointError` naming ``path``."""
    try:
        yield
    except pickle.UnpicklingError as e:  # torch's weights_only refusal, or not a pickle at all
        found = re.search(r"GLOBAL ([\w.]+)", str(e))
        if found:  # weights_only met a class or function it does not allow
            raise CheckpointError(
                f"{path}: refused to load: it holds {found.group(1)}, which a fairseq-speaker checkpoint never "
                f"holds and which could run code when loaded; load only checkpoints you trust") from None
        raise CheckpointError(f"{path}: not a readable fairseq checkpoint (damaged, or another kind of file)"
                              ) from None
    except KeyError as e:  # a torch file without what fairseq reads of a checkpoint ('model', 'best_loss', ...)
        raise CheckpointError(f"{path}: not a fairseq checkpoint (a file torch can read, without {e}): give a "
                              f"checkpoint written by fairseq-train or fairseq-speaker-adapt") from None
    except (EOFError, RuntimeError, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise CheckpointError(f"checkpoint not found: {path}") from None
        if isinstance(e, IsADirectoryError):
            raise CheckpointError(f"{path} is a directory, not a checkpoint") from None
        detail = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise CheckpointError(f"{path}: not a readable fairseq checkpoint: truncated, damaged or another kind of file "
                              f"({type(e).__name__}: {detail})") from None


def read_checkpoint(path: str) -> dict:
    """A checkpoint's state as written (``weights_only``, the allow-list above), upgraded as fairseq's
    reader upgrades it here (:func:`upgrade`); errors name the file."""
    with readable(path):
        state = torch.load(path, map_location="cpu", weights_only=True)
    return upgrade(state)
