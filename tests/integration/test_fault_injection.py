"""A process killed (SIGKILL, which nothing can catch) while it writes a file: the previous file is intact, the
killed writer's temporary file is recognisably a leftover, and the next run is clean and removes it.

The kill is deterministic: ``FAIRSEQ_SPEAKER_KILL_DURING_WRITE=NAME`` makes the writer of a file named NAME cut
its temporary file to half and kill itself before the rename (the test hook of fairseq_speaker/atomic_write.py).
"""

import pytest
import hashlib
import os
import signal
import socket
import subprocess
import sys

import torch

from fairseq_speaker.atomic_write import KILL_DURING_WRITE_VARIABLE, TMP_MARK, atomic_path, leftovers, write_text
from fairseq_speaker.onboarding.vectors_file import load_speaker_vectors
from tests.cli import call_main, run, train_args


def digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _updates(checkpoint: str) -> int:
    """The number of updates a fairseq-train checkpoint was saved after."""
    return int(torch.load(checkpoint, weights_only=False)["optimizer_history"][-1]["num_updates"])


def kill_while_writing(name: str):
    return {KILL_DURING_WRITE_VARIABLE: name}


def assert_killed(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-3000:])


@pytest.mark.slow  # trains until a save is killed (half a minute); the other writers' kills stay in the default run
def test_a_checkpoint_save_killed_leaves_the_previous_checkpoint(toy, tmp_path):
    save = str(tmp_path / "ckpt")
    run("train", train_args(toy["bin"], save, "lstm_fact_bias", "--max-epoch", "1"))
    last = os.path.join(save, "checkpoint_last.pt")
    before, updates = digest(last), _updates(last)

    # epoch 2 writes checkpoint2.pt, then copies it to checkpoint_best.pt and checkpoint_last.pt: killed there
    proc = run("train", train_args(toy["bin"], save, "lstm_fact_bias", "--max-epoch", "2"), check=False,
               env=kill_while_writing("checkpoint_last.pt"))
    assert_killed(proc)
    assert digest(last) == before and _updates(last) == updates  # whole, and loads
    left = leftovers(last)
    assert len(left) == 1 and os.path.basename(left[0]).startswith(".checkpoint_last." + TMP_MARK)

    run("train", train_args(toy["bin"], save, "lstm_fact_bias", "--max-epoch", "2"))  # resumes from epoch 1
    assert _updates(last) == 2 * updates
    assert [name for name in os.listdir(save) if TMP_MARK in name or name.endswith(".tmp")] == []


def test_an_adaptation_save_killed_leaves_the_previous_model(toy, trained, tmp_path):
    prefix = str(tmp_path / "adapt")
    for ext in ("en", "fr"):
        lines = open(os.path.join(toy["raw"], f"test.{ext}"), encoding="utf-8").read().splitlines()[:4]
        open(f"{prefix}.{ext}", "w", encoding="utf-8").write("\n".join(lines) + "\n")
    open(f"{prefix}.spk", "w", encoding="utf-8").write("newbie\n" * 4)
    out = str(tmp_path / "adapted.pt")
    args = [toy["bin"], "--path", trained("lstm_fact_bias"), "--adapt-prefix", prefix, "--save", out]
    call_main("fairseq-speaker-adapt", args)  # the runs not killed: the command's main, in this process
    before = digest(out)

    open(f"{prefix}.spk", "w", encoding="utf-8").write("other\n" * 4)  # another speaker: another model
    assert_killed(run("fairseq-speaker-adapt", args, check=False, env=kill_while_writing("adapted.pt")))
    assert digest(out) == before
    names = torch.load(out, weights_only=False)["task_state"]["speaker_dictionary"]["names"]
    assert "newbie" in names and "other" not in names
    assert len(leftovers(out)) == 1

    call_main("fairseq-speaker-adapt", args)
    names = torch.load(out, weights_only=False)["task_state"]["speaker_dictionary"]["names"]
    assert "other" in names and leftovers(out) == []


def test_a_vector_export_killed_leaves_the_previous_file(toy, trained, tmp_path):
    out = str(tmp_path / "speakers.npz")
    args = ["export", toy["bin"], "--path", trained("lstm_fact_bias"), "--out", out]
    call_main("fairseq-speaker-vectors", [*args, "--speakers", "spk000"])  # not killed: in this process
    before = digest(out)

    assert_killed(run("fairseq-speaker-vectors", [*args, "--speakers", "spk001"], check=False,
                      env=kill_while_writing("speakers.npz")))
    assert digest(out) == before
    assert load_speaker_vectors(out).names == ["spk000"]
    assert len(leftovers(out)) == 1

    call_main("fairseq-speaker-vectors", [*args, "--speakers", "spk001"])
    assert load_speaker_vectors(out).names == ["spk001"] and leftovers(out) == []


# -- what the next writer removes, and what it keeps ----------------------------------------------------------


def _leftover(folder, host: str, pid: int, name: str = "model", ext: str = ".pt") -> str:
    path = os.path.join(folder, f".{name}.{TMP_MARK}-{host}-{pid}-1{ext}")
    open(path, "wb").write(b"half a file")
    return path


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], stdout=subprocess.PIPE, text=True)
    return int(proc.stdout)


def test_the_next_write_removes_only_leftovers_of_finished_processes_of_this_machine(tmp_path):
    from fairseq_speaker.atomic_write import _host

    path = str(tmp_path / "model.pt")
    dead = _leftover(tmp_path, _host(), _dead_pid())
    running = _leftover(tmp_path, _host(), os.getppid())  # a process that runs: it may be writing
    elsewhere = _leftover(tmp_path, "another_machine", _dead_pid())  # a shared folder: cannot tell
    other_file = _leftover(tmp_path, _host(), _dead_pid(), name="other")  # another target's
    write_text(path, "whole\n")
    assert open(path).read() == "whole\n"
    assert not os.path.exists(dead)
    assert all(os.path.exists(p) for p in (running, elsewhere, other_file))
    assert sorted(leftovers(path)) == sorted([running, elsewhere])


def test_a_failed_write_leaves_nothing_and_the_old_file(tmp_path):
    path = str(tmp_path / "model.pt")
    write_text(path, "old\n")
    try:
        with atomic_path(path) as tmp:
            open(tmp, "w").write("half")
            raise OSError("disk full")
    except OSError:
        pass
    assert open(path).read() == "old\n" and leftovers(path) == []


def test_temporary_files_are_hidden_and_name_their_writer(tmp_path):
    path = str(tmp_path / "speakers.npz")
    with atomic_path(path) as tmp:
        name = os.path.basename(tmp)
        assert os.path.dirname(tmp) == str(tmp_path)
        assert name.startswith(".speakers." + TMP_MARK) and name.endswith(".npz")
        assert f"-{os.getpid()}-" in name and socket.gethostname()[:3].replace("-", "_") in name
        open(tmp, "w").write("x")
