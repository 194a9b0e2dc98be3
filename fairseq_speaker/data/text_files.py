"""Reading the text files users give (sentences, hypotheses, references): UTF-8, checked line by line, so that
a file in another encoding is refused with its name, the line and how to convert it."""

import os
import stat
from typing import Iterator, List, Optional, Tuple

from fairseq_speaker.errors import UserError


class SpeakerDataError(UserError):
    """Bad speaker input; the message names the file, the line and the fix."""


def not_utf8(path: str, lineno: int, error: UnicodeDecodeError) -> SpeakerDataError:
    """The refusal of line ``lineno`` of ``path``, which ``error`` could not decode."""
    byte = error.object[error.start:error.start + 1]
    return SpeakerDataError(
        f"{path}:{lineno}: not valid UTF-8 (byte 0x{byte.hex()} at column {error.start + 1}): text files must be "
        f"UTF-8; convert this one, e.g. from Latin-1: iconv -f latin1 -t utf-8 {path} > {path}.utf8 (then use that "
        f"file)")


def _opened(path: str):
    if not os.path.exists(path):
        raise SpeakerDataError(f"file not found: expected {path}")
    if os.path.isdir(path):
        raise SpeakerDataError(f"{path} is a directory, not a text file")
    check_not_a_pipe(path)
    try:
        return open(path, "rb")
    except OSError as e:
        raise SpeakerDataError(f"{path}: cannot be read ({e.strerror})") from None


def check_not_a_pipe(path: str, option: Optional[str] = None) -> None:
    """Refuse a named pipe or a socket (a reader of a named pipe no program writes waited for ever in ``open``);
    ``option``: the option that gave ``path``, named first."""
    if _waits_for_a_writer(path):
        named = f"{option} {path}" if option else path
        raise SpeakerDataError(f"{named} is a named pipe (or a socket): reading it waits for a program to write it, "
                               f"for ever if none does: give a file")


def _waits_for_a_writer(path: str) -> bool:
    """Whether ``path`` is a named pipe or a socket of the file system; a shell's ``<(command)`` (``/dev/fd/N``), whose
    writer is running, is not one."""
    if os.path.realpath(path).startswith(("/dev/fd/", "/proc/")) or path.startswith(("/dev/fd/", "/proc/")):
        return False
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def utf8_lines(path: str) -> Iterator[Tuple[int, str]]:
    """``(line number, text)`` of a UTF-8 file, the text without its line end (``\\n`` or ``\\r\\n``) and the file
    without its byte-order mark, as the speaker files are read.

    Raises:
        SpeakerDataError: the file is missing, unreadable, or a line is not UTF-8 (the message names the
            file and the line, and how to convert it).
    """
    with _opened(path) as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise not_utf8(path, lineno, e) from None
            if text.endswith("\n"):
                text = text[:-2] if text.endswith("\r\n") else text[:-1]
            if lineno == 1 and text.startswith("\ufeff"):  # a byte-order mark (Windows editors write one): no text
                text = text[1:]
            yield lineno, text


def read_lines(path: str) -> List[str]:
    """The lines of a UTF-8 text file, without their line ends.

    Raises:
        SpeakerDataError: the file does not exist (the message names the path expected), cannot be read, or
            is not UTF-8 (the message names the line).
    """
    return [text for _, text in utf8_lines(path)]


def check_utf8(path: str) -> None:
    """Refuse (:class:`SpeakerDataError`) a file that is missing, unreadable or not UTF-8, before it is read
    by code that would fail on it without naming it."""
    for _ in utf8_lines(path):
        pass
