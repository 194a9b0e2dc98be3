"""Tiny toy data binarized by the real fairseq-preprocess, and models trained by the real fairseq-train."""

import os
import shutil
import subprocess
import sys

import pytest

import fairseq_speaker
from fairseq_speaker.toy.corpus import write_corpus

USER_DIR = os.path.dirname(os.path.abspath(fairseq_speaker.__file__))
BIN = os.path.dirname(sys.executable)
TINY = [
    "--encoder-embed-dim", "8", "--decoder-embed-dim", "8", "--encoder-hidden-size", "8",
    "--decoder-hidden-size", "16", "--attention-dim", "8", "--speaker-rank", "3",
]
# 37 test sentences: not a multiple of 8, so fairseq's dropped-last-batch bug would show
SIZES = {"train": 160, "valid": 40, "test": 37}


def run(command, args, check=True, stdin=None, cwd=None):
    """Run ``fairseq-<command>`` (the installed console script) with one thread."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.run([os.path.join(BIN, f"fairseq-{command}"), *args], input=stdin, env=env, cwd=cwd,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"fairseq-{command} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def train_args(data, save_dir, arch, *extra):
    return [
        data, "--user-dir", USER_DIR, "--task", "speaker_translation", "--arch", arch, *TINY,
        "--criterion", "speaker_label_smoothed_cross_entropy", "--label-smoothing", "0.1",
        "--optimizer", "adam", "--lr", "0.005", "--clip-norm", "1.0", "--max-tokens", "4000",
        "--max-epoch", "2", "--save-dir", save_dir, "--no-progress-bar", "--seed", "1", *extra,
    ]


@pytest.fixture(scope="session")
def toy(tmp_path_factory):
    """``raw/`` text and speaker files, ``bin/`` binarized with the speaker files copied beside."""
    root = str(tmp_path_factory.mktemp("toy"))
    raw, data = os.path.join(root, "raw"), os.path.join(root, "bin")
    write_corpus(raw, SIZES, num_speakers=8, seed=2)
    run("preprocess", ["--source-lang", "en", "--target-lang", "fr", "--trainpref", f"{raw}/train",
                       "--validpref", f"{raw}/valid", "--testpref", f"{raw}/test", "--destdir", data,
                       "--workers", "1"])
    for split in SIZES:
        shutil.copy(os.path.join(raw, f"{split}.spk"), data)
    return {"root": root, "raw": raw, "bin": data}


@pytest.fixture(scope="session")
def trained(toy, tmp_path_factory):
    """A function arch -> checkpoint path, training each arch once for the session."""
    cache = {}

    def get(system):
        """``system`` is an arch, or ``spk_token`` (lstm_base with --speaker-token)."""
        if system not in cache:
            save_dir = str(tmp_path_factory.mktemp(system))
            arch, extra = system, []
            if system == "lstm_fact_bias":  # numpy values in the checkpoint
                extra = ["--eval-bleu", "--eval-bleu-args", '{"beam": 1, "max_len_b": 3}']
            if system == "spk_token":
                arch, extra = "lstm_base", ["--speaker-token"]
            run("train", train_args(toy["bin"], save_dir, arch, *extra))
            cache[system] = os.path.join(save_dir, "checkpoint_best.pt")
        return cache[system]

    return get


def copy_data(toy, tmp_path, name="bin"):
    """A private copy of the binarized data, to break; without a speaker dictionary."""
    dest = str(tmp_path / name)
    shutil.copytree(toy["bin"], dest, ignore=shutil.ignore_patterns("dict.spk.txt"))
    return dest
