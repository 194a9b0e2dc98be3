"""Reading a fairseq checkpoint: torch >= 2.6 loads it without turning off ``weights_only``, every error names the
file, and checkpoints of earlier releases are upgraded as they are read.

Since torch 2.6, ``torch.load`` unpickles only tensors, plain containers and
allow-listed classes. A checkpoint written by ``fairseq-train`` can hold more:
numpy arrays and scalars in its saved metrics (BLEU counts with
``--eval-bleu``, a numpy ``best`` score) and an ``argparse.Namespace`` in
checkpoints of the legacy argparse path; stock ``fairseq-generate`` then fails
with "Weights only load failed". Importing this package (``--user-dir``)
allow-lists exactly those classes (:func:`allow_fairseq_checkpoints`), so a
checkpoint from an untrusted source still cannot run code when it is loaded.
What torch raises for a file that cannot or must not be loaded becomes a :class:`CheckpointError` naming it
(:func:`readable`).

It also upgrades checkpoints written before 0.3.0 as fairseq reads them (:func:`upgrade`):
their speaker rows get the names of the speaker dictionary saved beside them (the
task state), so that ``fairseq-train --restore-file`` maps them by name; and notes in the state read the shapes of
its embedding tables and its record of its dictionaries (:func:`note_vocabulary`), which the task compares with its
data folder's (:mod:`fairseq_speaker.checkpoint_dictionaries`). Both are
installed in fairseq and torch by :mod:`fairseq_speaker.fairseq_patches`, as is the atomic writing of checkpoints
(:mod:`fairseq_speaker.checkpoint_writing`).
"""

import argparse
import contextlib
import importlib
import os
import pickle
import re
from typing import Callable, Dict, List, Optional

import numpy as np
import torch

from fairseq_speaker.errors import UserError


def _numpy_globals():
    """numpy's array/scalar reconstructors, under the module names of numpy 1 and numpy 2."""
    multiarray = importlib.import_module("numpy._core.multiarray" if hasattr(np, "_core") else "numpy.core.multiarray")
    entries: List[object] = [np.ndarray, np.dtype]
    # numpy >= 1.25 pickles a dtype through its class (numpy.dtypes.Int64DType, ...); numbers only
    dtypes = getattr(np, "dtypes", None)
    if dtypes is not None:
        numeric = (np.bool_, np.integer, np.floating, np.complexfloating)
        for name in dir(dtypes):
            cls = getattr(dtypes, name) if name.endswith("DType") else None
            scalar = getattr(cls, "type", None)  # the scalar type of a dtype class
            if isinstance(cls, type) and isinstance(scalar, type) and issubclass(scalar, numeric):
                entries.append(cls)
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


# -- a checkpoint that cannot or must not be loaded: errors that name the file --------------------------------


class CheckpointError(UserError):
    """A checkpoint that cannot or must not be loaded; the message names it."""


def not_a_file(path: str) -> Optional[str]:
    """Why ``path`` (that exists) is no checkpoint file: a folder, or a device, a pipe or a socket (reading a pipe
    waits for a writer for ever); None for a regular file or a path that is not there."""
    if not isinstance(path, (str, os.PathLike)):  # a file object: torch reads it as it is
        return None
    if os.path.isdir(path):
        return f"{path} is a directory, not a checkpoint"
    if os.path.exists(path) and not os.path.isfile(path):
        return (f"{path}: not a regular file (a device, a pipe or a socket), which no checkpoint is: give the "
                f"checkpoint file that fairseq-train wrote")
    return None


@contextlib.contextmanager
def readable(path: str):
    """Turn what ``torch.load`` raises for a checkpoint that cannot or must not be loaded into a
    :class:`CheckpointError` naming ``path``; refuse a path that is no regular file before it is opened."""
    problem = not_a_file(path)
    if problem:
        raise CheckpointError(problem)
    try:
        yield
    except UserError:
        raise
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
    except (IndexError, ValueError, TypeError) as e:  # what torch's unpickler meets in a text or random file
        raise CheckpointError(f"{path}: not a readable fairseq checkpoint: damaged or another kind of file "
                              f"({type(e).__name__}: {str(e)[:100]}); give a checkpoint written by fairseq-train "
                              f"or fairseq-speaker-adapt") from None
    except (EOFError, RuntimeError, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise CheckpointError(f"checkpoint not found: {path}") from None
        detail = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise CheckpointError(f"{path}: not a readable fairseq checkpoint: truncated, damaged or another kind of file "
                              f"({type(e).__name__}: {detail})") from None


def read_checkpoint(path: str) -> dict:
    """A checkpoint's state as written (``weights_only``, the allow-list above), upgraded as fairseq's
    reader upgrades it here (:func:`upgrade`); errors name the file."""
    with readable(path):
        state = torch.load(path, map_location="cpu", weights_only=True)
    return upgrade(state)


# -- upgrades, run on every checkpoint as it is read ----------------------------------------------------------

SPEAKER_NAMES_KEY = "decoder.speaker_bias._extra_state"
#: the task-state key of the onboarding record (:mod:`fairseq_speaker.onboarding.checkpoint` keeps it):
#: ``{"names": [...], "sentences": [int or None, ...], "complete": bool}``, the speakers added after training in the
#: order they were added, the sentence pairs each was fitted on (None: not recorded, e.g. rows imported from a
#: vectors file or refitted); ``complete`` False when the checkpoint it was added to did not say which of its
#: speakers were onboarded before
ONBOARDED_KEY = "onboarded_speakers"


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


def add_speaker_sentences(state: dict) -> dict:
    """Give the speaker rows' names as read (:data:`SPEAKER_NAMES_KEY`) the sentences each speaker was learned from
    (``sentences``, 0: not known): its task state's speaker dictionary counts them, and the onboarding record
    (:data:`ONBOARDED_KEY`) the pairs an onboarded speaker was fitted on. fairseq-train ``--restore-file`` and
    ``--finetune-from-model`` load the model's state but not the task's: the model keeps these with the names it
    restored, which the task takes (``SpeakerTranslationTask.take_restored_speakers``), so that a speaker the new data
    lacks keeps its count.
    Never saved: the model writes its names afresh."""
    model = state.get("model") if isinstance(state, dict) else None
    task_state = state.get("task_state") if isinstance(state, dict) else None
    extra = model.get(SPEAKER_NAMES_KEY) if isinstance(model, dict) else None
    if not isinstance(extra, dict) or not isinstance(extra.get("speakers"), list) or not isinstance(task_state, dict):
        return state
    speakers, record = task_state.get("speaker_dictionary"), task_state.get(ONBOARDED_KEY)
    counts = dict(zip(speakers.get("names", []), speakers.get("counts", []))) if isinstance(speakers, dict) else {}
    if isinstance(record, dict):
        counts.update({name: n for name, n in zip(record.get("names", []), record.get("sentences", [])) if n})
    extra["sentences"] = [int(counts.get(name) or 0) for name in extra["speakers"]]
    return state


#: functions ``state -> state`` that upgrade or complete every checkpoint as it is read (:func:`upgrade`)
_ON_LOAD: List[Callable[[dict], dict]] = [add_speaker_names, add_speaker_sentences]


def on_checkpoint_load(fn: Callable[[dict], dict]) -> None:
    """Have ``fn`` upgrade or complete every checkpoint as fairseq (or :func:`read_checkpoint`) reads it."""
    _ON_LOAD.append(fn)


def upgrade(state: dict, path: Optional[str] = None) -> dict:
    """Every :func:`on_checkpoint_load` function on ``state``; for fairseq's reader (which gives ``path``, the file
    read), also :func:`note_vocabulary`, for the task that builds the model next."""
    for fn in _ON_LOAD:
        state = fn(state)
    return note_vocabulary(state, path) if path is not None else state


# -- the vocabulary a checkpoint was built with, noted as it is read ------------------------------------------

#: the key of a task state under which :func:`note_vocabulary` leaves what the task checks once its model is built
AS_READ_KEY = "_fairseq_speaker_checkpoint_as_read"
#: the task-state key (so in every checkpoint written after 0.8.0) of the dictionaries the model was built with, as
#: its data folder's files hold them: side -> {"sha1": the SHA-1 of the symbols in order, "symbols": [...]}
DICTIONARIES_KEY = "dictionaries"
#: the key of the speakers' words' record in a checkpoint's model state (``fairseq_speaker.modules.words_record``)
WORDS_KEY = "decoder.speaker_words._extra_state"
#: the embedding tables whose rows are the words of the source and the target dictionary
EMBEDDINGS = {"source": "encoder.embed_tokens.weight", "target": "decoder.embed_tokens.weight"}


def recorded_dictionaries(task_state) -> Dict[str, dict]:
    """The sides of a checkpoint's record of its dictionaries (:data:`DICTIONARIES_KEY`) that are whole: none for a
    checkpoint of an earlier release, or a record damaged (compared by size then, as an earlier release's)."""
    recorded = task_state.get(DICTIONARIES_KEY) if isinstance(task_state, dict) else None
    if not isinstance(recorded, dict):
        return {}
    return {side: r for side, r in recorded.items()
            if side in EMBEDDINGS and isinstance(r, dict) and isinstance(r.get("sha1"), str)
            and isinstance(r.get("symbols"), list) and all(isinstance(x, str) for x in r["symbols"])
            and isinstance(r.get("nspecial", 4), int)}


def note_vocabulary(state: dict, path: Optional[str] = None) -> dict:
    """Leave in the task state of a checkpoint being read its path, the shapes of its embedding tables and its
    record of its dictionaries (none up to 0.8.0), for
    :func:`~fairseq_speaker.checkpoint_dictionaries.check_vocabulary` (the task's ``load_state_dict``
    takes them out: they are never saved again); and the same beside the speaker rows' names, for a model restored
    without its task state (the model writes its names afresh: never saved either)."""
    model = state.get("model") if isinstance(state, dict) else None
    task_state = state.get("task_state") if isinstance(state, dict) else None
    if not isinstance(model, dict) or not isinstance(task_state, dict):
        return state
    shapes = {side: list(model[key].shape) for side, key in EMBEDDINGS.items()
              if key in model and hasattr(model[key], "shape")}
    task_state[AS_READ_KEY] = {"path": path, "shapes": shapes, "dictionaries": recorded_dictionaries(task_state),
                               "speaker_token": bool(task_state.get("speaker_token", False))}
    extra = model.get(SPEAKER_NAMES_KEY)
    if isinstance(extra, dict):  # the same for the model, which fairseq-train restores without the task state
        extra["as_read"] = task_state[AS_READ_KEY]
    words = model.get(WORDS_KEY)
    if isinstance(words, dict) and path is not None:  # a damaged record refused naming its file
        words["read_from"] = str(path)
    return state
