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
import re
import sys
from types import TracebackType
from typing import Callable, Dict, NoReturn, Optional, Tuple, Type

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
    "--replace-unk requires a raw text dataset (--dataset-impl=raw)": "fairseq-generate copies the aligned source "
        "word of an <unk> from raw text only: give --dataset-impl raw and a data folder of raw text, translate with "
        "fairseq-interactive, or leave --replace-unk out",
}

#: fairseq's own refusals of a file named on the command line that end in an ``OSError``: the start of its message
#: -> ours, given the rest of its message (the path)
FAIRSEQ_FILE_ERRORS = {
    "Model file not found: ": "checkpoint not found: {}; give --path the checkpoint file that fairseq-train wrote "
                              "(checkpoint_best.pt or checkpoint_last.pt in its --save-dir; several joined with ':')",
}


#: the functions of fairseq that open a file named by an option, by (module, function) -> the option and what to do;
#: an ``OSError`` raised there is a file the user named
FAIRSEQ_FILE_READERS = {
    ("fairseq_cli.interactive", "buffered_read"): ("--input", "give a readable text file, or leave out --input "
                                                              "(standard input)"),
    ("fairseq.utils", "load_align_dict"): ("--replace-unk", "give it the alignment dictionary file (fairseq reads "
                                                            "a --replace-unk without a value as the file '@@ ')"),
}
#: the same for functions that do much else besides: an ``OSError`` is the option's only where that function raised
#: it itself, or the standard library's path functions it called (``os.makedirs``), not something it called
FAIRSEQ_FILE_MAKERS = {
    ("fairseq_cli.generate", "main"): ("--results-path", "give a folder that can be made and written, where "
                                                         "fairseq-generate writes generate-SUBSET.txt"),
}
#: the modules of the path functions :data:`FAIRSEQ_FILE_MAKERS` may call
_PATH_MODULES = ("os", "posixpath", "genericpath", "ntpath")

#: fairseq's (and numpy's, under fairseq) refusals of an option's value that end in a traceback: exception type and
#: the start of its message -> what to do
FAIRSEQ_VALUE_ERRORS = {
    (ValueError, "Seed must be between 0 and 2**32 - 1"): "give --seed a whole number from 0 to 4294967295",
    (Exception, "Size of sample #"): "",  # fairseq's own message says what to do
}


#: fairseq's own failures on a missing option, by where they raise (module, function) and the exception's type ->
#: what to do (fairseq-validate without --task ended in ``KeyError: None``)
FAIRSEQ_MISSING_OPTIONS: Dict[Tuple[str, str, Type[BaseException]], str] = {
    ("fairseq.options", "parse_args_and_arch", KeyError): "no --task given: give --task speaker_translation (the "
                                                          "task of fairseq-speaker's checkpoints)",
}


def last_traceback(exc: BaseException) -> Optional[TracebackType]:
    """The entry of ``exc``'s traceback where it was raised (its last), or None."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb


def _raised_in(exc: BaseException) -> Optional[Tuple[str, str]]:
    """The (module, function) of the frame that raised ``exc``."""
    tb = last_traceback(exc)
    return None if tb is None else (str(tb.tb_frame.f_globals.get("__name__")), tb.tb_frame.f_code.co_name)


def _fairseq_reader(exc: OSError) -> Optional[UserError]:
    """The option whose file ``exc`` failed to open, where one of :data:`FAIRSEQ_FILE_READERS` raised it."""
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        where = (str(frame.f_globals.get("__name__")), frame.f_code.co_name)
        reader = FAIRSEQ_FILE_READERS.get(where)
        if where in FAIRSEQ_FILE_MAKERS and _raised_by_paths(tb.tb_next):
            reader = FAIRSEQ_FILE_MAKERS[where]
        if reader is not None:
            option, fix = reader
            name = exc.filename if exc.filename is not None else "?"
            return UserError(f"{option} {name}: {exc.strerror or exc}: {fix}")
        tb = tb.tb_next
    return None


def _raised_by_paths(tb) -> bool:
    """Whether every frame of ``tb`` (the calls below one frame, None for none) is one of the standard library's path
    functions."""
    while tb is not None:
        if tb.tb_frame.f_globals.get("__name__") not in _PATH_MODULES:
            return False
        tb = tb.tb_next
    return True


def user_error_in(exc: Optional[BaseException]) -> Optional[UserError]:
    """The :class:`UserError` that caused ``exc`` (fairseq wraps some, e.g. "Cannot load model
    parameters"; one of fairseq's option checks, :data:`FAIRSEQ_OPTION_ASSERTIONS`, of its file checks,
    :data:`FAIRSEQ_FILE_ERRORS`, :data:`FAIRSEQ_FILE_READERS` and :data:`FAIRSEQ_FILE_MAKERS`, or of its values,
    :data:`FAIRSEQ_VALUE_ERRORS`, becomes one), or None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, UserError):
            return exc
        if isinstance(exc, AssertionError) and str(exc) in FAIRSEQ_OPTION_ASSERTIONS:
            return UserError(f"{exc}: {FAIRSEQ_OPTION_ASSERTIONS[str(exc)]}")
        where = _raised_in(exc)
        if where is not None and (*where, type(exc)) in FAIRSEQ_MISSING_OPTIONS and exc.args == (None,):
            return UserError(FAIRSEQ_MISSING_OPTIONS[(*where, type(exc))])
        if isinstance(exc, OSError):
            for start, message in FAIRSEQ_FILE_ERRORS.items():
                if str(exc).startswith(start):
                    return UserError(message.format(str(exc)[len(start):]))
            reader = _fairseq_reader(exc)
            if reader is not None:
                return reader
        for (kind, start), fix in FAIRSEQ_VALUE_ERRORS.items():
            if type(exc) is kind and str(exc).startswith(start):
                # numpy's scalars in fairseq's message as they were written: "(=(np.int32(5), ...)" is "(=(5, ...)"
                message = re.sub(r"np\.[a-z0-9_]+\(([^()]*)\)", r"\1", str(exc))
                return UserError(f"{message}: {fix}" if fix else message)
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
