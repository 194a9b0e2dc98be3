"""Opening a speaker store by the URL or file its option names: SQLite (:mod:`fairseq_speaker.service.store`) or
PostgreSQL (:mod:`fairseq_speaker.service.store_postgres`). Apart from both, so that neither store's module imports
the other's."""

from fairseq_speaker.service.store import SpeakerStore
from fairseq_speaker.service.store_location import store_location
from fairseq_speaker.service.store_postgres import PostgresSpeakerStore


def open_store(text: str, timeout: float = 10.0, create: bool = True, option: str = "--store") -> "SpeakerStore":
    """The store ``text`` names (see :func:`store_location`), opened; ``create``: make it where there is none (else
    refused); ``timeout``: seconds to connect, and a write waits for another process's; ``option`` names it in
    messages."""
    location = store_location(text, option)
    if location.kind == "postgresql":
        return PostgresSpeakerStore(location, timeout=timeout, create=create, option=option)
    return SpeakerStore(location.target, timeout=timeout, create=create, option=option)
