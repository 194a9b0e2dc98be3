"""fairseq-speaker-report over real fairseq-generate outputs and checkpoints."""

import json
import os
import subprocess
import sys

from tests.cli import generate_args, run


def test_report_has_every_section(toy, trained, tmp_path):
    outputs = {}
    for name, system in (("base", "lstm_base"), ("full", "lstm_full_bias"), ("fact", "lstm_fact_bias")):
        proc = run("generate", generate_args(toy["bin"], trained(system)))
        outputs[name] = tmp_path / f"{name}.generate"
        outputs[name].write_text(proc.stdout)
    out = tmp_path / "report"
    raw = toy["raw"]
    proc = subprocess.run([
        os.path.join(os.path.dirname(sys.executable), "fairseq-speaker-report"), "--out", str(out),
        "--references", f"{raw}/test.fr", "--tokenize", "none", "--bootstrap", "100",
        *[arg for name, path in outputs.items() for arg in ("--system", f"{name}={path}")],
        "--train-text", f"{raw}/train.fr", "--train-speakers", f"{raw}/train.spk", "--test-speakers", f"{raw}/test.spk",
        "--classifier-epochs", "2",
        "--checkpoint", f"full={trained('lstm_full_bias')}", "--checkpoint", f"fact={trained('lstm_fact_bias')}",
        "--checkpoint", f"simplex={trained('transformer_base:simplex')}",
        "--data", toy["bin"], "--inspect-speakers", "2",
    ], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = (out / "report.md").read_text()
    for section in ("## Translation quality", "## Speaker classifier",
                    "## What the speaker bias learned: full (`--speaker-bias full`)",
                    "## What the speaker bias learned: fact (`--speaker-bias fact`)", "### Shared bias vectors",
                    "## What the speaker bias learned: simplex (`--speaker-bias simplex`)", "### Prototypes",
                    "### Speaker spk00"):
        assert section in report, section
    assert "nearest speakers (cosine of their mixture weights (softmax))" in report
    assert "| base |" in report and "| fact |" in report and "baseline" in report
    for png in ("classifier.png", "speakers_full.png", "speakers_fact.png", "speakers_simplex.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({png})" in report
    results = json.load(open(out / "scores.json"))
    assert [s["name"] for s in results["scores"]] == ["base", "full", "fact"]
    assert set(results["classifier"]) == {"references", "base", "full", "fact"}
    assert (out / "classifier.pt").exists()
    assert "[report] training the speaker classifier" in proc.stderr


def test_report_refuses_half_given_classifier_inputs(toy, tmp_path):
    hyp = tmp_path / "hyp.txt"
    hyp.write_text(open(f"{toy['raw']}/test.fr").read())
    proc = subprocess.run([
        os.path.join(os.path.dirname(sys.executable), "fairseq-speaker-report"), "--out", str(tmp_path / "r"),
        "--references", f"{toy['raw']}/test.fr", "--system", f"ref={hyp}", "--train-text", f"{toy['raw']}/train.fr",
    ], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.returncode != 0
    assert "needs --train-text, --train-speakers and --test-speakers" in proc.stderr
    assert not (tmp_path / "r").exists()
