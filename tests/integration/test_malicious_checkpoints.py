"""A checkpoint carrying code (an ``os.system`` call in its pickle) is refused by every command that
loads checkpoints, with the file named, and the code never runs."""

import os

import pytest
import torch

from tests.cli import assert_user_error, call_main, generate_args, run, train_args


class Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


PLACES = ["model", "task_state", "last_optimizer_state", "extra_state"]


def _evil(trained, tmp_path, place):
    state = torch.load(trained("lstm_fact_bias"), weights_only=True)
    marker = str(tmp_path / f"ran-{place}")
    target = state[place]
    target["payload"] = Payload(marker)  # every place is a dict fairseq reads
    path = str(tmp_path / f"evil-{place}.pt")
    torch.save(state, path)
    return path, marker


def _refused(proc, path, marker):
    assert proc.returncode != 0
    assert f"{path}: refused to load: it holds posix.system" in proc.stderr, proc.stderr[-2000:]
    assert_user_error(proc)
    assert not os.path.exists(marker)


@pytest.mark.parametrize("place", PLACES)
def test_fairseqs_reader_refuses_code_anywhere_in_the_checkpoint(trained, tmp_path, place):
    from fairseq import checkpoint_utils

    from fairseq_speaker.checkpoints import CheckpointError

    path, marker = _evil(trained, tmp_path, place)
    with pytest.raises(CheckpointError, match=f"{path}: refused to load: it holds posix.system"):
        checkpoint_utils.load_checkpoint_to_cpu(path)
    assert not os.path.exists(marker)


def test_generate_refuses_it(toy, trained, tmp_path):
    path, marker = _evil(trained, tmp_path, "last_optimizer_state")
    _refused(run("generate", generate_args(toy["bin"], path), check=False), path, marker)


def test_every_other_command_refuses_it(toy, trained, tmp_path):
    path, marker = _evil(trained, tmp_path, "model")
    references = os.path.join(toy["raw"], "test.fr")
    # fairseq's commands in processes of their own; ours through their mains, in this process
    commands = [
        ("interactive", generate_args(toy["bin"], path, "--speaker", "spk000"), "i am tired .\n"),
        ("train", train_args(toy["bin"], str(tmp_path / "ckpt"), "lstm_fact_bias", "--restore-file", path,
                             "--max-epoch", "3"), None),
        ("fairseq-speaker-report", ["--out", str(tmp_path / "report"), "--references", references,
                                    "--system", f"x={references}", "--checkpoint", f"x={path}",
                                    "--data", toy["bin"], "--tokenize", "none"], None),
        ("fairseq-speaker-adapt", [toy["bin"], "--path", path, "--adapt-prefix", os.path.join(toy["raw"], "test"),
                                   "--save", str(tmp_path / "out.pt"), "--replace"], None),
        ("fairseq-speaker-vectors", ["export", toy["bin"], "--path", path, "--out", str(tmp_path / "v.npz")], None),
    ]
    for command, args, stdin in commands:
        if command.startswith("fairseq-speaker-"):
            proc = call_main(command, args, check=False)
        else:
            proc = run(command, args, check=False, stdin=stdin)
        assert proc.returncode != 0, command
        assert "refused to load" in proc.stderr and "posix.system" in proc.stderr, (command, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr, (command, proc.stderr[-2000:])
        assert not os.path.exists(marker)
