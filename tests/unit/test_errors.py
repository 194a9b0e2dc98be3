"""User errors end in their message; other exceptions keep their traceback."""

import subprocess
import sys

import pytest

from fairseq_speaker.data import SpeakerDataError
from fairseq_speaker.errors import UserError, excepthook, user_error_in


def test_a_user_error_wrapped_by_fairseq_is_found():
    try:
        try:
            raise SpeakerDataError("train.spk:3: empty speaker label")
        except SpeakerDataError:
            raise Exception("Cannot load model parameters from checkpoint x.pt")  # as fairseq's trainer does
    except Exception as e:
        assert str(user_error_in(e)) == "train.spk:3: empty speaker label"
    assert user_error_in(ValueError("a bug")) is None


def test_the_hook_prints_the_message_or_defers(capsys):
    calls = []
    assert excepthook(UserError, UserError("bad --speaker-rank"), None, fallback=lambda *a: calls.append(a))
    assert capsys.readouterr().err == "error: bad --speaker-rank\n" and not calls
    assert not excepthook(KeyError, KeyError("bug"), None, fallback=lambda *a: calls.append(a))
    assert len(calls) == 1


def test_a_command_ends_a_user_error_with_status_2(capsys):
    from fairseq_speaker.errors import command

    @command("fairseq-speaker-x")
    def main(argv):
        raise UserError(f"--size {argv[0]}: give a number")

    with pytest.raises(SystemExit) as ended:
        main(["big"])
    assert ended.value.code == 2
    assert capsys.readouterr().err == "fairseq-speaker-x: error: --size big: give a number\n"


def test_the_exit_handlers_run_before_a_user_error_ends_a_process():
    code = ("import atexit, fairseq_speaker\n"
            "from fairseq_speaker.errors import UserError\n"
            "atexit.register(lambda: print('exit handlers ran', flush=True))\n"
            "raise UserError('bad --x')\n")
    proc = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "exit handlers ran\n", "error: bad --x\n")


def test_fairseqs_own_option_assertion_is_a_user_error():
    error = user_error_in(AssertionError("Must specify batch size either with --max-tokens or --batch-size"))
    assert str(error).endswith(": give --max-tokens N or --batch-size N")
    assert user_error_in(AssertionError("some internal invariant")) is None


def test_importing_the_package_installs_it_for_any_program():
    code = ("import fairseq_speaker\n"
            "from fairseq_speaker.modules.speaker_bias import parse_variant_name\n"
            "parse_variant_name('nope')\n")
    proc = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 2  # a user error; 1 is left for the unexpected (the bug below)
    assert proc.stderr.strip().splitlines()[-1].startswith("error: unknown --speaker-bias 'nope'")
    assert "Traceback" not in proc.stderr
    bug = subprocess.run([sys.executable, "-c", "import fairseq_speaker\nraise KeyError('bug')"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert bug.returncode == 1 and "Traceback" in bug.stderr and "KeyError: 'bug'" in bug.stderr
