"""The files of a data folder the ``speaker_translation`` task checks before fairseq reads them: the dictionaries
(:func:`check_dictionary_files`) and the names of its splits (SATED's ``dev`` for fairseq's ``valid``)."""

import os
from typing import Optional

from fairseq import utils
from fairseq.data import data_utils

from fairseq_speaker.data import SpeakerDataError

SPEAKER_DICT_FILE = "dict.spk.txt"


def one_folder_problem(data: str) -> Optional[str]:
    """Why ``data``, given as one data folder (the Python API's, a service's), cannot be read as one by fairseq, or
    None: fairseq reads a path holding ``os.pathsep`` as several folders (shards), so that ``runs/d:2024/bin`` was
    "not found: runs/d" and ``bin:bin2`` a ``TypeError``."""
    if os.pathsep not in data:
        return None
    return (f"{data}: fairseq reads a path holding {os.pathsep!r} as several data folders (shards), and the model is "
            f"read with one: give a folder whose path holds no {os.pathsep!r} (rename it, or link it: ln -s "
            f"'{data}' bin)")


def check_dictionary_files(cfg) -> None:
    """The folder of the dictionaries (the first path of ``cfg.data``) holds ``dict.SRC.txt`` and ``dict.TGT.txt``, and
    the languages are given or can be read from its file names; one message if not, where fairseq's setup ends in an
    ``Exception`` or a ``FileNotFoundError`` with a traceback."""
    paths = utils.split_paths(cfg.data) if cfg.data else []
    if not paths:
        return  # fairseq's own check
    folder = paths[0]
    if not os.path.isdir(folder) and os.path.isdir(cfg.data):  # "not found: d" for the folder d:2024/bin
        raise SpeakerDataError(f"data directory {one_folder_problem(cfg.data)}")
    if not os.path.isdir(folder):
        raise SpeakerDataError(f"data directory not found: {folder} (give the folder fairseq-preprocess wrote, with "
                               f"its dict.SRC.txt and dict.TGT.txt)")
    source, target = cfg.source_lang, cfg.target_lang
    if source is None or target is None:
        inferred = data_utils.infer_language_pair(folder)
        source, target = source or inferred[0], target or inferred[1]
    if source is None or target is None:
        found = sorted(f for f in os.listdir(folder)
                       if f.startswith("dict.") and f.endswith(".txt") and f != SPEAKER_DICT_FILE)
        held = f"only {', '.join(found)}" if found else "no dict.SRC.txt and dict.TGT.txt"
        raise SpeakerDataError(f"{folder}: no binarized split (SPLIT.SRC-TGT.SRC.bin) to read the languages from, "
                               f"and {held}: give the data folder the model was trained on (fairseq-preprocess's "
                               f"output; fairseq's commands also take --source-lang and --target-lang)")
    missing = [f"dict.{lang}.txt" for lang in (source, target)
               if not os.path.isfile(os.path.join(folder, f"dict.{lang}.txt"))]
    if missing:
        raise SpeakerDataError(f"{folder}: no {' and no '.join(missing)} there: give the data folder the model was "
                               f"trained on (fairseq-preprocess's output, with dict.{source}.txt and "
                               f"dict.{target}.txt)")





def dev_name(split: str) -> Optional[str]:
    """SATED's name for a fairseq validation split (``valid`` -> ``dev``, ``valid1`` -> ``dev1``), or None."""
    return "dev" + split[len("valid"):] if split.startswith("valid") else None
