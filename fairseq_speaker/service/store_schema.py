"""The speaker store's schema, alike in SQLite and PostgreSQL: its version; the model ids (:data:`DEFAULT_MODEL`)
and the fingerprint that ties each to one model (:func:`fingerprint_of`); the columns of a speaker and the record
that holds one (:class:`StoredSpeaker`, named in messages by :func:`speaker_text`); the step of the upgrade from
schema 1 that both databases run (:data:`UPGRADE_MODELS`). Each database makes its tables and upgrades them itself
(:mod:`~fairseq_speaker.service.store`, :mod:`~fairseq_speaker.service.store_postgres`).
"""

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

SCHEMA_VERSION = 2
#: the id of the model a service serves when it is started with one checkpoint (and of every speaker of a store of
#: schema 1)
DEFAULT_MODEL = "default"

#: the keys of :func:`~fairseq_speaker.onboarding.vectors.describe` that tie rows to a model
FINGERPRINT_KEYS = ("variant_spelling", "row_shapes", "target_dictionary_hash", "target_dictionary_size",
                    "shared_sha1")

#: the columns of ``speakers``, in the order
#: :meth:`~fairseq_speaker.service.store_statements.StoreStatements._write` gives them
COLUMNS = "model, name, rows, pairs, sentences, created, updated, version"
#: schema 1 to 2 in both databases, once the speakers have their model: the fingerprint moved to ``models``
UPGRADE_MODELS = [
    f"INSERT INTO models (id, fingerprint, made_for) SELECT '{DEFAULT_MODEL}', f.value, COALESCE((SELECT value FROM "
    "meta WHERE key = 'model'), 'unknown') FROM meta f WHERE f.key = 'fingerprint'",
    "DELETE FROM meta WHERE key IN ('fingerprint', 'model')",
    "UPDATE meta SET value = '2' WHERE key = 'schema'",
]


@dataclass
class StoredSpeaker:
    """An onboarded speaker as the store holds it (``rows`` and ``pairs`` only when asked for), of the model
    ``model``."""

    name: str
    sentences: int
    created: str
    updated: str
    version: int
    rows: Optional[bytes] = None
    pairs: Optional[List[Tuple[str, str]]] = None
    model: str = DEFAULT_MODEL


def speaker_text(model: str, name: str) -> str:
    """How messages name the speaker ``name`` of ``model``: ``'dr-lee'`` for the default model's, ``'dr-lee' of model
    'en-de'`` for another's."""
    return repr(name) if model == DEFAULT_MODEL else f"{name!r} of model {model!r}"


def fingerprint_of(description: Dict) -> Dict:
    """The part of a bias's :func:`~fairseq_speaker.onboarding.vectors.describe` that ties rows to a model."""
    return {key: description.get(key) for key in FINGERPRINT_KEYS}
