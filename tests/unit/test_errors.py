"""User errors end in their message; other exceptions keep their traceback."""

import subprocess
import sys

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
    excepthook(UserError, UserError("bad --speaker-rank"), None, fallback=lambda *a: calls.append(a))
    assert capsys.readouterr().err == "error: bad --speaker-rank\n" and not calls
    excepthook(KeyError, KeyError("bug"), None, fallback=lambda *a: calls.append(a))
    assert len(calls) == 1


def test_importing_the_package_installs_it_for_any_program():
    code = ("import fairseq_speaker\n"
            "from fairseq_speaker.modules.speaker_bias import parse_variant_name\n"
            "parse_variant_name('nope')\n")
    proc = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith("error: unknown --speaker-bias 'nope'")
    assert "Traceback" not in proc.stderr
    bug = subprocess.run([sys.executable, "-c", "import fairseq_speaker\nraise KeyError('bug')"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert bug.returncode == 1 and "Traceback" in bug.stderr and "KeyError: 'bug'" in bug.stderr
