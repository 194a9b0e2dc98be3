"""What a model's service is given and keeps, shared by its parts: the limits of one request (:class:`Limits`) and
the state of the service (:class:`ServiceState`, the base of each part of
:class:`~fairseq_speaker.service.speaker_service.SpeakerService`, declaring what its constructor sets).
"""

import threading
from dataclasses import dataclass
from typing import Dict, List, Optional, Set

from fairseq_speaker.onboarding.translator import SpeakerTranslator
from fairseq_speaker.service.batcher import Batcher, BatchOptions
from fairseq_speaker.service.store import SpeakerStore


@dataclass(frozen=True)
class Limits:
    """What one request may ask (each is a command-line option of ``fairseq-speaker-serve``)."""

    #: sentences in one /translate request
    max_sentences: int = 64
    #: characters in one sentence (translated, or of an onboarding pair)
    max_chars: int = 1000
    #: sentence pairs in one onboarding request (PUT /speakers/{name}, POST /speakers/{name}/sentences)
    max_pairs: int = 256
    #: sentence pairs one onboarded speaker is fitted on, in all (an update refits on all of them)
    max_speaker_pairs: int = 2048
    #: the beam a /translate request may ask for
    max_beam: int = 16

    def __post_init__(self):
        for name in ("max_sentences", "max_chars", "max_pairs", "max_speaker_pairs", "max_beam"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {value!r}")

    @property
    def max_body_bytes(self) -> int:
        """The largest request body: every allowed character as a 6-byte JSON escape, and 64 KiB of the rest."""
        return 6 * self.max_chars * max(self.max_sentences, 2 * self.max_pairs) + 65536


class ServiceState:
    """The state of a model's service: set by the constructor of
    :class:`~fairseq_speaker.service.speaker_service.SpeakerService`, which says what each is, and read by its parts
    (:class:`~fairseq_speaker.service.store_sync.StoreSync`, :class:`~fairseq_speaker.service.translating.Translating`,
    :class:`~fairseq_speaker.service.speaker_onboarding.SpeakerOnboarding`,
    :class:`~fairseq_speaker.service.request_checks.RequestChecks`)."""

    translator: SpeakerTranslator
    store: SpeakerStore
    limits: Limits
    model: str
    retired: Optional[str]
    refitted: List[str]
    skip_broken_speakers: bool
    beam: int
    generate: Dict
    batching: BatchOptions
    batcher: Batcher
    trained: List[str]
    policy: str
    not_adaptable: Optional[str]
    fingerprint: Dict
    _writing: threading.Lock
    _trained: Set[str]
    _counts: Dict[str, int]
    _lock: threading.RLock
    _loaded: Dict[str, int]
    _seen_generation: int
    _imported: Set[str]
    _skipped: Dict[str, int]
    _twin_of: Dict[str, str]
