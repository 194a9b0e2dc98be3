"""The speaker store: the durable record of the speakers a service onboarded, in SQLite or PostgreSQL.

One store holds, for each onboarded speaker, its rows of the speaker bias (the bytes of the ``.npz`` file
:meth:`SpeakerTranslator.export_speakers` would write for it alone), the sentence pairs it was fitted on,
their count, and when it was created and last changed. A write is one transaction, committed (SQLite:
``synchronous = FULL``; PostgreSQL: a synchronous commit) before the method returns: a speaker the service
acknowledged survives a crash or a power cut.

A store serves several models, each under an id (``--model ID=CHECKPOINT``; ``default`` for the checkpoint a
service is started with alone): a speaker is the pair (model id, name), so that one name onboarded for two models is
two speakers, each with its own rows and sentences. Each model id is tied to one model by a fingerprint: what makes
speaker rows portable between models (:func:`fairseq_speaker.onboarding.vectors_file.describe`: the variant, its row
shapes, the target dictionary's hash and size, and a SHA-1 of the bias's shared parameters). A model with another
fingerprint is refused under that id: its rows would mean something else there (a reload of the id refits them on
the new model from their sentences, and ties the id to it: :meth:`SpeakerStore.rebind`).

Schema 3 keys speakers by (model id, name), keeps each id's fingerprint in a table ``models``, and each name as a
reader sees it (``looks``, indexed), so that a write refuses a name that looks like another speaker's of its model (two
replicas onboarding lookalike names at one moment: the second gets :class:`StoreConflict`). Older stores are upgraded
when first opened, each step in one transaction: a store of schema 1 (one model, fairseq-speaker 0.8 and before) gets
the model ids, its speakers those of the model ``default``; a store of schema 2 (0.9's development) gets ``looks``,
and any names in it that look alike are logged (the service serves the earlier one). An older fairseq-speaker then
refuses the store (a newer schema).

Where it is (``--store``, :func:`~fairseq_speaker.service.store_location.store_location`): a file, or
``sqlite:///FILE``, is an SQLite store (the embedded default, :class:`SpeakerStore`), which several processes on one
machine may share (WAL mode; not on a network file system); ``postgresql://USER@HOST/DATABASE`` is a PostgreSQL store
(:class:`~fairseq_speaker.service.store_postgres.PostgresSpeakerStore`, with the ``postgres`` extra), which
replicas on many machines may share. Every write bumps a store-wide ``generation`` and stamps the speaker with
it (its ``version``), so that a process learns with one read whether anything changed since it last looked,
and which speakers did. Writes are serialized by the database (SQLite's ``BEGIN IMMEDIATE``, a row lock on the
generation in PostgreSQL), so that what a write read is still true when it commits: of two processes
onboarding one name, one succeeds and the other gets :class:`StoreConflict`.

:func:`~fairseq_speaker.service.store_copy.copy_speakers` copies one store's speakers into another
(``fairseq-speaker-store copy``).

This module is the SQLite store: its file opened, its tables made and upgraded, its transactions
(:class:`SpeakerStore`). Its parts: what the store raises (:mod:`~fairseq_speaker.service.store_errors`), where a
store is (:mod:`~fairseq_speaker.service.store_location`), the schema both databases share
(:mod:`~fairseq_speaker.service.store_schema`), the statements of both (reads, writes, the model ids:
:mod:`~fairseq_speaker.service.store_statements`) and the copy (:mod:`~fairseq_speaker.service.store_copy`).
"""

import contextlib
import os
import sqlite3
import threading
from typing import Iterator, Optional, Tuple

from fairseq_speaker.service.store_errors import StoreConflict, StoreDamaged, StoreError, StoreFileGone
from fairseq_speaker.service.store_location import hide_password
from fairseq_speaker.service.store_schema import (COLUMNS_2, DEFAULT_MODEL, LOOKS_INDEX, SCHEMA_VERSION,
                                                  UPGRADE_MODELS, log_lookalikes, upgrade_looks)
from fairseq_speaker.service.store_statements import StoreStatements, UnreadableGeneration

#: what this module gives, its own and the names it gave before its parts moved out (the tests')
__all__ = ["SpeakerStore", "StoreConflict", "StoreError", "hide_password"]

#: each model id's fingerprint, and the checkpoint it was first bound with (for messages)
_MODELS_TABLE = "CREATE TABLE IF NOT EXISTS models (id TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, made_for TEXT NOT NULL)"
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
{_MODELS_TABLE};
CREATE TABLE IF NOT EXISTS speakers (
    model TEXT NOT NULL,
    name TEXT NOT NULL,
    rows BLOB NOT NULL,
    pairs TEXT NOT NULL,
    sentences INTEGER NOT NULL,
    created TEXT NOT NULL,
    updated TEXT NOT NULL,
    version INTEGER NOT NULL,
    looks TEXT NOT NULL,
    PRIMARY KEY (model, name)
);
{LOOKS_INDEX};
"""
#: schema 1 to 2 in SQLite: the speakers keyed by (model, name), all of them the default model's; the fingerprint of
#: the store's one model moved from ``meta`` to ``models`` (the table ``models`` is made first)
_UPGRADE_1_TO_2 = [
    "ALTER TABLE speakers RENAME TO speakers_schema_1",
    "CREATE TABLE speakers (model TEXT NOT NULL, name TEXT NOT NULL, rows BLOB NOT NULL, pairs TEXT NOT NULL, "
    "sentences INTEGER NOT NULL, created TEXT NOT NULL, updated TEXT NOT NULL, version INTEGER NOT NULL, "
    "PRIMARY KEY (model, name))",
    f"INSERT INTO speakers ({COLUMNS_2}) SELECT '{DEFAULT_MODEL}', name, rows, pairs, sentences, created, updated, "
    "version FROM speakers_schema_1",
    "DROP TABLE speakers_schema_1",
]


def _identity(path: str) -> Optional[Tuple[int, int]]:
    """The device and inode of the file at ``path`` (None: no such file, or a path that names none, ``:memory:``)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return info.st_dev, info.st_ino


class SpeakerStore(StoreStatements):
    """The speakers of one SQLite file (see the module documentation). Safe to use from several threads.

    Its statements are those of PostgreSQL's store too (:class:`StoreStatements`): this class opens the file, makes
    and upgrades its tables, and begins its transactions."""

    #: the device and inode of the file opened (None: no file, as PostgreSQL's store, which derives from this one)
    _opened_file: Optional[Tuple[int, int]] = None

    def __init__(self, path: str, timeout: float = 10.0, create: bool = True, option: str = "--store"):
        """Open (or, with ``create``, make) the store at ``path``; ``timeout``: seconds a write waits for another
        process's; ``option`` names it in messages."""
        self.path, self.option = path, option
        where = f"{option} {path}"
        folder = os.path.dirname(os.path.abspath(path))
        if path != ":memory:" and not os.path.isdir(folder):
            raise StoreError(f"{where}: the folder {folder} does not exist")
        if os.path.isdir(path):  # "it is created if missing" was no advice to a store only read (copy --from)
            raise StoreError(f"{where} is a directory: give the path of a file"
                             + (" (it is created if missing)" if create else " (a speaker store's file)"))
        if os.path.exists(path) and not os.path.isfile(path):  # /dev/null was "not a speaker store (disk I/O error)"
            raise StoreError(f"{where} is not a regular file (a device, a pipe or a socket), which no store is: give "
                             f"the path of a file (it is created if missing)")
        if not create and (path == ":memory:" or not os.path.exists(path)):
            raise StoreError(f"{where}: no such file (the SQLite store to read)")
        self._lock = threading.Lock()
        self._closed = False
        try:
            self._db = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            raise StoreError(f"{where}: cannot be opened ({e})") from None
        try:
            mode = self._db.execute("PRAGMA journal_mode=WAL" if create else "PRAGMA journal_mode").fetchone()[0]
            self.wal = mode == "wal"
            self._db.execute("PRAGMA synchronous=FULL")  # in WAL mode NORMAL may lose the last commits on power loss
            with self._transaction(write=create) as db:
                tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                if tables and not {"meta", "speakers"} <= tables:  # another application's database: left alone
                    raise _NotAStore(f"it holds other tables ({', '.join(sorted(tables))})")
                if create and not tables:  # statement by statement: executescript would commit the transaction first
                    for statement in filter(str.strip, _SCHEMA.split(";")):
                        db.execute(statement)
                    db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
                    db.execute("INSERT OR IGNORE INTO meta VALUES ('generation', '0')")
                tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                if not {"meta", "speakers"} <= tables:
                    raise _NotAStore("it has no tables meta and speakers")
                row = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
                schema = row[0] if row else None
            if schema in ("1", "2"):
                schema = self._upgrade()
        except sqlite3.DatabaseError as e:
            self._db.close()
            if _is_sqlite(path) and not isinstance(e, _NotAStore):
                raise StoreDamaged(path, f"the file is damaged ({e})", skippable=False, option=option) from None
            advice = "give a new file name, or the store of this model" if create else "give a speaker store's file"
            raise StoreError(f"{where}: not a speaker store ({e}): {advice}") from None
        self._opened_file = _identity(path)
        self._opened_path = os.path.abspath(path)  # what the path named when opened, whatever the working folder is later
        self._check_schema(schema)

    def _upgrade(self) -> str:
        """Upgrade a store of schema 1 or 2 to this one's, in one transaction (another process may have done it
        first); the schema it then has. Names that look alike, which a store of schema 2 could hold, are logged."""
        with self._transaction(write=True) as db:
            schema = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0]
            if schema == "1":
                db.execute(_MODELS_TABLE)
                for statement in _UPGRADE_1_TO_2 + UPGRADE_MODELS:
                    db.execute(statement)
                schema = "2"
            twins = []
            if schema == "2":
                twins = upgrade_looks(db)
                schema = str(SCHEMA_VERSION)
        log_lookalikes(self.option, self.path, twins)
        return schema

    def _check_schema(self, schema: Optional[str]) -> None:
        """Refuse a store of a newer schema, or one whose records of its schema or of its writes (``meta``'s
        ``schema`` and ``generation``) are not whole numbers: nothing else in it could be trusted to mean what this
        version reads (they ended the service's start and ``copy`` in a traceback)."""
        problem = None
        if not (isinstance(schema, str) and schema.isascii() and schema.isdigit() and int(schema) >= 1):
            problem = f"its record of its schema (meta 'schema') is {schema!r}, not a schema's number (1, 2, ...)"
        else:
            try:
                self.generation()
            except UnreadableGeneration:
                problem = "its count of writes (meta 'generation') is missing or not a whole number"
        if problem is not None:
            self.close()
            raise StoreDamaged(self.path, problem, skippable=False, option=self.option)
        if int(schema) > SCHEMA_VERSION:
            self.close()
            raise StoreError(f"{self.option} {self.path}: written by a newer fairseq-speaker (store schema {schema}, "
                             f"this one reads {SCHEMA_VERSION}): upgrade fairseq-speaker")

    # -- transactions ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _transaction(self, write: bool) -> Iterator[sqlite3.Connection]:
        """One transaction: a write takes the file's write lock at once (``BEGIN IMMEDIATE``), so that what it
        reads is still true when it commits; a read sees one snapshot."""
        with self._lock:
            if write:
                self._check_same_file()
            self._db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _check_same_file(self) -> None:
        """Raise :class:`StoreFileGone` where the store's path no longer names the file opened (removed, or
        replaced by another: writes went on into the unlinked file, acknowledged, and were lost at the restart)."""
        if self._opened_file is not None and _identity(self._opened_path) != self._opened_file:
            raise StoreFileGone(f"the store file {self.path} was removed or replaced while the service ran: "
                                   f"nothing more is written to the file opened; stop the service, restore the file "
                                   f"(from a backup, without its -wal and -shm files), and start again")

    def ready(self) -> None:
        """:meth:`StoreStatements.ready`, and the store's path still the file opened."""
        self._check_same_file()
        super().ready()

    def close(self) -> None:
        """Close the file (safe to call twice)."""
        with self._lock:
            if not self._closed:
                self._db.close()
                self._closed = True


class _NotAStore(sqlite3.DatabaseError):
    """An SQLite file that is whole but holds no speaker store."""


def _is_sqlite(path: str) -> bool:
    """Whether ``path`` begins as an SQLite file does (so that an error reading it means damage, not another kind of
    file)."""
    try:
        with open(path, "rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False
