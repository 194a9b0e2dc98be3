"""Running the real fairseq command lines in tests: tiny toy data, tiny models, one thread."""

import os
import shutil
import subprocess
import sys
from typing import Dict

import torch

from fairseq_speaker import USER_DIR, commands
from fairseq_speaker.commands import family
from fairseq_speaker.models import FAMILY_REGISTRY
from fairseq_speaker.toy.corpus import write_corpus

BIN = os.path.dirname(sys.executable)
#: tiny sizes of each model family (its ``tiny`` sizes: 8-16 dims)
TINY = {name: f.scale_args("tiny") for name, f in FAMILY_REGISTRY.items()}
TINY_VARIANTS = ["--speaker-rank", "3", "--speaker-embed-dim", "3"]
# 37 test sentences: not a multiple of 8, so fairseq's dropped-last-batch bug would show
SIZES = {"train": 160, "valid": 40, "test": 37}
GENERATE = ["--beam", "5", "--max-len-b", "6"]


def run(command: str, args, check: bool = True, stdin=None, cwd=None, env=None) -> subprocess.CompletedProcess:
    """Run ``fairseq-<command>`` (or ``fairseq-speaker-<command>``: pass its full name) with one thread."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", **(env or {}))
    name = command if command.startswith("fairseq-speaker-") else f"fairseq-{command}"
    proc = subprocess.run([os.path.join(BIN, name), *args], input=stdin, env=env, cwd=cwd,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"{name} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def train_args(data: str, save_dir: str, system: str, *extra: str):
    """fairseq-train arguments for ``system`` (``ARCH[:VARIANT][+spk_token]``) at tiny sizes, 2 epochs."""
    return commands.train_args(data, save_dir, commands.system_args(system), *TINY[commands.family(system)],
                               *TINY_VARIANTS, "--optimizer", "adam", "--lr", "0.005", "--clip-norm", "1.0",
                               "--max-tokens", "4000", "--max-epoch", "2", "--no-progress-bar", "--seed", "1", *extra)


def generate_args(data: str, checkpoint: str, *extra: str):
    return commands.generate_args(data, checkpoint, *GENERATE, *extra)


def make_toy(root: str) -> Dict[str, str]:
    """``raw/`` text and speaker files, ``bin/`` binarized with the speaker files copied beside."""
    raw, data = os.path.join(root, "raw"), os.path.join(root, "bin")
    write_corpus(raw, SIZES, num_speakers=8, seed=2)
    run("preprocess", ["--source-lang", "en", "--target-lang", "fr", "--trainpref", f"{raw}/train",
                       "--validpref", f"{raw}/valid", "--testpref", f"{raw}/test", "--destdir", data,
                       "--workers", "1"])
    for split in SIZES:
        shutil.copy(os.path.join(raw, f"{split}.spk"), data)
    return {"root": root, "raw": raw, "bin": data}


def doctored_checkpoint(checkpoint: str, path: str, boosts: Dict[str, str], tgt_dict_path: str) -> str:
    """A copy of a full-bias checkpoint (either family) in which each named speaker's bias strongly
    favours one word."""
    state = torch.load(checkpoint, weights_only=True)
    names = state["task_state"]["speaker_dictionary"]["names"]
    words = [line.split()[0] for line in open(tgt_dict_path, encoding="utf-8")]
    weight = state["model"]["decoder.speaker_bias.weight"]
    for speaker, word in boosts.items():
        weight[names.index(speaker), 4 + words.index(word)] += 100.0  # 4 special symbols come first
    torch.save(state, path)
    return path


def assert_user_error(proc: subprocess.CompletedProcess) -> None:
    """A user's mistake ends in one message (``error: ...``), without a Python traceback."""
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("error: "), proc.stderr[-3000:]


def copy_data(toy: Dict[str, str], tmp_path, name: str = "bin") -> str:
    """A private copy of the binarized data, to break; without a speaker dictionary."""
    dest = str(tmp_path / name)
    shutil.copytree(toy["bin"], dest, ignore=shutil.ignore_patterns("dict.spk.txt"))
    return dest


__all__ = ["SIZES", "TINY", "USER_DIR", "assert_user_error", "copy_data", "doctored_checkpoint", "family", "generate_args",
           "make_toy", "run", "train_args"]
