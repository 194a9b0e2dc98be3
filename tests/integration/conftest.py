"""Session fixtures: the toy data binarized once, each system trained once (see tests/cli.py), and a PostgreSQL
server per test worker (tests/postgres.py)."""

import os
import shutil

import pytest
from filelock import FileLock

from tests import postgres as postgres_server
from tests.cli import make_toy, run_here, train_args


@pytest.fixture(scope="session")
def shared(tmp_path_factory, worker_id):
    """A folder every test worker sees (pytest-xdist runs one session per worker): what is made here is
    made once for the whole run, under a file lock."""
    base = tmp_path_factory.getbasetemp()
    return base if worker_id == "master" else base.parent


def _once(shared, name, make):
    """``make(folder)`` the first time any worker asks for ``name``; later calls wait for it and reuse it."""
    folder = shared / name
    with FileLock(str(shared / f"{name}.lock")):
        if not (folder / ".done").exists():
            if folder.exists():
                shutil.rmtree(folder)  # a worker that failed half way
            folder.mkdir()
            make(str(folder))
            (folder / ".done").touch()
    return str(folder)


@pytest.fixture(scope="session")
def once(shared):
    """``once(name, make)``: the folder ``make(folder)`` filled the first time any test worker asked for ``name``
    (what a test module's fixture makes, made once though the module's tests run in both workers)."""
    return lambda name, make: _once(shared, name, make)


@pytest.fixture(scope="session")
def toy(shared):
    folder = _once(shared, "toy", make_toy)
    return {"root": folder, "raw": os.path.join(folder, "raw"), "bin": os.path.join(folder, "bin")}


@pytest.fixture(scope="session")
def trained(toy, shared):
    """A function system -> checkpoint path, training each system (``ARCH[:VARIANT][+spk_token]``) once
    for all test workers (fairseq-train's main, in the worker that asks first)."""

    def train(system, save_dir):
        extra = []
        if system == "lstm_fact_bias":  # numpy values in the checkpoint
            extra = ["--eval-bleu", "--eval-bleu-args", '{"beam": 1, "max_len_b": 3}']
        run_here("train", train_args(toy["bin"], save_dir, system, *extra))

    def get(system):
        name = "trained-" + system.replace(":", "-").replace("+", "-")
        return os.path.join(_once(shared, name, lambda folder: train(system, folder)), "checkpoint_best.pt")

    return get


@pytest.fixture(scope="session")
def stock_trained(toy, shared):
    """A checkpoint of fairseq's own translation task and LSTM (no speakers) on the toy data, trained once for all
    test workers: what a user may hand the speaker commands by mistake."""
    def train(folder):
        run_here("train", [toy["bin"], "--task", "translation", "--arch", "lstm", "--encoder-embed-dim", "8",
                           "--decoder-embed-dim", "8", "--encoder-hidden-size", "8", "--decoder-hidden-size", "8",
                           "--decoder-out-embed-dim", "8", "--optimizer", "adam", "--lr", "0.005", "--max-tokens",
                           "4000", "--max-epoch", "1", "--save-dir", folder, "--no-progress-bar", "--seed", "1",
                           "--no-epoch-checkpoints", "--no-last-checkpoints"])

    return os.path.join(_once(shared, "trained-stock-lstm", train), "checkpoint_best.pt")


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL server of this test worker's own (tests/postgres.py), removed at the end. Where none can start
    the tests that need it are skipped, saying why; on CI (CI=true, where .ci/run installs PostgreSQL) they fail."""
    try:
        server = postgres_server.start()
    except postgres_server.PostgresMissing as e:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL cannot start on CI: {e}")
        pytest.skip(f"PostgreSQL cannot start here: {e}")
    yield server
    server.remove()
