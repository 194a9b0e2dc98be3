"""The commands: one registry (fairseq_speaker/command_registry.py) that pyproject.toml installs exactly, every
``main`` through the one helper (``fairseq_speaker.errors.command``), each command recognized when it runs."""

import os
import subprocess
import sys
import tomllib

import pytest

from fairseq_speaker.command_registry import COMMANDS, command_of_module, main_of, running_command
from fairseq_speaker.errors import COMMAND_MARK

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: commands whose module does not yet decorate its ``main`` (their folders are being reworked): they still install
#: the exception hook when they start, as the package is imported by their program (fairseq_speaker/__init__.py)
NOT_YET_DECORATED: set = set()


def scripts():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]["scripts"]


def test_pyproject_installs_exactly_the_registered_commands():
    assert scripts() == {name: command.entry_point for name, command in COMMANDS.items()}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_goes_through_the_helper(name):
    main = main_of(name)
    assert callable(main)
    if name in NOT_YET_DECORATED:
        assert not hasattr(main, COMMAND_MARK), f"{name} is decorated now: take it out of NOT_YET_DECORATED"
    else:
        assert getattr(main, COMMAND_MARK, None) == name


def test_a_command_is_found_by_its_module_and_a_stranger_is_refused():
    assert command_of_module("fairseq_speaker.onboarding.adapt").name == "fairseq-speaker-adapt"
    with pytest.raises(LookupError, match=r"add Command\(NAME, 'fairseq_speaker.nothing'\) to COMMANDS"):
        command_of_module("fairseq_speaker.nothing")


@pytest.mark.parametrize("argv,orig_argv,main_module,expected", [
    (["/venv/bin/fairseq-speaker-adapt", "data"], [], "", "fairseq-speaker-adapt"),
    # python -m: while the module's packages are imported, then once it runs as __main__
    (["-m", "--out", "x"], ["python", "-m", "fairseq_speaker.toy.corpus", "--out", "x"], "",
     "fairseq-speaker-toy-corpus"),
    (["/src/fairseq_speaker/toy/corpus.py"], ["python", "-m", "fairseq_speaker.toy.corpus"],
     "fairseq_speaker.toy.corpus", "fairseq-speaker-toy-corpus"),
    (["-m", "-m", "fairseq_speaker.doctor"], ["python", "-m", "pytest", "-m", "fairseq_speaker.doctor"], "", None),
    (["/venv/bin/fairseq-train", "data"], [], "", None),  # fairseq's: runtime.fairseq_command
    (["/venv/bin/pytest"], [], "", None),
    (["-c"], ["python", "-c", "import fairseq_speaker"], "", None),
    ([], [], "", None),
])
def test_the_command_a_process_runs_is_recognized(argv, orig_argv, main_module, expected):
    found = running_command(argv, orig_argv, main_module)
    assert (found.name if found else None) == expected


def test_a_command_run_as_a_module_is_the_registered_command():
    """``python -m MODULE``: the helper finds the command of a module run as ``__main__``."""
    proc = subprocess.run([sys.executable, "-m", "fairseq_speaker.onboarding.speakers", "--help"], capture_output=True,
                          text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage: fairseq-speaker-speakers ")
