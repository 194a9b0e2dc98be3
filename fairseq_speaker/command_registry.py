"""The package's commands, each named once: the program a user runs and the module whose ``main`` it runs.

pyproject.toml's ``[project.scripts]`` installs exactly these (``tests/unit/test_command_registry.py`` holds the
two together); the probe table of bad input and the docs tests read the names from here. A command's ``main``
is decorated with :func:`fairseq_speaker.errors.command`, which finds the command here by its module.

This module imports nothing of the package (the package's ``__init__`` asks it whether the process is one of these
commands before it imports anything else) and nothing of a command: :func:`main_of` imports one when asked.
"""

import importlib
import os
import sys
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence


@dataclass(frozen=True)
class Command:
    """One command line of the package."""

    name: str  #: the program, as installed (``fairseq-speaker-adapt``)
    module: str  #: the module whose ``main(argv=None)`` it runs

    @property
    def entry_point(self) -> str:
        """What ``[project.scripts]`` of pyproject.toml gives for it: ``module:main``."""
        return f"{self.module}:main"


def _commands(*commands: Command) -> Dict[str, Command]:
    return {command.name: command for command in commands}


#: name -> command, in the order of pyproject's ``[project.scripts]``
COMMANDS: Dict[str, Command] = _commands(
    Command("fairseq-speaker-demo", "fairseq_speaker.toy.demo"),
    Command("fairseq-speaker-toy-corpus", "fairseq_speaker.toy.corpus"),
    Command("fairseq-speaker-params", "fairseq_speaker.analysis.parameter_accounting"),
    Command("fairseq-speaker-report", "fairseq_speaker.analysis.report"),
    Command("fairseq-speaker-topics", "fairseq_speaker.topic_model"),
    Command("fairseq-speaker-adapt", "fairseq_speaker.onboarding.adapt"),
    Command("fairseq-speaker-vectors", "fairseq_speaker.onboarding.vectors"),
    Command("fairseq-speaker-speakers", "fairseq_speaker.onboarding.speakers"),
    Command("fairseq-speaker-refit", "fairseq_speaker.onboarding.refit"),
    Command("fairseq-speaker-words", "fairseq_speaker.onboarding.words"),
    Command("fairseq-speaker-onboarding-eval", "fairseq_speaker.onboarding.evaluate"),
    Command("fairseq-speaker-benchmark", "fairseq_speaker.benchmarks.training"),
    Command("fairseq-speaker-serve", "fairseq_speaker.service.app"),
    Command("fairseq-speaker-store", "fairseq_speaker.service.store_cli"),
    Command("fairseq-speaker-doctor", "fairseq_speaker.doctor"),
)


def command_of_module(module: str) -> Command:
    """The command whose ``main`` lives in ``module`` (a module's ``__name__``: ``__main__`` stands for the module
    run with ``python -m``).

    Raises:
        LookupError: no command runs that module (a new command not yet added to :data:`COMMANDS`).
    """
    if module == "__main__":
        module = getattr(getattr(sys.modules["__main__"], "__spec__", None), "name", None) or module
    for command in COMMANDS.values():
        if command.module == module:
            return command
    raise LookupError(f"{module} is not the module of a command: add Command(NAME, {module!r}) to COMMANDS in "
                      f"{__name__} and NAME = \"{module}:main\" to [project.scripts] of pyproject.toml")


def program_name(module: str) -> str:
    """The program name of the command of ``module`` (its parser's ``prog``, the start of its error messages)."""
    return command_of_module(module).name


def main_of(name: str) -> Callable:
    """The ``main`` of the command ``name``, its module imported."""
    return getattr(importlib.import_module(COMMANDS[name].module), "main")


def running_command(argv: Optional[Sequence[str]] = None, orig_argv: Optional[Sequence[str]] = None,
                    main_module: Optional[str] = None) -> Optional[Command]:
    """The command this process runs, or None (a Python program, a test, fairseq's own command lines).

    Recognized by the program (``sys.argv[0]``: the installed ``fairseq-speaker-adapt``), or by the module run with
    ``python -m`` (while Python imports the module's packages, ``sys.argv[0]`` is ``-m`` and the module is named
    in ``sys.orig_argv`` only; ``__main__`` names it afterwards). The arguments stand for ``sys.argv``,
    ``sys.orig_argv`` and the name of the ``__main__`` module."""
    argv = sys.argv if argv is None else argv
    orig_argv = getattr(sys, "orig_argv", ()) if orig_argv is None else orig_argv
    if main_module is None:
        spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        main_module = getattr(spec, "name", None) or ""
    modules = [main_module]
    if argv and argv[0] == "-m" and 0 < len(argv) <= len(orig_argv):  # python -m MODULE ARGS: argv is [-m, ARGS]
        modules.append(orig_argv[-len(argv)])
    program = os.path.basename(argv[0]) if argv and argv[0] else ""
    for command in COMMANDS.values():
        if program == command.name or command.module in modules:
            return command
    return None
