from .dictionary_hash import dictionary_hash
from .speaker_dataset import SpeakerDataset
from .speaker_dictionary import (
    MEAN_SPEAKER,
    NO_SPEAKER,
    UNKNOWN_SPEAKER_POLICIES,
    SpeakerDataError,
    SpeakerDictionary,
    read_speaker_file,
)
from .text_files import check_utf8, read_lines, utf8_lines

__all__ = [
    "dictionary_hash",
    "MEAN_SPEAKER",
    "NO_SPEAKER",
    "UNKNOWN_SPEAKER_POLICIES",
    "SpeakerDataError",
    "SpeakerDataset",
    "SpeakerDictionary",
    "check_utf8",
    "read_lines",
    "utf8_lines",
    "read_speaker_file",
]
