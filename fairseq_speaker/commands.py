"""Running the stock fairseq command lines from recipes and demos."""

import os
import subprocess
import sys
from typing import Dict, Optional, Sequence

#: the folder to pass as --user-dir
USER_DIR = os.path.dirname(os.path.abspath(__file__))


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
