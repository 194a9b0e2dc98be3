"""fairseq_speaker/runtime.py: the threads a command chooses, and what it prints by default and with --verbose."""

import logging
import os
import sys
import types
import warnings

import pytest
import torch

from fairseq_speaker import runtime
from fairseq_speaker.runtime import ThreadChoice, choose_threads


def test_threads_asked_for_are_taken_whatever_the_environment():
    choice = choose_threads(3, environ={"OMP_NUM_THREADS": "1"}, cores=8, torch_default=8)
    assert choice == ThreadChoice(3, "--threads 3")
    assert choice.line() == "threads: 3 (--threads 3)"


def test_omp_num_threads_is_followed_when_no_threads_are_asked_for():
    assert choose_threads(environ={"OMP_NUM_THREADS": "2"}, cores=8, torch_default=8) == \
        ThreadChoice(2, "OMP_NUM_THREADS=2")


@pytest.mark.parametrize("cores,torch_default,processes,threads", [
    (2, 2, 1, 2),
    (2, 2, 2, 1),   # two processes on two cores: one thread each, not two
    (8, 4, 1, 4),   # torch's default (the physical cores) caps the logical ones
    (4, 16, 1, 4),  # the cores this process may use (affinity, a container's quota) cap torch's default
    (2, 2, 3, 1),   # more processes than cores: still one thread each
    (16, 16, 3, 5),
])
def test_the_default_divides_the_usable_cores_among_the_processes(cores, torch_default, processes, threads):
    choice = choose_threads(processes=processes, environ={}, cores=cores, torch_default=torch_default)
    assert choice.threads == threads
    assert choice.reason.endswith("--threads N to change")
    assert (f"shared by {processes} processes" in choice.reason) == (processes > 1)


@pytest.mark.parametrize("value", ["", "0", "two", "-1"])
def test_an_unusable_omp_num_threads_is_ignored(value):
    assert choose_threads(environ={"OMP_NUM_THREADS": value}, cores=2, torch_default=2).threads == 2


def test_asking_for_no_threads_is_refused():
    with pytest.raises(ValueError, match="--threads must be at least 1, got 0"):
        choose_threads(0)


def test_the_usable_cores_are_at_most_the_machines():
    assert 1 <= runtime.usable_cores() <= (os.cpu_count() or 1)


def test_a_command_chooses_once_and_a_command_inside_it_keeps_the_choice(monkeypatch, capsys):
    monkeypatch.setattr(runtime, "_chosen", None)
    before = torch.get_num_threads()
    try:
        first = runtime.start_threads(1)
        assert capsys.readouterr().err == "threads: 1 (--threads 1)\n"
        assert torch.get_num_threads() == 1 and runtime.chosen_threads() == first
        assert runtime.start_threads(None) is first  # the demo's report, run inside the demo
        assert capsys.readouterr().err == ""
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("argv0,main_spec,expected", [
    ("/venv/bin/fairseq-generate", None, "generate"),
    ("/venv/bin/fairseq-interactive", None, "interactive"),
    ("/venv/bin/fairseq-hydra-train", None, "hydra_train"),
    ("/venv/lib/fairseq_cli/train.py", "fairseq_cli.train", "train"),
    ("/venv/bin/fairseq-preprocess", None, None),  # sets up no task
    ("/venv/bin/fairseq-speaker-adapt", None, None),  # ours choose for themselves
    ("/venv/bin/pytest", None, None),
])
def test_fairseq_command_lines_are_recognized(monkeypatch, argv0, main_spec, expected):
    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name=main_spec) if main_spec else None
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(sys, "argv", [argv0])
    assert runtime.fairseq_command() == expected


def test_outside_a_command_line_the_task_leaves_the_threads_alone(monkeypatch, capsys):
    """A library does not change the threads of the program that imports it (a test, a notebook, a service)."""
    monkeypatch.setattr(runtime, "_chosen", None)
    before = torch.get_num_threads()
    assert runtime.threads_for_fairseq_command() is None
    assert torch.get_num_threads() == before and capsys.readouterr().err == ""


def test_in_fairseq_generate_the_task_chooses_and_says_so(monkeypatch, capsys):
    monkeypatch.setattr(runtime, "_chosen", None)
    monkeypatch.setattr(sys, "argv", ["/venv/bin/fairseq-generate"])
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    before = torch.get_num_threads()
    try:
        assert runtime.threads_for_fairseq_command() == ThreadChoice(1, "OMP_NUM_THREADS=1")
        assert capsys.readouterr().err == "threads: 1 (OMP_NUM_THREADS=1)\n"
        assert runtime.threads_for_fairseq_command() is None  # once per process
    finally:
        torch.set_num_threads(before)


@pytest.fixture
def command_process():
    """Logging and warnings as in a command's process (pytest records warnings instead of printing them),
    put back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    # a command run earlier in this process may have set a level of its own (the service quiets "fairseq")
    loggers = {name: logging.getLogger(name) for name in ("fairseq", "fairseq_cli", "fairseq_speaker")}
    levels = {name: logger.level for name, logger in loggers.items()}
    for logger in loggers.values():
        logger.setLevel(logging.NOTSET)
    with warnings.catch_warnings():
        warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: sys.stderr.write(
            warnings.formatwarning(message, category, filename, lineno, line))
        yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, logger in loggers.items():
        logger.setLevel(levels[name])


def emit_everything():
    logging.getLogger("fairseq.tasks.translation").info("[en] dictionary: 64 types")
    logging.getLogger("fairseq_cli.generate").info("{'_name': None, 'model': {'_name': 'wav2vec2'}}")
    logging.getLogger("fairseq_speaker.onboarding.vectors").warning("speaker(s) 'x' have values over 100 times")
    warnings.warn("'pin_memory' argument is set as true but no accelerator is found", UserWarning)
    warnings.warn("hydra.experimental.initialize() is no longer experimental", DeprecationWarning)


def test_by_default_only_warnings_are_printed(command_process, capsys):
    runtime.configure_output(verbose=False)
    emit_everything()
    assert capsys.readouterr().err.splitlines() == ["warning: speaker(s) 'x' have values over 100 times"]


def test_verbose_prints_the_libraries_logs_and_warnings(command_process, capsys):
    runtime.configure_output(verbose=True)
    emit_everything()
    err = capsys.readouterr().err
    assert "| INFO | fairseq.tasks.translation | [en] dictionary: 64 types" in err
    assert "'wav2vec2'" in err
    assert "| WARNING | fairseq_speaker.onboarding.vectors | speaker(s) 'x'" in err
    assert "UserWarning: 'pin_memory'" in err and "DeprecationWarning: hydra.experimental" in err

