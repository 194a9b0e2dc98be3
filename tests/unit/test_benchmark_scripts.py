"""scripts/serve_load.py and scripts/translator_throughput.py: a bad option or file ends in one message (the
script's usage and an error line, exit status 2), before any model is loaded where it can be."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("script,args,message", [
    ("serve_load.py", ["model.pt", "--data", "data", "--input", "in.txt", "--clients", "0,-1"],
     "--clients: comma-separated numbers of concurrent clients, each at least 1, got '0,-1'"),
    ("serve_load.py", ["model.pt", "--data", "data", "--input", "in.txt", "--clients", "1,x"],
     "--clients: comma-separated numbers of concurrent clients, each at least 1, got '1,x'"),
    ("serve_load.py", ["model.pt", "--data", "data", "--input", "no/such.txt"],
     "--input no/such.txt: cannot read it"),
    ("serve_load.py", ["model.pt", "--data", "data", "--input", "in.txt", "--rounds", "0"],
     "--rounds must be at least 1, got 0"),
    ("translator_throughput.py", ["--checkpoint", "no/such.pt", "--data", "data", "--sources", "in.txt"],
     "checkpoint not found: no/such.pt"),
])
def test_a_benchmark_script_refuses_bad_input_in_one_line(tmp_path, script, args, message):
    (tmp_path / "in.txt").write_text("i am tired .\n", encoding="utf-8")
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", script), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{script}: error: ") and message in last, last
