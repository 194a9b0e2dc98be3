import os
from typing import List

from .speaker_dictionary import SpeakerDataError


def read_lines(path: str) -> List[str]:
    """The lines of a UTF-8 text file, without their line ends.

    Raises:
        SpeakerDataError: the file does not exist (the message names the path expected).
    """
    if not os.path.isfile(path):
        raise SpeakerDataError(f"file not found: expected {path}")
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]
