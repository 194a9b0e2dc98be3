"""User errors: a mistake in the input or the options, whose message says what to do.

Every command line, ours and fairseq's own (``fairseq-train``, ``fairseq-generate``, ... with
``--user-dir``), ends such an error with its message and exit status 1, without a Python
traceback: importing the package installs :func:`excepthook`. Any other exception is a bug and
keeps its traceback.
"""

import sys
from typing import Optional


class UserError(ValueError):
    """Bad input or options; the message names the file, the line or the option, and the fix."""


def user_error_in(exc: Optional[BaseException]) -> Optional[UserError]:
    """The :class:`UserError` that caused ``exc`` (fairseq wraps some, e.g. "Cannot load model
    parameters"), or None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, UserError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def excepthook(exc_type, exc, tb, fallback=None) -> None:
    error = user_error_in(exc)
    if error is None:
        (fallback or sys.__excepthook__)(exc_type, exc, tb)
        return
    print(f"error: {error}", file=sys.stderr)


def install_excepthook() -> None:
    previous = sys.excepthook
    if getattr(previous, "handles_user_errors", False):
        return

    def hook(exc_type, exc, tb):
        excepthook(exc_type, exc, tb, fallback=previous)

    hook.handles_user_errors = True
    sys.excepthook = hook
