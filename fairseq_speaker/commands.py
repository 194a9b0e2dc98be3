"""The stock fairseq command lines for speaker models: built in one place, run from recipes and demos."""

import os
import subprocess
import sys
from typing import Dict, List, Optional, Sequence

from fairseq_speaker import USER_DIR

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
    """The network of a system or preset: ``transformer`` or ``lstm``."""
    return "transformer" if system.startswith("transformer") else "lstm"


def model_size_args(family_name: str, dim: int, hidden: int, layers: int = 1, heads: int = 2) -> List[str]:
    """Sizes of a small model: ``dim`` for embeddings (and the LSTM encoder and attention), ``hidden``
    for the LSTM decoder or the Transformer's feed-forward layers; Transformers get ``layers`` layers
    and ``heads`` attention heads on each side."""
    if family_name == "lstm":
        return ["--encoder-embed-dim", str(dim), "--decoder-embed-dim", str(dim), "--encoder-hidden-size", str(dim),
                "--decoder-hidden-size", str(hidden), "--attention-dim", str(dim)]
    return ["--encoder-embed-dim", str(dim), "--decoder-embed-dim", str(dim), "--encoder-ffn-embed-dim", str(hidden),
            "--decoder-ffn-embed-dim", str(hidden), "--encoder-layers", str(layers), "--decoder-layers", str(layers),
            "--encoder-attention-heads", str(heads), "--decoder-attention-heads", str(heads)]


def run_fairseq(command: str, args: Sequence[str], log: str, threads: Optional[int] = None,
                env: Optional[Dict[str, str]] = None) -> str:
    """Run ``fairseq-<command> args``; return its standard output, keep both streams in ``log``.

    Raises:
        SystemExit: the command failed; the message ends with the last lines it printed.
    """
    env = dict(os.environ, **(env or {}))
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    cmd = [sys.executable, "-m", f"fairseq_cli.{command}", *args]
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    os.makedirs(os.path.dirname(os.path.abspath(log)), exist_ok=True)
    with open(log, "w", encoding="utf-8") as f:
        f.write("$ fairseq-" + command + " " + " ".join(args) + "\n" + proc.stderr + proc.stdout)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise SystemExit(f"fairseq-{command} failed (exit {proc.returncode}); full log in {log}:\n{tail}")
    return proc.stdout
