"""User errors: a mistake in the input or the options, whose message says what to do.

Exit status, the same for every command line, ours (``fairseq-speaker-*``) and fairseq's own
(``fairseq-train``, ``fairseq-generate``, ... with ``--user-dir``):

- 0: done;
- 2 (:data:`USER_ERROR_STATUS`): a user error, refused by the parser or refused once the input was read
  (a file, a checkpoint, a combination of options); one message on standard error, no traceback;
- 1: anything else, an unexpected failure (a bug, the machine), with its Python traceback.

Every command's ``main`` goes through :func:`command`, which finds the command in the registry
(:mod:`fairseq_speaker.command_registry`), installs :func:`excepthook` when the command starts and ends a user
error with :func:`fail` (``PROG: error: MESSAGE``; a command that leaves them to the hook ends them as fairseq's
commands do). fairseq's commands end a user error through :func:`excepthook`, installed when they load the
package as their ``--user-dir`` (``fairseq_speaker/__init__.py``): it prints ``error: MESSAGE`` and ends the
process with status 2 (after Python's exit handlers), except in an interactive session. Importing the package in
any other program leaves its exception hook alone.
"""

import atexit
import functools
import os
import sys
from typing import Callable, NoReturn, Optional, Tuple, Type

from fairseq_speaker.command_registry import command_of_module

#: the exit status of every user error, whatever the command
USER_ERROR_STATUS = 2
#: the attribute :func:`command` sets on the ``main`` it wraps: the command's name
COMMAND_MARK = "fairseq_speaker_command"


class UserError(ValueError):
    """Bad input or options; the message names the file, the line or the option, and the fix."""


#: fairseq's own checks of its options that end in an ``AssertionError``: its message -> what to do
FAIRSEQ_OPTION_ASSERTIONS = {
    "Must specify batch size either with --max-tokens or --batch-size": "give --max-tokens N or --batch-size N",
    "--sampling requires --nbest to be equal to --beam": "give --nbest N with --beam N (each sample is a hypothesis "
                                                         "of the beam)",
    "--batch-size cannot be larger than --buffer-size": "give a --buffer-size of at least --batch-size",
}

#: fairseq's own refusals of a file named on the command line that end in an ``OSError``: the start of its message
#: -> ours, given the rest of its message (the path)
FAIRSEQ_FILE_ERRORS = {
    "Model file not found: ": "checkpoint not found: {}; give --path the checkpoint file that fairseq-train wrote "
                              "(checkpoint_best.pt or checkpoint_last.pt in its --save-dir; several joined with ':')",
}


def user_error_in(exc: Optional[BaseException]) -> Optional[UserError]:
    """The :class:`UserError` that caused ``exc`` (fairseq wraps some, e.g. "Cannot load model
    parameters"; one of fairseq's option checks, :data:`FAIRSEQ_OPTION_ASSERTIONS`, or of its file checks,
    :data:`FAIRSEQ_FILE_ERRORS`, becomes one), or None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, UserError):
            return exc
        if isinstance(exc, AssertionError) and str(exc) in FAIRSEQ_OPTION_ASSERTIONS:
            return UserError(f"{exc}: {FAIRSEQ_OPTION_ASSERTIONS[str(exc)]}")
        if isinstance(exc, OSError):
            for start, message in FAIRSEQ_FILE_ERRORS.items():
                if str(exc).startswith(start):
                    return UserError(message.format(str(exc)[len(start):]))
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def fail(message: str, prog: Optional[str] = None) -> NoReturn:
    """End a command on a user error: ``PROG: error: MESSAGE`` on standard error (as argparse writes its
    refusals), exit status 2."""
    print(f"{prog}: error: {message}" if prog else f"error: {message}", file=sys.stderr)
    raise SystemExit(USER_ERROR_STATUS)


def command(prog: Optional[str] = None, also: Tuple[Type[BaseException], ...] = (), *,
            named_errors: bool = True) -> Callable[[Callable], Callable]:
    """Decorate a command's ``main``: the one helper every command goes through.

    The command is the one the registry (:data:`fairseq_speaker.command_registry.COMMANDS`) lists for the module of
    ``main``; ``prog``, if given, must be its name. When ``main`` starts, the exception hook (:func:`excepthook`) is
    installed. A :class:`UserError` (or one of ``also``, e.g. ``FloatingPointError`` for a fit that diverged)
    escaping ``main`` ends in :func:`fail`, naming the command; with ``named_errors=False`` it is left to the hook
    (``error: MESSAGE``, status 2), for the commands whose messages always read so.

    Raises:
        LookupError: the module of ``main`` is not a registered command's, or ``prog`` is not its name.
    """
    def wrap(main: Callable) -> Callable:
        name = command_of_module(main.__module__).name
        if prog is not None and prog != name:
            raise LookupError(f"{main.__module__}.main is the command {name!r} in the registry, not {prog!r}")

        @functools.wraps(main)
        def run(*args, **kwargs):
            install_excepthook()
            try:
                return main(*args, **kwargs) if not named_errors else _named(main, name, also, *args, **kwargs)
            except KeyboardInterrupt:  # Ctrl-C: no failure of the command, and no traceback; the shell's status
                print(f"{name}: interrupted", file=sys.stderr)
                raise SystemExit(INTERRUPTED_STATUS) from None
        setattr(run, COMMAND_MARK, name)
        return run
    return wrap


#: the exit status of a command stopped by Ctrl-C (SIGINT), as a shell gives it (128 + 2)
INTERRUPTED_STATUS = 130


def _named(main: Callable, name: str, also: Tuple[Type[BaseException], ...], *args, **kwargs):
    """``main`` with its user errors (and ``also``) ending in :func:`fail`, naming the command."""
    try:
        return main(*args, **kwargs)
    except (UserError,) + tuple(also) as e:
        fail(str(e), name)
    except Exception as e:  # a UserError wrapped by fairseq ("Cannot load model parameters ...")
        error = user_error_in(e)
        if error is None:
            raise
        fail(str(error), name)


def excepthook(exc_type, exc, tb, fallback=None) -> bool:
    """Print the message of a user error (True), or hand any other exception to ``fallback`` (False)."""
    error = user_error_in(exc)
    if error is None:
        (fallback or sys.__excepthook__)(exc_type, exc, tb)
        return False
    print(f"error: {error}", file=sys.stderr)
    return True


def _interactive() -> bool:
    return hasattr(sys, "ps1") or bool(sys.flags.interactive)


def _exit_now(status: int) -> NoReturn:
    """End the process with ``status`` from an exception hook, where Python would use 1: the exit handlers
    run (logging, temporary folders), the standard streams are flushed, then the process ends."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(status)


def install_excepthook() -> None:
    previous = sys.excepthook
    if getattr(previous, "handles_user_errors", False):
        return

    def hook(exc_type, exc, tb):
        if excepthook(exc_type, exc, tb, fallback=previous) and not _interactive():
            _exit_now(USER_ERROR_STATUS)

    setattr(hook, "handles_user_errors", True)
    sys.excepthook = hook
