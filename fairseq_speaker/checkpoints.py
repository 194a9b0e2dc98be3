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
import importlib
import os
import pickle
import re
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import torch

from fairseq_speaker.atomic_write import atomic_path, copy_file
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


SPEAKER_NAMES_KEY = "decoder.speaker_bias._extra_state"
#: the task-state key of the onboarding record (:mod:`fairseq_speaker.onboarding.checkpoint` keeps it):
#: ``{"names": [...], "sentences": [int or None, ...], "complete": bool}``, the speakers added after training in the
#: order they were added, the sentence pairs each was fitted on (None: not recorded, e.g. rows imported from a
#: vectors file or refitted); ``complete`` False when the checkpoint it was added to did not say which of its
#: speakers were onboarded before
ONBOARDED_KEY = "onboarded_speakers"


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


def add_speaker_sentences(state: dict) -> dict:
    """Give the speaker rows' names as read (:data:`SPEAKER_NAMES_KEY`) the sentences each speaker was learned from
    (``sentences``, 0: not known): its task state's speaker dictionary counts them, and the onboarding record
    (:data:`ONBOARDED_KEY`) the pairs an onboarded speaker was fitted on. fairseq-train ``--restore-file`` and
    ``--finetune-from-model`` load the model's state but not the task's: the model hands these to the task with the
    names (``SpeakerTranslationTask.adopt_speaker_names``), so that a speaker the new data lacks keeps its count.
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


# -- writing checkpoints: whole or not at all -----------------------------------------------------------


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


# -- a checkpoint used with the dictionaries of another data folder ------------------------------------------

#: the key of a task state under which :func:`note_vocabulary` leaves what the task checks once its model is built
AS_READ_KEY = "_fairseq_speaker_checkpoint_as_read"
#: the task-state key (so in every checkpoint written after 0.8.0) of the dictionaries the model was built with, as
#: its data folder's files hold them: side -> {"sha1": the SHA-1 of the symbols in order, "symbols": [...]}
DICTIONARIES_KEY = "dictionaries"
#: the embedding tables whose rows are the words of the source and the target dictionary
EMBEDDINGS = {"source": "encoder.embed_tokens.weight", "target": "decoder.embed_tokens.weight"}


def dictionaries_record(source, target) -> Dict[str, dict]:
    """The record of :data:`DICTIONARIES_KEY` for two fairseq dictionaries (either may be None: not recorded)."""
    from fairseq_speaker.data.dictionary_hash import dictionary_hash

    return {side: {"sha1": dictionary_hash(d), "symbols": list(d.symbols), "nspecial": int(d.nspecial)}
            for side, d in (("source", source), ("target", target)) if d is not None}


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
    record of its dictionaries (none up to 0.8.0), for :func:`check_vocabulary` (the task's ``load_state_dict``
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
    return state


def dictionary_problems(theirs: Dict[str, dict], ours: Dict[str, dict], files: Dict[str, str]) -> List[str]:
    """How a checkpoint's dictionaries (``theirs``) differ from a data folder's (``ours``), one phrase a side.

    Each side maps to ``{"size": symbols}`` and, where known, the record of :func:`dictionaries_record`
    (``sha1``, ``symbols``, ``nspecial``); ``files`` names each side's file in the data folder. Sizes are
    compared first; then, where both sides have a record, the symbols in order (the first line that differs)."""
    problems = []
    for side in ("source", "target"):
        mine, other = theirs.get(side), ours.get(side)
        if not mine or not other:
            continue
        if mine.get("size") is not None and other.get("size") is not None and mine["size"] != other["size"]:
            problems.append(f"its {side} dictionary has {mine['size']:,} symbols, {files[side]} has "
                            f"{other['size']:,}")
            continue
        if not mine.get("sha1") or not other.get("sha1") or mine["sha1"] == other["sha1"]:
            continue
        a, b = list(mine.get("symbols") or []), list(other.get("symbols") or [])
        i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        nspecial = int(other.get("nspecial", 4))
        where = f"line {i - nspecial + 1} of {files[side]}" if i >= nspecial else f"symbol {i} of {files[side]}"
        said = (f"{where} is {b[i]!r}" if i < len(b) else f"{files[side]} ends before line {i - nspecial + 1}")
        problems.append(f"{said}, the model's {side} dictionary has {a[i]!r} there" if i < len(a) else
                        f"{said}, past the end of the model's {side} dictionary")
    return problems


def dictionary_mismatch(path: str, data: str, problems: List[str]) -> CheckpointError:
    """The refusal of a checkpoint paired with a data folder of other dictionaries (:func:`dictionary_problems`)."""
    return CheckpointError(
        f"{path} was trained with the dictionaries of another data folder than {data}: {'; '.join(problems)}. "
        f"Give the data folder the model was trained on (its dict.*.txt), or binarize this data with the model's "
        f"dictionaries (fairseq-preprocess --srcdict DICT --tgtdict DICT)")


def check_vocabulary(as_read: Optional[dict], model, task) -> None:
    """Refuse (:class:`CheckpointError`) a checkpoint (``as_read``: what :func:`note_vocabulary` noted) whose
    dictionaries are not those of ``task``'s data folder, which ``model`` was just built with: the checkpoint was
    trained on another data folder (another dictionary). A checkpoint that records its dictionaries (releases after
    0.8.0) is compared symbol by symbol with the data folder's files (``task.data_dictionaries``); an older one
    by the rows of its embedding tables only."""
    if not as_read or not (as_read.get("shapes") or as_read.get("dictionaries")):
        return
    built = model.state_dict()
    cfg = getattr(task, "cfg", None)
    if getattr(cfg, "speaker_token", False) and as_read.get("speaker_token") is False:
        # its target dictionary holds no speaker tokens: the sizes would differ by the speakers, which says nothing
        raise CheckpointError(f"{as_read.get('path') or 'the checkpoint'} was trained without --speaker-token (its "
                              f"sentences start with no token naming their speaker): leave --speaker-token out")
    data = str(getattr(cfg, "data", "") or "").split(os.pathsep)[0] or "the data folder"
    langs = {"source": getattr(cfg, "source_lang", None), "target": getattr(cfg, "target_lang", None)}
    recorded = as_read.get("dictionaries") or {}
    in_data = getattr(task, "data_dictionaries", None) or {}
    theirs: Dict[str, dict] = {}
    ours: Dict[str, dict] = {}
    for side, key in EMBEDDINGS.items():
        shape = (as_read.get("shapes") or {}).get(side)
        added = 0  # the speaker tokens a --speaker-token model adds to the target dictionary, not in its file
        if side == "target" and getattr(task, "uses_speaker_token", False):
            added = len(task.speaker_token_ids())
        theirs[side] = dict(recorded.get(side) or {}, size=int(shape[0]) - added if shape else None)
        ours[side] = dict(in_data.get(side) or {},
                          size=int(built[key].shape[0]) - added if key in built and shape else None)
    files = {side: f"{data}/dict.{langs[side]}.txt" if langs[side] else f"{data}'s {side} dictionary"
             for side in EMBEDDINGS}
    problems = dictionary_problems(theirs, ours, files)
    if problems:
        raise dictionary_mismatch(as_read.get("path") or "the checkpoint", data, problems)


def check_data_folder(state: dict, path: str, data: str) -> None:
    """Refuse (:class:`CheckpointError`) a data folder whose ``dict.SRC.txt`` and ``dict.TGT.txt`` are not the
    dictionaries of the checkpoint ``state`` (read from ``path``), for a reader that pairs the two without building
    the model (``fairseq-speaker-speakers --data``); dictionary files the folder lacks are not compared."""
    from fairseq.data import Dictionary

    model, task_state, cfg = state.get("model"), state.get("task_state"), state.get("cfg")
    if not isinstance(model, dict) or not isinstance(task_state, dict) or cfg is None:
        return
    task = cfg["task"] if not isinstance(cfg, argparse.Namespace) else cfg
    task = vars(task) if isinstance(task, argparse.Namespace) else dict(task or {})
    langs = {"source": task.get("source_lang"), "target": task.get("target_lang")}
    if not langs["source"] or not langs["target"]:  # trained without them: fairseq inferred the pair from the files
        from fairseq.data import data_utils

        langs["source"], langs["target"] = data_utils.infer_language_pair(data)
    recorded = recorded_dictionaries(task_state)
    theirs: Dict[str, dict] = {}
    ours: Dict[str, dict] = {}
    files: Dict[str, str] = {}
    for side, key in EMBEDDINGS.items():
        files[side] = os.path.join(data, f"dict.{langs[side]}.txt")
        if not langs[side] or not os.path.isfile(files[side]):
            continue
        dictionary = Dictionary.load(files[side])
        ours[side] = dict(dictionaries_record(dictionary, None)["source"], size=len(dictionary))
        size = int(model[key].shape[0]) if key in model and hasattr(model[key], "shape") else None
        if side == "target" and task_state.get("speaker_token"):
            size = None  # its rows include the speakers' tokens, which the file does not hold
        theirs[side] = dict(recorded.get(side) or {}, size=size)
    problems = dictionary_problems(theirs, ours, files)
    if problems:
        raise dictionary_mismatch(path, data, problems)


def _task_of(state: dict) -> Optional[str]:
    """The name of the task a checkpoint was trained with, where its options record it."""
    cfg: Any = state.get("cfg") or {}
    task: Any = cfg.get("task") if hasattr(cfg, "get") else None
    name = task.get("_name") if hasattr(task, "get") else None
    return name if isinstance(name, str) else None


def check_language_model(cfg, target: dict, speaker_token: bool = False) -> None:
    """Refuse (:class:`CheckpointError`) fairseq-generate's ``--lm-path`` where fairseq would end in a traceback or
    add the language model's scores to other words than the translations'. ``cfg``: the speaker task's options,
    whose ``lm_path`` is the generation's (``II("generation.lm_path")``); ``target``: the record of the data folder's
    target dictionary (:func:`dictionaries_record`); ``speaker_token``: the model is a ``--speaker-token`` one, whose
    target words include its speakers' tokens, which no language model has.

    fairseq loads the language model with the data folder of the translations (the first of ``cfg.data``) and reads
    its dictionary there as ``dict.txt`` (a traceback where there is none); the language model's score of each word
    id is added to the translation model's, so ``dict.txt`` must hold the target dictionary, symbol by symbol."""
    from fairseq.data import Dictionary
    from omegaconf.errors import OmegaConfBaseException

    try:
        lm_path = getattr(cfg, "lm_path", None)
    except OmegaConfBaseException:  # options made without fairseq's generation options, which it would name
        return
    if not isinstance(lm_path, str) or lm_path.startswith("${"):  # none given, or a dataclass not resolved
        return
    if not os.path.isfile(lm_path):
        raise CheckpointError(f"--lm-path {lm_path}: no such file; give the checkpoint of a language model of the "
                              f"target language (fairseq-train --task language_modeling)")
    task = _task_of(read_checkpoint(lm_path))
    if task is not None and "language_modeling" not in task:
        raise CheckpointError(f"--lm-path {lm_path}: a checkpoint of the task {task}, not a language model (fusing it "
                              f"ended in a traceback at the first sentence): give the checkpoint of a language model "
                              f"of the target language (fairseq-train --task language_modeling)")
    if speaker_token:
        raise CheckpointError(f"--lm-path {lm_path}: a --speaker-token model's target words include its speakers' "
                              f"tokens, which a language model does not have: fuse a language model with a model of "
                              f"a speaker bias, or leave out --lm-path")
    data = str(cfg.data).split(os.pathsep)[0]
    path, target_file = os.path.join(data, "dict.txt"), os.path.join(data, f"dict.{cfg.target_lang}.txt")
    if not os.path.isfile(path):
        raise CheckpointError(
            f"--lm-path {lm_path}: fairseq reads the language model's dictionary as {path}, which is not there; the "
            f"language model must have been trained with the target dictionary {target_file}: copy it there (cp "
            f"{target_file} {path})")
    try:
        lm_symbols = Dictionary.load(path).symbols
    except (ValueError, UnicodeError) as e:  # fairseq's reader: a line that is no "<token> <count>", not UTF-8
        why = " ".join(str(e).split())  # one line: fairseq's message holds the line read, its newline included
        raise CheckpointError(f"--lm-path {lm_path}: {path}, the language model's dictionary, cannot be read "
                              f"({why}): it must be the target dictionary {target_file}: copy it there (cp "
                              f"{target_file} {path})") from None
    except Exception as e:  # fairseq raises a bare Exception for text that is not UTF-8
        if "encoding" not in str(e):
            raise
        raise CheckpointError(f"--lm-path {lm_path}: {path}, the language model's dictionary, is not UTF-8 text: it "
                              f"must be the target dictionary {target_file}: copy it there (cp {target_file} "
                              f"{path})") from None
    symbols = list(target["symbols"])
    if len(lm_symbols) != len(symbols):
        problem = f"{path} has {len(lm_symbols):,} symbols, {target_file} {len(symbols):,}"
    else:
        i = next((i for i, (x, y) in enumerate(zip(lm_symbols, symbols)) if x != y), None)
        if i is None:
            return
        line = i - int(target["nspecial"]) + 1  # the special symbols come first, before the file's lines
        problem = f"line {line} of {path} is {lm_symbols[i]!r}, {target_file} has {symbols[i]!r} there"
    raise CheckpointError(
        f"--lm-path {lm_path}: the language model's dictionary is not the target dictionary ({problem}), and its "
        f"scores are added to the translations' word by word id: give a language model trained with {target_file}, "
        f"and that file as {path}")
