"""Data-parallel training through fairseq's own distributed machinery: two CPU processes (gloo) give the
update of one process that sees both processes' batches (``--update-freq 2``)."""

import os
import socket
import subprocess

import torch

from tests.cli import BIN, run, train_args

#: without dropout the two runs do the same arithmetic, up to the order of the gradient sums
NO_DROPOUT = ["--dropout", "0", "--lstm-dropout", "0", "--target-word-dropout", "0"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train_distributed(args, world_size: int = 2):
    """``fairseq-train`` in ``world_size`` processes on this machine, as the README launches them on CPUs."""
    init = f"tcp://127.0.0.1:{_free_port()}"
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    procs = [subprocess.Popen(
        [os.path.join(BIN, "fairseq-train"), *args, "--distributed-world-size", str(world_size),
         "--distributed-rank", str(rank), "--distributed-init-method", init, "--distributed-no-spawn",
         "--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for rank in range(world_size)]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    for rank, (proc, out) in enumerate(zip(procs, outputs)):
        assert proc.returncode == 0, f"rank {rank} failed:\n{out[-3000:]}"
    return outputs


def _floats(checkpoint: str):
    state = torch.load(checkpoint, weights_only=True)
    return {k: v for k, v in state["model"].items() if torch.is_tensor(v) and v.is_floating_point()}, state


def test_two_processes_train_as_one_with_their_two_batches(toy, tmp_path):
    common = ["--batch-size", "6", "--max-update", "6", "--max-epoch", "0", "--save-interval-updates", "6",
              *NO_DROPOUT]
    outputs = _train_distributed(train_args(toy["bin"], str(tmp_path / "two"), "lstm_full_bias", *common))
    assert "distributed init (rank 1)" in outputs[1]
    # several processes average dense gradients: the rows with one are updated row by row from them, as one
    # process updates the rows of its two batches' speakers
    assert "row-sparse adam updates (only the rows of each batch's speakers; several processes" in outputs[0]
    run("train", train_args(toy["bin"], str(tmp_path / "one"), "lstm_full_bias", *common, "--update-freq", "2"))
    two, two_state = _floats(str(tmp_path / "two" / "checkpoint_last.pt"))
    one, one_state = _floats(str(tmp_path / "one" / "checkpoint_last.pt"))
    assert two_state["extra_state"]["train_iterator"]["iterations_in_epoch"] == 6  # updates of two batches
    assert two_state["task_state"]["speaker_dictionary"] == one_state["task_state"]["speaker_dictionary"]
    assert torch.count_nonzero(two["decoder.speaker_bias.weight"]) > 0  # the speakers were trained
    assert one.keys() == two.keys()
    for name, value in one.items():
        assert torch.allclose(two[name], value, atol=1e-5), name
