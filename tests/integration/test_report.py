"""fairseq-speaker-report over real fairseq-generate outputs and checkpoints."""

import json
import os
import resource
import shutil
import subprocess
import sys

import pytest

from fairseq_speaker.analysis.report import main as report_main
from tests.cli import generate_args, run

REPORT = os.path.join(os.path.dirname(sys.executable), "fairseq-speaker-report")


@pytest.mark.slow  # the whole report with its classifier (20 s); each section's file is checked in the default run
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


def files(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.mark.parametrize("classifier", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["scores", "classifier"])
def test_an_interrupted_report_leaves_each_file_whole(toy, tmp_path, classifier):
    """Writing fails (here: a file size limit) in the middle of each output in turn: every file under its
    name stays the earlier, complete one; no temporary file is left."""
    raw = toy["raw"]
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("".join(reversed(open(f"{raw}/test.fr").readlines())))
    options = ["--references", f"{raw}/test.fr", "--tokenize", "none", "--bootstrap", "20", "--system", f"x={hyp}"]
    if classifier:
        options += ["--train-text", f"{raw}/train.fr", "--train-speakers", f"{raw}/train.spk",
                    "--test-speakers", f"{raw}/test.spk", "--classifier-epochs", "1"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")

    def report(out, limit=None):
        def set_limit():
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        return subprocess.run([REPORT, "--out", str(out), *options], env=env, preexec_fn=set_limit if limit else None,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    complete = tmp_path / "complete"
    proc = report(complete)
    assert proc.returncode == 0, proc.stderr[-3000:]
    written = files(complete)
    assert {"report.md", "scores.json"} <= set(written) and ("classifier.pt" in written) == classifier
    sizes = sorted({len(content) for content in written.values()})
    for size in sizes if not classifier else sizes[:1]:  # the classifier's run fails in its first file
        out = tmp_path / f"limit{size}"
        shutil.copytree(complete, out)
        proc = report(out, limit=size - 1)
        assert proc.returncode != 0, f"a limit of {size - 1} bytes did not stop the report"
        assert files(out) == written


def test_the_classifier_inputs_are_checked_before_anything_is_written(toy, tmp_path, capsys):
    raw, out = toy["raw"], tmp_path / "out"
    test_speakers = tmp_path / "test.spk"
    test_speakers.write_text("".join(open(f"{raw}/test.spk").readlines()[:-1]))
    with pytest.raises(SystemExit) as refused:
        report_main(["--out", str(out), "--references", f"{raw}/test.fr", "--system", f"x={raw}/test.fr",
                     "--train-text", f"{raw}/train.fr", "--train-speakers", f"{raw}/train.spk",
                     "--test-speakers", str(test_speakers)])
    assert refused.value.code == 2  # a user error: one message (fairseq_speaker/errors.py)
    assert f"{test_speakers}: 36 speaker labels but the text has 37 sentences" in capsys.readouterr().err
    assert not out.exists()


def test_the_console_shows_the_scores_with_what_the_dagger_means(toy, tmp_path):
    """The scores table is printed with its legend right under it, and report.md has the same legend: a †
    is never left unexplained. With one system nothing is marked and no legend is printed."""
    raw = toy["raw"]
    shuffled = tmp_path / "reversed.txt"
    shuffled.write_text("".join(reversed(open(f"{raw}/test.fr").readlines())))
    options = ["--references", f"{raw}/test.fr", "--tokenize", "none", "--bootstrap", "50"]
    proc = run("fairseq-speaker-report", ["--out", str(tmp_path / "two"), *options, "--system", f"reversed={shuffled}",
                                          "--system", f"exact={raw}/test.fr"])
    lines = proc.stdout.splitlines()
    exact = [i for i, line in enumerate(lines) if line.startswith("| exact | 100.00 † |")]
    assert len(exact) == 1, proc.stdout
    legend = "† marks a BLEU that differs from reversed's with p < 0.05 (paired bootstrap resampling, 50 samples)"
    assert lines[exact[0] + 1].startswith(legend), proc.stdout
    assert legend in (tmp_path / "two" / "report.md").read_text()
    assert f"(report in {tmp_path / 'two' / 'report.md'}" in proc.stdout

    proc = run("fairseq-speaker-report", ["--out", str(tmp_path / "one"), *options, "--system", f"exact={raw}/test.fr"])
    assert "| exact | 100.00 | 100.00 | baseline |" in proc.stdout and "†" not in proc.stdout


def test_an_output_in_nfd_is_scored_as_the_text_it_is_and_said(toy, tmp_path):
    """BLEU compares code points: an output equal to its references but for its accents decomposed (NFD) scored about
    half without a word. It is scored as NFC, with a warning naming the file and its first such sentence."""
    import unicodedata

    references = f"{toy['raw']}/test.fr"
    with open(references, encoding="utf-8") as f:
        text = f.read()
    first = next(i for i, line in enumerate(text.split("\n")) if unicodedata.normalize("NFD", line) != line)
    decomposed = tmp_path / "nfd.txt"
    decomposed.write_text(unicodedata.normalize("NFD", text), encoding="utf-8")
    proc = run("fairseq-speaker-report", ["--out", str(tmp_path / "r"), "--references", references, "--tokenize",
                                          "none", "--bootstrap", "10", "--system", f"nfd={decomposed}", "--threads",
                                          "1"])
    assert "| nfd | 100.00 | 100.00 | baseline |" in proc.stdout, proc.stdout
    assert f"--system nfd={decomposed}: " in proc.stderr and f"(the first: sentence {first + 1}) not in Unicode's " \
        "normal form NFC" in proc.stderr, proc.stderr


def test_a_generate_output_without_its_references_is_scored_with_a_warning(toy, tmp_path):
    """``grep ^H- gen.out``: an output of another split could not be checked against --references (scored BLEU 6.6
    without a word); it is scored, with a warning that says so. With its T- lines kept, no warning."""
    references = tmp_path / "refs.txt"
    references.write_text("a b c d e .\nf g h i j .\n", encoding="utf-8")
    whole = "S-{i}\tx .\nT-{i}\t{t}\nH-{i}\t-0.5\t{t}\n"
    full = tmp_path / "full.txt"
    full.write_text("".join(whole.format(i=i, t=t) for i, t in ((1, "f g h i j ."), (0, "a b c d e ."))),
                    encoding="utf-8")
    stripped = tmp_path / "h.txt"
    stripped.write_text("".join(line + "\n" for line in full.read_text().splitlines() if line.startswith("H-")),
                        encoding="utf-8")
    options = ["--references", str(references), "--tokenize", "none", "--bootstrap", "10", "--threads", "1"]
    proc = run("fairseq-speaker-report", ["--out", str(tmp_path / "r"), *options, "--system", f"h={stripped}"])
    assert "| h | 100.00 | 100.00 | baseline |" in proc.stdout, proc.stdout
    assert f"{stripped}: a fairseq-generate output with no T- lines" in proc.stderr, proc.stderr
    proc = run("fairseq-speaker-report", ["--out", str(tmp_path / "f"), *options, "--system", f"f={full}"])
    assert "| f | 100.00 | 100.00 | baseline |" in proc.stdout and "no T- lines" not in proc.stderr, proc.stderr


def test_a_system_output_from_a_pipe_is_read_once(toy, tmp_path, capsys):
    """``--system a=<(command)``: the file was read twice (its encoding checked first), and the pipe was empty the
    second time ("0 hypotheses for the 800 references")."""
    import threading

    references = f"{toy['raw']}/test.fr"
    with open(references, "rb") as f:
        text = f.read()
    read, write = os.pipe()
    writer = threading.Thread(target=lambda: (os.write(write, text), os.close(write)))
    writer.start()
    try:
        report_main(["--out", str(tmp_path / "r"), "--references", references, "--tokenize", "none", "--bootstrap",
                     "10", "--system", f"piped=/dev/fd/{read}", "--threads", "1"])
    finally:
        writer.join()
        os.close(read)
    assert "| piped | 100.00 | 100.00 | baseline |" in capsys.readouterr().out
