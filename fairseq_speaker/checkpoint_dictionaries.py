"""A checkpoint's dictionaries: the record it keeps of them, and their comparison with a data folder's.

Every checkpoint written after 0.8.0 records in its task state the dictionaries its model was built with
(:func:`dictionaries_record`, under :data:`~fairseq_speaker.checkpoints.DICTIONARIES_KEY`). A checkpoint paired with
another data folder's dictionaries would translate other words than it was trained on, without an error: the task
refuses it once its model is built (:func:`check_vocabulary`, from what
:func:`~fairseq_speaker.checkpoints.note_vocabulary` noted as the checkpoint was read), a reader that pairs the two
without building the model refuses it by the files (:func:`check_data_folder`), symbol by symbol where the checkpoint
records its dictionaries and by size where it does not (:func:`dictionary_problems`). fairseq-generate's
``--lm-path`` is refused where the language model's dictionary is not the target dictionary
(:func:`check_language_model`).
"""

import argparse
import os
from typing import Any, Dict, List, Optional

from fairseq_speaker.checkpoints import EMBEDDINGS, CheckpointError, read_checkpoint, recorded_dictionaries


def dictionaries_record(source, target) -> Dict[str, dict]:
    """The record of :data:`~fairseq_speaker.checkpoints.DICTIONARIES_KEY` for two fairseq dictionaries (either may
    be None: not recorded)."""
    from fairseq_speaker.data.dictionary_hash import dictionary_hash

    return {side: {"sha1": dictionary_hash(d), "symbols": list(d.symbols), "nspecial": int(d.nspecial)}
            for side, d in (("source", source), ("target", target)) if d is not None}


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
    """Refuse (:class:`CheckpointError`) a checkpoint (``as_read``: what
    :func:`~fairseq_speaker.checkpoints.note_vocabulary` noted) whose dictionaries are not those of ``task``'s data
    folder, which ``model`` was just built with: the checkpoint was trained on another data folder (another
    dictionary). A checkpoint that records its dictionaries (releases after 0.8.0) is compared symbol by symbol with
    the data folder's files (``task.data_dictionaries``); an older one by the rows of its embedding tables only."""
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
