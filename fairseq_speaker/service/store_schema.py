"""The speaker store's schema, alike in SQLite and PostgreSQL: its version; the model ids (:data:`DEFAULT_MODEL`)
and the fingerprint that ties each to one model (:func:`fingerprint_of`); the columns of a speaker and the record
that holds one (:class:`StoredSpeaker`, named in messages by :func:`speaker_text`); the steps of the upgrades that
both databases run (from schema 1, :data:`UPGRADE_MODELS`; from schema 2, :func:`upgrade_looks`). Each database
makes its tables and upgrades them itself (:mod:`~fairseq_speaker.service.store`,
:mod:`~fairseq_speaker.service.store_postgres`).
"""

import logging
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from fairseq_speaker.data.speaker_labels import visible_form

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 3
#: the id of the model a service serves when it is started with one checkpoint (and of every speaker of a store of
#: schema 1)
DEFAULT_MODEL = "default"

#: the keys of :func:`~fairseq_speaker.onboarding.vectors_file.describe` that tie rows to a model
FINGERPRINT_KEYS = ("variant_spelling", "row_shapes", "target_dictionary_hash", "target_dictionary_size",
                    "shared_sha1")

#: the columns of ``speakers``, in the order
#: :meth:`~fairseq_speaker.service.store_statements.StoreStatements._write` gives them
COLUMNS = "model, name, rows, pairs, sentences, created, updated, version, looks"
#: the columns of ``speakers`` in schema 2 (without ``looks``), what the upgrade from schema 1 fills
COLUMNS_2 = "model, name, rows, pairs, sentences, created, updated, version"
#: the index by which a write finds a name that looks like the one it adds (:func:`looks`), in one statement
LOOKS_INDEX = "CREATE INDEX IF NOT EXISTS speakers_looks ON speakers (model, looks)"
#: schema 1 to 2 in both databases, once the speakers have their model: the fingerprint moved to ``models``
UPGRADE_MODELS = [
    f"INSERT INTO models (id, fingerprint, made_for) SELECT '{DEFAULT_MODEL}', f.value, COALESCE((SELECT value FROM "
    "meta WHERE key = 'model'), 'unknown') FROM meta f WHERE f.key = 'fingerprint'",
    "DELETE FROM meta WHERE key IN ('fingerprint', 'model')",
    "UPDATE meta SET value = '2' WHERE key = 'schema'",
]

#: schema 2 to 3 in both databases: each speaker's name as a reader sees it (:func:`looks`, filled by
#: :func:`upgrade_looks`), indexed, so that a write refuses a name that looks like a stored one in one statement, in its
#: own transaction (two replicas onboarding lookalike names at one moment each passed their own check, and both names
#: were stored)
UPGRADE_2_TO_3 = "ALTER TABLE speakers ADD COLUMN looks TEXT NOT NULL DEFAULT ''"


def looks(name: str) -> str:
    """What the column ``looks`` holds for the speaker ``name``: its
    :func:`~fairseq_speaker.data.speaker_labels.visible_form`. Two speakers of one model whose names look alike
    are refused by every write."""
    return visible_form(name)


def upgrade_looks(db) -> List[Tuple[str, str, str]]:
    """Upgrade the speakers of a store of schema 2 to schema 3 on ``db`` (a connection whose ``execute`` takes ``?``
    parameters, in a transaction): the column ``looks`` added, filled and indexed. Returns the lookalikes it found,
    ``(model, name, the name it looks like)``, the later one of each pair (by creation, then name) first named: a
    store written before the column could hold both of two names onboarded by two processes at one moment."""
    db.execute(UPGRADE_2_TO_3)
    seen: Dict[Tuple[str, str], str] = {}
    twins = []
    for model, name in db.execute("SELECT model, name FROM speakers ORDER BY model, created, name").fetchall():
        form = looks(name)
        db.execute("UPDATE speakers SET looks = ? WHERE model = ? AND name = ?", (form, model, name))
        first = seen.setdefault((model, form), name)
        if first != name:
            twins.append((model, name, first))
    db.execute(LOOKS_INDEX)
    db.execute("UPDATE meta SET value = '3' WHERE key = 'schema'")
    return twins


def log_lookalikes(option: str, path: str, twins: List[Tuple[str, str, str]]) -> None:
    """Log the lookalike names :func:`upgrade_looks` found, with what to do."""
    for model, name, first in twins:
        logger.warning(f"{option} {path}: speaker {speaker_text(model, name)} looks like {first!r}, onboarded before it "
                       f"(both were stored by an older fairseq-speaker): the service serves {first!r} and skips "
                       f"{name!r}; delete the one that is wrong (DELETE /speakers/NAME)")


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


#: what a model id may be: it is part of URLs, metric labels and the store's keys
MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MODEL_ID_RULE = "letters, digits, '.', '_' and '-', at most 64, beginning with a letter or digit"


def model_id_problem(text: object) -> Optional[str]:
    """Why ``text`` cannot be a model id, or None."""
    if not isinstance(text, str) or not MODEL_ID.fullmatch(text):
        return f"{text!r} is not a model id: use {MODEL_ID_RULE}"
    return None


def speaker_text(model: str, name: str) -> str:
    """How messages name the speaker ``name`` of ``model``: ``'dr-lee'`` for the default model's, ``'dr-lee' of model
    'en-de'`` for another's."""
    return repr(name) if model == DEFAULT_MODEL else f"{name!r} of model {model!r}"


def fingerprint_of(description: Dict) -> Dict:
    """The part of a bias's :func:`~fairseq_speaker.onboarding.vectors_file.describe` that ties rows to a model."""
    return {key: description.get(key) for key in FINGERPRINT_KEYS}
