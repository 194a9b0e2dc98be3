"""Session fixtures: the toy data binarized once, and each system trained once (see tests/cli.py)."""

import os

import pytest

from tests.cli import make_toy, run, train_args


@pytest.fixture(scope="session")
def toy(tmp_path_factory):
    return make_toy(str(tmp_path_factory.mktemp("toy")))


@pytest.fixture(scope="session")
def trained(toy, tmp_path_factory):
    """A function system -> checkpoint path, training each system (``ARCH[:VARIANT][+spk_token]``) once."""
    cache = {}

    def get(system):
        if system not in cache:
            save_dir = str(tmp_path_factory.mktemp(system.replace(":", "-").replace("+", "-")))
            extra = []
            if system == "lstm_fact_bias":  # numpy values in the checkpoint
                extra = ["--eval-bleu", "--eval-bleu-args", '{"beam": 1, "max_len_b": 3}']
            run("train", train_args(toy["bin"], save_dir, system, *extra))
            cache[system] = os.path.join(save_dir, "checkpoint_best.pt")
        return cache[system]

    return get
