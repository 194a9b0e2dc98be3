"""Quiet by default: the package's commands print their results, their progress, the threads they chose and
the warnings a user can act on; what the libraries log for their own developers (fairseq's INFO lines and
configuration dumps, hydra's and torch's Python warnings) only with --verbose."""

import os
import re

import pytest

from fairseq_speaker.toy.corpus import write_corpus
from tests.cli import run

#: what the libraries print for their developers: logging's default format or fairseq's, a configuration
#: dump, a Python warning (its line, then the source line it points at)
LIBRARY_LINE = re.compile(r"^(DEBUG|INFO|WARNING):|\| (DEBUG|INFO|WARNING) \||\{'_name'|\w+Warning: |^\s+\S+\(.*\)$")
#: what our commands print on standard error when nothing is wrong: the threads, progress lines ([report] ...)
OWN_LINE = re.compile(r"^threads: \d+ \(.+\)$|^\[\w+\] ")


def warning_lines(stderr: str):
    return [line for line in stderr.splitlines() if "warn" in line.lower()]


def unexpected_lines(stderr: str):
    return [line for line in stderr.splitlines() if not OWN_LINE.match(line)]


@pytest.fixture(scope="module")
def heldout(tmp_path_factory):
    """Toy sentences of 3 speakers the toy model never saw, 8 each."""
    folder = str(tmp_path_factory.mktemp("heldout"))
    write_corpus(folder, {}, num_speakers=8, seed=2, heldout_speakers=3, heldout_sentences=8)
    return os.path.join(folder, "heldout")


@pytest.mark.slow  # the default run's time; its neighbours cover the same path
def test_onboarding_eval_prints_no_warning_a_user_cannot_act_on(toy, trained, heldout, tmp_path):
    """A tiny model, three new speakers: standard error is the threads line; --verbose shows what was held back
    (fairseq's INFO lines), and the results are the same."""
    args = [toy["bin"], "--path", trained("lstm_full_bias"), "--heldout-prefix", heldout, "--shots", "0", "1", "5",
            "--max-len-b", "6"]
    quiet = run("fairseq-speaker-onboarding-eval", [*args, "--out", str(tmp_path / "quiet")])
    assert warning_lines(quiet.stderr) == [], quiet.stderr
    assert quiet.stderr.splitlines() == ["threads: 1 (OMP_NUM_THREADS=1)"], quiet.stderr
    verbose = run("fairseq-speaker-onboarding-eval", [*args, "--out", str(tmp_path / "verbose"), "--verbose"])
    held_back = [line for line in verbose.stderr.splitlines() if LIBRARY_LINE.search(line)]
    assert any("| INFO | fairseq." in line for line in held_back), verbose.stderr[-3000:]

    def scores(stdout):  # the table's rows without the seconds to adapt
        return [line.rsplit(" | ", 1)[0] for line in stdout.splitlines() if line.startswith("| ")]

    assert len(scores(quiet.stdout)) == 4 and scores(quiet.stdout) == scores(verbose.stdout)


@pytest.mark.parametrize("command", ["adapt", "refit", "topics", "report", "vectors"])
def test_each_command_prints_only_its_own_lines_by_default(command, toy, trained, heldout, tmp_path):
    checkpoint, raw = trained("lstm_full_bias"), toy["raw"]
    args = {
        "adapt": [toy["bin"], "--path", checkpoint, "--adapt-prefix", heldout, "--save", str(tmp_path / "a.pt"),
                  "--adapt-max-iter", "5"],
        "refit": [toy["bin"], "--path", checkpoint, "--save", str(tmp_path / "r.pt"), "--max-iter", "3",
                  "--shared-max-iter", "3"],
        "topics": [toy["bin"], "--out", str(tmp_path / "t.npz"), "--topics", "3", "--max-iter", "2"],
        "report": ["--out", str(tmp_path / "report"), "--references", f"{raw}/test.fr", "--tokenize", "none",
                   "--system", f"ref={raw}/test.fr", "--bootstrap", "10", "--train-text", f"{raw}/train.fr",
                   "--train-speakers", f"{raw}/train.spk", "--test-speakers", f"{raw}/test.spk",
                   "--classifier-epochs", "1", "--checkpoint", f"full={checkpoint}", "--data", toy["bin"]],
        "vectors": ["export", toy["bin"], "--path", checkpoint, "--out", str(tmp_path / "v.npz")],
    }[command]
    proc = run(f"fairseq-speaker-{command}", args)
    assert unexpected_lines(proc.stderr) == [], proc.stderr[-3000:]
    computes = command in ("adapt", "refit", "topics", "report")
    assert ("threads: 1 (OMP_NUM_THREADS=1)" in proc.stderr.splitlines()) == computes
    assert proc.stdout.strip()



def test_stock_fairseq_commands_hold_back_hydras_notices_and_an_unrelated_models_configuration(toy, trained):
    """fairseq-generate and fairseq-interactive with the package: no hydra deprecation notice, no pin_memory
    notice, no configuration dump of wav2vec2 (their --arch default); fairseq's own lines and the translations
    stay. LOGLEVEL=DEBUG, fairseq's switch, brings everything back."""
    from tests.cli import generate_args

    args = generate_args(toy["bin"], trained("lstm_full_bias"), "--speaker-file", f"{toy['raw']}/test.spk",
                         "--beam", "2", "--max-len-b", "6")
    quiet = run("generate", args)
    assert warning_lines(quiet.stderr) == [], quiet.stderr[-3000:]
    assert "wav2vec2" not in quiet.stderr and "DEBUG:" not in quiet.stderr
    assert "Translated" in quiet.stderr and "H-0\t" in quiet.stdout  # fairseq's summary and its results stay
    interactive = run("interactive", generate_args(toy["bin"], trained("lstm_full_bias"), "--speaker",
                                                           "spk000", "--max-len-b", "6"), stdin="i am tired .\n")
    assert warning_lines(interactive.stderr) == [] and "wav2vec2" not in interactive.stderr, interactive.stderr[-3000:]
    assert "H-0\t" in interactive.stdout
    debug = run("generate", args, env={"LOGLEVEL": "DEBUG"})
    assert "hydra.experimental.initialize() is no longer experimental" in debug.stderr
    assert "'wav2vec2'" in debug.stderr
    assert [line for line in debug.stdout.splitlines() if line.startswith("H-")] == \
        [line for line in quiet.stdout.splitlines() if line.startswith("H-")]
