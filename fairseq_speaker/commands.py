"""The stock fairseq command lines for speaker models: built in one place, run from recipes and demos."""

import os
import re
import subprocess
import sys
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from fairseq_speaker import USER_DIR
from fairseq_speaker.errors import UserError
from fairseq_speaker.models.families import ModelSizes, family_of_arch, get_family, speaker_presets

#: what every speaker model's fairseq-train run says: the plugin, the task, the criterion
TASK = ["--user-dir", USER_DIR, "--task", "speaker_translation"]
CRITERION = ["--criterion", "speaker_label_smoothed_cross_entropy", "--label-smoothing", "0.1"]


def train_args(data: str, save_dir: str, system: Sequence[str], *extra: str) -> List[str]:
    """``fairseq-train`` arguments: ``system`` chooses the model (``--arch lstm_fact_bias``, perhaps
    ``--speaker-bias``/``--speaker-token``), ``extra`` the sizes, optimizer and schedule."""
    return [data, *TASK, *system, *CRITERION, "--save-dir", save_dir, *extra]


def generate_args(data: str, checkpoint: str, *extra: str) -> List[str]:
    """``fairseq-generate`` / ``fairseq-interactive`` arguments for a speaker checkpoint."""
    return [data, *TASK, "--path", checkpoint, *extra]


def system_args(spec: str) -> List[str]:
    """Arguments choosing a system written ``ARCH`` or ``ARCH:VARIANT`` (``transformer_base:fact+topic``),
    ``+spk_token`` at the end adding ``--speaker-token`` (``lstm_base+spk_token``)."""
    args = []
    if spec.endswith("+spk_token"):
        spec, args = spec[: -len("+spk_token")], ["--speaker-token"]
    arch, _, variant = spec.partition(":")
    return ["--arch", arch] + (["--speaker-bias", variant] if variant else []) + args


def family(system: str) -> str:
    """The family of a system or preset (``lstm``, ``transformer``, ...): the family registered for the model
    its arch builds (:func:`fairseq_speaker.models.families.family_of_arch`)."""
    arch = system_args(system)[1]
    found = family_of_arch(arch)
    if found is None:
        raise UserError(f"system {system!r}: {arch!r} is not an arch of a speaker model family; start it with a "
                        f"preset ({', '.join(speaker_presets())})")
    return found.name


def model_size_args(family_name: str, dim: int, hidden: int, layers: int = 1, heads: int = 2) -> List[str]:
    """Sizes of a small model of a family, as its flags (the family's ``size_args``): ``dim`` for embeddings
    (and the LSTM encoder and attention), ``hidden`` for the LSTM decoder or the Transformer's feed-forward
    layers; Transformers get ``layers`` layers and ``heads`` attention heads on each side."""
    return get_family(family_name).size_args(ModelSizes(dim, hidden, layers=layers, heads=heads))


def run_fairseq(command: str, args: Sequence[str], log: str, threads: Optional[int] = None,
                env: Optional[Dict[str, str]] = None, progress: Optional[Callable[[str], None]] = print) -> str:
    """Run ``fairseq-<command> args``; return its standard output, keep both streams in ``log``.

    The log is written as the command runs. For ``train``, ``progress`` (``print`` by default; None for
    silence) gets a line at the end of every epoch: the epoch out of ``--max-epoch``, the training and
    validation losses, the time so far and an estimate of the time left.

    Raises:
        SystemExit: the command failed; the message ends with the last lines it printed.
    """
    env = dict(os.environ, **(env or {}))
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    cmd = [sys.executable, "-m", f"fairseq_cli.{command}", *args]
    os.makedirs(os.path.dirname(os.path.abspath(log)), exist_ok=True)
    tracker = EpochProgress(_max_epoch(args)) if command == "train" and progress is not None else None
    stdout: List[str] = []
    stderr: List[str] = []
    with open(log, "w", encoding="utf-8") as f:
        f.write("$ fairseq-" + command + " " + " ".join(args) + "\n")
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        errors = threading.Thread(target=_collect, args=(proc.stderr, stderr, f))
        errors.start()
        assert proc.stdout is not None  # a pipe
        for line in proc.stdout:  # fairseq logs to standard output
            stdout.append(line)
            f.write(line)
            f.flush()
            message = tracker.update(line) if tracker is not None else None
            if message and progress is not None:
                progress(message)
        errors.join()
        proc.wait()
    if proc.returncode != 0:
        tail = "\n".join("".join(stderr).strip().splitlines()[-15:])
        raise SystemExit(f"fairseq-{command} failed (exit {proc.returncode}); full log in {log}:\n{tail}")
    return "".join(stdout)


def _collect(stream, lines: List[str], log) -> None:
    for line in stream:
        lines.append(line)
        try:
            log.write(line)
        except ValueError:  # the log closed under it: the command was interrupted (Ctrl-C); the lines are kept above
            pass


def _max_epoch(args: Sequence[str]) -> Optional[int]:
    args = list(args)
    for i, arg in enumerate(args[:-1]):
        if arg == "--max-epoch":
            return int(args[i + 1]) or None
    return None


_SUMMARY = re.compile(r"\| (train|valid) \| epoch (\d+) .*?\| loss ([0-9.]+)")


class EpochProgress:
    """Reads fairseq-train's log lines and says, at the end of each epoch, where training stands.

    fairseq logs an epoch's validation (``| valid | epoch 003 | ... | loss ...``) before the epoch's
    training summary (``| train | epoch 003 | loss ...``), which closes the epoch."""

    def __init__(self, max_epoch: Optional[int], clock: Callable[[], float] = time.monotonic):
        self.max_epoch, self.clock = max_epoch, clock
        self.start = clock()
        self.valid: Optional[Tuple[int, str]] = None  # (epoch, loss) of the last validation

    def update(self, line: str) -> Optional[str]:
        """A progress line when ``line`` is an epoch's training summary, else None."""
        match = _SUMMARY.search(line)
        if match is None:
            return None
        split, epoch, loss = match.group(1), int(match.group(2)), match.group(3)
        if split == "valid":
            self.valid = (epoch, loss)
            return None
        elapsed = self.clock() - self.start
        total = f"/{self.max_epoch}" if self.max_epoch else ""
        left = ""
        if self.max_epoch and epoch < self.max_epoch:
            left = f", about {_clock(elapsed / epoch * (self.max_epoch - epoch))} left"
        valid = f", valid loss {self.valid[1]}" if self.valid and self.valid[0] == epoch else ""
        return f"  epoch {epoch}{total}: train loss {loss}{valid} ({_clock(elapsed)} so far{left})"


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
