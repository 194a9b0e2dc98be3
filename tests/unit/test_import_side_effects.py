"""Importing the package changes nothing process-wide (the exception hook, the warning filters, the logging
handlers, filters and levels) in a program that is not a command line; a command line installs its hooks when it
starts. (What the package changes in fairseq and torch at import is its patch ledger:
tests/unit/test_fairseq_patches.py.)"""

import json
import os
import subprocess
import sys

import pytest

#: what a process's state is, in code run by ``python -c``: ``state()`` returns it as comparable values
STATE = '''
import logging, sys, warnings

def state():
    loggers = {name: (logger.level, list(logger.handlers), list(logger.filters), logger.propagate, logger.disabled)
               for name, logger in logging.Logger.manager.loggerDict.items() if isinstance(logger, logging.Logger)}
    root = logging.getLogger()
    return {"excepthook": sys.excepthook, "warnings": list(warnings.filters),
            "root": (root.level, list(root.handlers), list(root.filters)), "loggers": loggers}

def changes(before, after):
    """What differs between two states: a logger new in ``after`` differs if it was given a level, a handler or a
    filter."""
    found = [key for key in ("excepthook", "warnings", "root") if before[key] != after[key]]
    untouched = (logging.NOTSET, [], [], True, False)
    for name, now in after["loggers"].items():
        if now != before["loggers"].get(name, untouched):
            found.append(f"logger {name}: {before['loggers'].get(name, untouched)} -> {now}")
    return found
'''

#: the modules (not the package's) that importing the package loads, in the order they were loaded
DEPENDENCIES = '''
import json, sys
import fairseq_speaker
print(json.dumps([name for name in sys.modules if name.split(".")[0] != "fairseq_speaker"]))
'''

#: import the dependencies first, then the package: what changes is the package's doing
IMPORT = STATE + '''
import importlib, json
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except Exception:  # an alias or a module that cannot be imported on its own: its parent loads it
        pass
before = state()
import fairseq_speaker
print(json.dumps(changes(before, state())))
'''


def _python(code: str, *args: str, argv0: str = "") -> subprocess.CompletedProcess:
    """``python -c code args``, with ``sys.argv[0]`` set to ``argv0`` first (a command line's program)."""
    if argv0:
        code = f"import sys; sys.argv[0] = {argv0!r}\n" + code
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=True)


@pytest.fixture(scope="module")
def dependencies() -> str:
    return _python(DEPENDENCIES).stdout.strip().splitlines()[-1]


def test_importing_the_package_changes_nothing_process_wide(dependencies):
    """A Python program (a notebook, a service embedding the package, a test run) keeps its exception hook, its
    warning filters and its logging configuration."""
    assert json.loads(dependencies), "the package imports fairseq and torch"
    assert json.loads(_python(IMPORT, dependencies).stdout.strip().splitlines()[-1]) == []


@pytest.mark.parametrize("program", [os.path.join("venv", "bin", "fairseq-generate"),
                                     os.path.join("venv", "bin", "fairseq-speaker-adapt")])
def test_a_command_line_that_loads_the_package_installs_its_hooks(dependencies, program):
    """The same import in fairseq-generate (the package as --user-dir) installs the exception hook and holds back
    hydra's notices; in one of our commands, the hook (the check can fail: it sees what a command line installs)."""
    found = json.loads(_python(IMPORT, dependencies, argv0=program).stdout.strip().splitlines()[-1])
    assert "excepthook" in found
    assert ("warnings" in found) == program.endswith("fairseq-generate")
