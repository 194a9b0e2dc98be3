"""The speaker store: the durable record of the speakers a service onboarded, on SQLite.

One file holds, for each onboarded speaker, its rows of the speaker bias (the bytes of the ``.npz`` file
:meth:`SpeakerTranslator.export_speakers` would write for it alone), the sentence pairs it was fitted on,
their count, and when it was created and last changed. A write is one transaction, committed (``synchronous
= FULL``) before the method returns: a speaker the service acknowledged survives a crash or a power cut.

The store is tied to one model by a fingerprint: what makes speaker rows portable between models
(:func:`fairseq_speaker.onboarding.vectors.describe`: the variant, its row shapes, the target dictionary's
hash and size, and a SHA-1 of the bias's shared parameters). A model with another fingerprint is refused:
its rows would mean something else there.

Several processes on one machine may share the file (WAL mode; not on a network file system). Every write
bumps a store-wide ``generation`` and stamps the speaker with it (its ``version``), so that a process learns
with one read whether anything changed since it last looked, and which speakers did.
"""

import contextlib
import datetime
import json
import os
import sqlite3
import threading
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from fairseq_speaker.data.speaker_dictionary import new_label_problem
from fairseq_speaker.errors import UserError

SCHEMA_VERSION = 1

#: the keys of :func:`~fairseq_speaker.onboarding.vectors.describe` that tie rows to a model
FINGERPRINT_KEYS = ("variant_spelling", "row_shapes", "target_dictionary_hash", "target_dictionary_size",
                    "shared_sha1")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS speakers (
    name TEXT PRIMARY KEY,
    rows BLOB NOT NULL,
    pairs TEXT NOT NULL,
    sentences INTEGER NOT NULL,
    created TEXT NOT NULL,
    updated TEXT NOT NULL,
    version INTEGER NOT NULL
);
"""


class StoreError(UserError):
    """A store that cannot be used as asked (unreadable, of another model or a newer schema); the message says why."""


class StoreDamaged(StoreError):
    """A store whose file, or one speaker's record in it, cannot be read: the message names the file, what is wrong
    and how to recover."""

    def __init__(self, path: str, what: str, speaker: Optional[str] = None, skippable: bool = True):
        recover = (f"restore {path} from a backup (sqlite3 FILE '.backup COPY' makes one of a live store), check it "
                   f"with sqlite3 {path} 'PRAGMA integrity_check'")
        if skippable:
            recover += (", or start fairseq-speaker-serve with --skip-broken-speakers to serve without the speakers "
                        "whose records cannot be read (it logs their names; their sentences are lost unless restored)")
        else:
            recover += ", or start with a new --store file (the onboarded speakers are then lost unless restored)"
        super().__init__(f"--store {path}: {what}. To recover: {recover}")
        self.speaker = speaker
        self.what = what


def _damage(error: sqlite3.Error) -> bool:
    """Whether ``error`` says the file is damaged (not busy, locked or closed: those pass)."""
    return isinstance(error, sqlite3.DatabaseError) and not isinstance(error, (sqlite3.OperationalError,
                                                                                sqlite3.ProgrammingError))


class StoreConflict(Exception):
    """A write that the store's current contents contradict: the speaker ``exists``, was ``deleted``, or ``changed``
    meanwhile (its ``reason``)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass
class StoredSpeaker:
    """An onboarded speaker as the store holds it (``rows`` and ``pairs`` only when asked for)."""

    name: str
    sentences: int
    created: str
    updated: str
    version: int
    rows: Optional[bytes] = None
    pairs: Optional[List[Tuple[str, str]]] = None


def fingerprint_of(description: Dict) -> Dict:
    """The part of a bias's :func:`~fairseq_speaker.onboarding.vectors.describe` that ties rows to a model."""
    return {key: description.get(key) for key in FINGERPRINT_KEYS}


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _fingerprint_text(fp: Dict) -> str:
    return (f"a {fp.get('variant_spelling')!r} speaker bias (rows {fp.get('row_shapes')}), a target dictionary of "
            f"{fp.get('target_dictionary_size')} words (hash {str(fp.get('target_dictionary_hash'))[:12]}), shared "
            f"speaker parameters {str(fp.get('shared_sha1'))[:12]}")


class SpeakerStore:
    """The speakers of one SQLite file (see the module documentation). Safe to use from several threads."""

    def __init__(self, path: str, timeout: float = 10.0):
        """Open (or create) the store at ``path``; ``timeout``: seconds a write waits for another process's."""
        self.path = path
        folder = os.path.dirname(os.path.abspath(path))
        if path != ":memory:" and not os.path.isdir(folder):
            raise StoreError(f"--store {path}: the folder {folder} does not exist")
        if os.path.isdir(path):
            raise StoreError(f"--store {path} is a directory: give the path of a file (it is created if missing)")
        self._lock = threading.Lock()
        self._closed = False
        try:
            self._db = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            raise StoreError(f"--store {path}: cannot be opened ({e})") from None
        try:
            mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            self._db.execute("PRAGMA synchronous=FULL")  # in WAL mode NORMAL may lose the last commits on power loss
            self.wal = mode == "wal"
            with self._transaction(write=True) as db:
                # statement by statement: executescript would commit the transaction first
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    db.execute(statement)
                db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
                db.execute("INSERT OR IGNORE INTO meta VALUES ('generation', '0')")
                schema = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0]
        except sqlite3.DatabaseError as e:
            self._db.close()
            if _is_sqlite(path):
                raise StoreDamaged(path, f"the file is damaged ({e})", skippable=False) from None
            raise StoreError(f"--store {path}: not a speaker store ({e}): give a new file name, or the store of "
                             f"this model") from None
        if int(schema) > SCHEMA_VERSION:
            self._db.close()
            raise StoreError(f"--store {path}: written by a newer fairseq-speaker (store schema {schema}, this one "
                             f"reads {SCHEMA_VERSION}): upgrade fairseq-speaker")

    # -- transactions ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _transaction(self, write: bool) -> Iterator[sqlite3.Connection]:
        """One transaction: a write takes the file's write lock at once (``BEGIN IMMEDIATE``), so that what it
        reads is still true when it commits; a read sees one snapshot."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _next_version(self, db: sqlite3.Connection) -> int:
        db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'")
        return int(db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])

    # -- the model --------------------------------------------------------------------------------------
    def bind(self, fingerprint: Dict, model: str = "the model") -> None:
        """Tie a new store to the model of ``fingerprint`` (see :func:`fingerprint_of`), or check that an
        existing one was made for it; ``model`` names it in messages."""
        with self._transaction(write=True) as db:
            row = db.execute("SELECT value FROM meta WHERE key = 'fingerprint'").fetchone()
            if row is None:
                db.execute("INSERT INTO meta VALUES ('fingerprint', ?)", (json.dumps(fingerprint, sort_keys=True),))
                db.execute("INSERT OR REPLACE INTO meta VALUES ('model', ?)", (model,))
                return
            try:
                theirs = json.loads(row[0])
                if not isinstance(theirs, dict):
                    raise ValueError(f"a {type(theirs).__name__}, not an object")
            except ValueError as e:
                raise StoreDamaged(self.path, f"the record of the model it was made for (its fingerprint) is not "
                                   f"readable ({e})", skippable=False) from None
            made_for = db.execute("SELECT value FROM meta WHERE key = 'model'").fetchone()
        if theirs != fingerprint:
            differ = [key for key in FINGERPRINT_KEYS if theirs.get(key) != fingerprint.get(key)]
            raise StoreError(
                f"--store {self.path} holds the speakers of another model ({made_for[0] if made_for else 'unknown'}): "
                f"{_fingerprint_text(theirs)}; {model} has {_fingerprint_text(fingerprint)} (differs in: "
                f"{', '.join(differ)}). Speaker rows only mean something in the model they were fitted on: serve "
                f"that model with this store, or give {model} a store of its own (a new --store file)")

    def fingerprint(self) -> Optional[Dict]:
        """The fingerprint of the model the store was made for, or None while it is new."""
        with self._transaction(write=False) as db:
            row = db.execute("SELECT value FROM meta WHERE key = 'fingerprint'").fetchone()
        return json.loads(row[0]) if row else None

    # -- reading ----------------------------------------------------------------------------------------
    def generation(self) -> int:
        """A number that grows with every committed write, by any process. (One statement, read in a transaction
        of its own: every translation request asks, and a BEGIN and a COMMIT around it would treble the cost.)"""
        with self._lock:
            return int(self._db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchall()[0][0])

    def versions(self) -> Tuple[int, Dict[str, int]]:
        """The generation and each speaker's version, of one snapshot."""
        with self._transaction(write=False) as db:
            generation = int(db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])
            return generation, dict(db.execute("SELECT name, version FROM speakers"))

    def readable_versions(self) -> Tuple[int, Dict[str, int], Dict[str, str]]:
        """As :meth:`versions`, each speaker read alone: also the speakers whose record cannot be read, with why (for
        ``--skip-broken-speakers``, where :meth:`versions` fails on a damaged file). Not one snapshot: each statement
        is a transaction of its own (a transaction that met a damaged page cannot be committed)."""
        with self._lock:
            db = self._db
            generation = int(db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])
            names = [name for (name,) in db.execute("SELECT name FROM speakers INDEXED BY sqlite_autoindex_speakers_1")]
            versions, broken = {}, {}
            for name in names:
                try:
                    row = db.execute("SELECT version FROM speakers WHERE name = ?", (name,)).fetchone()
                    versions[name] = int(row[0])
                except sqlite3.Error as e:
                    if not _damage(e):
                        raise
                    broken[name] = f"its record cannot be read ({e})"
        return generation, versions, broken

    def get(self, name: str, contents: bool = True) -> Optional[StoredSpeaker]:
        """The speaker ``name`` (with its rows and sentence pairs if ``contents``), or None. Raises
        :class:`StoreDamaged` for a record that cannot be read."""
        columns = "name, sentences, created, updated, version" + (", rows, pairs" if contents else "")
        try:
            with self._transaction(write=False) as db:
                row = db.execute(f"SELECT {columns} FROM speakers WHERE name = ?", (name,)).fetchone()
        except sqlite3.Error as e:
            if not _damage(e):
                raise
            raise StoreDamaged(self.path, f"the record of speaker {name!r} cannot be read ({e})", name) from None
        return _speaker(row, self.path) if row else None

    def speakers(self) -> List[StoredSpeaker]:
        """Every speaker, without rows and sentences, oldest first (in a damaged file: those that can be read)."""
        columns = "name, sentences, created, updated, version"
        try:
            with self._transaction(write=False) as db:
                rows = db.execute(f"SELECT {columns} FROM speakers ORDER BY created, name").fetchall()
        except sqlite3.Error as e:
            if not _damage(e):
                raise
            rows = sorted(self._readable_rows(columns), key=lambda row: (row[2], row[0]))
        return [_speaker(row, self.path) for row in rows]

    def _readable_rows(self, columns: str) -> List[tuple]:
        """``columns`` of each speaker whose record can be read, one statement each (see :meth:`readable_versions`)."""
        rows = []
        with self._lock:
            names = self._db.execute("SELECT name FROM speakers INDEXED BY sqlite_autoindex_speakers_1").fetchall()
            for (name,) in names:
                try:
                    rows.append(self._db.execute(f"SELECT {columns} FROM speakers WHERE name = ?", (name,)).fetchone())
                except sqlite3.Error as e:
                    if not _damage(e):
                        raise
        return rows

    # -- writing ----------------------------------------------------------------------------------------
    def put(self, name: str, rows: bytes, pairs: Sequence[Tuple[str, str]], expect: Optional[int] = None,
            replace: bool = False) -> StoredSpeaker:
        """Write speaker ``name`` (its rows, the sentence pairs they were fitted on) in one transaction.

        A new name is added, unless ``expect`` is given. An existing one is overwritten only with ``replace``
        (whatever its version), or when its version is ``expect`` (nobody changed it since it was read).
        Raises :class:`StoreConflict` otherwise.
        """
        problem = new_label_problem(name)
        if problem:
            raise StoreError(f"--store {self.path}: cannot store speaker {name!r}: {problem}")
        pairs = [[source, target] for source, target in pairs]
        now = _now()
        with self._transaction(write=True) as db:
            current = db.execute("SELECT version, created FROM speakers WHERE name = ?", (name,)).fetchone()
            if current is None and expect is not None:
                raise StoreConflict("deleted", f"speaker {name!r} was deleted meanwhile (by another process)")
            if current is not None and not replace and expect is None:
                raise StoreConflict("exists", f"speaker {name!r} already exists")
            if current is not None and not replace and current[0] != expect:
                raise StoreConflict("changed", f"speaker {name!r} was changed meanwhile (by another process)")
            version = self._next_version(db)
            created = current[1] if current is not None else now
            db.execute("INSERT OR REPLACE INTO speakers VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (name, sqlite3.Binary(rows), json.dumps(pairs, ensure_ascii=False), len(pairs), created, now,
                        version))
        return StoredSpeaker(name, len(pairs), created, now, version)

    def delete(self, name: str) -> bool:
        """Remove speaker ``name``; False if the store does not hold it."""
        with self._transaction(write=True) as db:
            if db.execute("SELECT 1 FROM speakers WHERE name = ?", (name,)).fetchone() is None:
                return False
            self._next_version(db)
            db.execute("DELETE FROM speakers WHERE name = ?", (name,))
        return True

    def close(self) -> None:
        """Close the file (safe to call twice)."""
        with self._lock:
            if not self._closed:
                self._db.close()
                self._closed = True


def _is_sqlite(path: str) -> bool:
    """Whether ``path`` begins as an SQLite file does (so that an error reading it means damage, not another kind of
    file)."""
    try:
        with open(path, "rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def _speaker(row, path: str) -> StoredSpeaker:
    speaker = StoredSpeaker(*row[:5])
    if len(row) > 5:
        try:
            speaker.rows = bytes(row[5])
            pairs = json.loads(row[6])
            speaker.pairs = [(source, target) for source, target in pairs]
            if not all(isinstance(x, str) for pair in speaker.pairs for x in pair):
                raise ValueError("a sentence is not a string")
        except (TypeError, ValueError) as e:
            raise StoreDamaged(path, f"the record of speaker {speaker.name!r} is damaged: its sentence pairs are not "
                               f"a JSON list of [source, target] strings ({e})", speaker.name) from None
    return speaker
