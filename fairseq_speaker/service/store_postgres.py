"""The speaker store in a PostgreSQL database: replicas on many machines sharing their speakers.

The same store as the SQLite one (:class:`~fairseq_speaker.service.store.SpeakerStore`, whose statements it runs
and whose promises it keeps), in a server database reached by a libpq URL (``postgresql://USER@HOST/DATABASE``;
the password best in ``PGPASSWORD`` or ``~/.pgpass``, not on a command line others can read). The driver is
psycopg 3 (``pip install 'fairseq-speaker[postgres]'``).

- **Where.** Its tables ``meta``, ``models`` and ``speakers`` are in the schema ``fairseq_speaker`` of the
  database, made on first use (under an advisory lock, so that replicas starting together make them once, and upgrade
  a store of schema 1 once): nothing of another application's is touched, and one database holds one store.
- **Durable before acknowledged.** Every write is one transaction whose COMMIT returns once the server has flushed
  it (``synchronous_commit`` is raised to ``on`` for the store's connection where the server has it ``off``; a
  server running with ``fsync = off`` is logged as a warning: it may lose commits in a power cut).
- **One write at a time.** A write transaction first locks the row of the store's generation (``SELECT ... FOR
  UPDATE``): writes by any replica follow one another, as SQLite's ``BEGIN IMMEDIATE`` makes them, and each one's
  statements see every write committed before it (READ COMMITTED). Of two replicas onboarding one name, one commits
  and the other finds the name taken (:class:`~fairseq_speaker.service.store_errors.StoreConflict`). A read is one
  REPEATABLE READ snapshot; :meth:`generation` is one statement.
- **A server that fails.** One connection per store, its use serialized as the SQLite connection's is; a
  connection the server dropped is opened again at the next call. A server that cannot be reached, or a statement
  or lock that waits past the timeout (``lock_timeout`` and ``statement_timeout``, where the server sets none),
  raises :class:`~fairseq_speaker.service.store_errors.StoreUnavailable` (the service answers 503 and the next request
  tries again); at the start it is a :class:`~fairseq_speaker.service.store_errors.StoreError` saying what to check.
"""

import contextlib
import logging
import threading
from typing import Iterator

from fairseq_speaker.service.store import SpeakerStore
from fairseq_speaker.service.store_errors import StoreError, StoreUnavailable
from fairseq_speaker.service.store_location import StoreLocation, one_line, postgres_driver
from fairseq_speaker.service.store_schema import (DEFAULT_MODEL, LOOKS_INDEX, SCHEMA_VERSION, UPGRADE_MODELS,
                                                  log_lookalikes, upgrade_looks)

logger = logging.getLogger(__name__)

#: the PostgreSQL schema (namespace) holding the store's tables
SCHEMA = "fairseq_speaker"
#: the key of the advisory lock under which the tables are made ("fssp")
_SETUP_LOCK = 0x66737370
_TABLES = {
    "meta": "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "models": "CREATE TABLE models (id TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, made_for TEXT NOT NULL)",
    "speakers": "CREATE TABLE speakers (model TEXT NOT NULL, name TEXT NOT NULL, rows BYTEA NOT NULL, pairs TEXT NOT "
                "NULL, sentences INTEGER NOT NULL, created TEXT NOT NULL, updated TEXT NOT NULL, version BIGINT NOT "
                "NULL, looks TEXT NOT NULL, PRIMARY KEY (model, name))",
}
#: the tables without which a schema is no store (a store of schema 1 has no ``models``)
_CORE = ("meta", "speakers")
#: schema 1 to 2: the speakers keyed by (model, name), all of them the default model's (then, as in SQLite, the
#: fingerprint moved to the table ``models``: :data:`~fairseq_speaker.service.store_schema.UPGRADE_MODELS`)
_UPGRADE_1_TO_2 = [
    f"ALTER TABLE speakers ADD COLUMN model TEXT NOT NULL DEFAULT '{DEFAULT_MODEL}'",
    "ALTER TABLE speakers DROP CONSTRAINT speakers_pkey",
    "ALTER TABLE speakers ADD PRIMARY KEY (model, name)",
    "ALTER TABLE speakers ALTER COLUMN model DROP DEFAULT",
]

#: what to check, by a piece of libpq's or the server's message
_ADVICE = [
    (("password authentication failed", "no password supplied", "authentication failed"),
     "the server refused the user or the password: give the right ones (the password best in PGPASSWORD or "
     "~/.pgpass, not in the URL, which other users of this machine can see in the process list)"),
    (("does not exist",), "name a database and a user the server has (createdb and createuser make them)"),
    (("permission denied",), "the user may not make or use the store's tables: grant it CREATE on the database (for "
                             f"the schema {SCHEMA}) or use the user that made them"),
    (("connection refused", "timeout expired", "timed out", "could not translate host name", "failed to resolve host",
      "no such file or directory", "network is unreachable", "no route to host"),
     "is the server running, and reachable from this machine at that host and port?"),
]


def _advice(message: str) -> str:
    lowered = message.lower()
    for pieces, advice in _ADVICE:
        if any(piece in lowered for piece in pieces):
            return advice
    return "check the URL (postgresql://USER@HOST[:PORT]/DATABASE) and the server's log"


class _Server:
    """One connection to the server, opened again once it broke; what goes wrong is a :class:`StoreUnavailable`.
    Its ``execute`` takes the SQLite store's statements (``?`` for each parameter). Not thread-safe: the store's lock
    guards it."""

    def __init__(self, location: StoreLocation, timeout: float):
        self.psycopg = postgres_driver(shown=location.shown)
        self.location, self.timeout = location, timeout
        self.connection = None

    def _connect(self):
        psycopg = self.psycopg
        given = psycopg.conninfo.conninfo_to_dict(self.location.target)
        defaults = {"connect_timeout": str(max(2, round(self.timeout))), "application_name": "fairseq-speaker"}
        try:
            connection = psycopg.connect(self.location.target, autocommit=True,
                                         **{k: v for k, v in defaults.items() if k not in given})
        except psycopg.Error as e:
            problem = one_line(e)
            problem = problem[len("connection failed: "):] if problem.startswith("connection failed: ") else problem
            raise StoreUnavailable(f"cannot connect to the PostgreSQL server ({problem})") from None
        try:
            connection.execute(f"SET search_path TO {SCHEMA}")
            lock, statement, synchronous, fsync = connection.execute(
                "SELECT current_setting('lock_timeout'), current_setting('statement_timeout'), "
                "current_setting('synchronous_commit'), current_setting('fsync')").fetchone()
            wait = f"{round(1000 * self.timeout)}ms"
            if lock == "0":  # a write waits this long for another's, then fails (503) instead of hanging
                connection.execute(f"SET lock_timeout TO '{wait}'")
            if statement == "0":
                connection.execute(f"SET statement_timeout TO '{wait}'")
            if synchronous == "off":  # an acknowledged write must be on the server's disk
                connection.execute("SET synchronous_commit TO on")
            if fsync == "off":
                logger.warning(f"--store {self.location.shown}: the server runs with fsync = off: a speaker it "
                               f"acknowledged may be lost if the server's machine loses power")
        except psycopg.Error as e:
            connection.close()
            raise StoreUnavailable(f"PostgreSQL: {one_line(e)}") from None
        return connection

    def execute(self, statement: str, parameters=()):
        """Run one of the SQLite store's statements; the cursor, to fetch its rows."""
        if self.connection is None or self.connection.closed or self.connection.broken:
            self.close()
            self.connection = self._connect()
        try:
            return self.connection.execute(statement.replace("?", "%s"), parameters or None)
        except self.psycopg.Error as e:
            if self.connection.broken or isinstance(e, self.psycopg.OperationalError):
                self.close()  # opened again at the next call
            raise StoreUnavailable(f"PostgreSQL: {one_line(e)}") from None

    def rollback(self) -> None:
        """End a failed transaction (a broken connection has none left: it is opened again at the next call)."""
        with contextlib.suppress(StoreUnavailable):
            if self.connection is not None and not self.connection.closed:
                self.execute("ROLLBACK")

    def close(self) -> None:
        if self.connection is not None:
            with contextlib.suppress(self.psycopg.Error):
                self.connection.close()
            self.connection = None


class PostgresSpeakerStore(SpeakerStore):
    """The speakers of one PostgreSQL database (see the module documentation). Safe to use from several threads."""

    def __init__(self, location: StoreLocation, timeout: float = 10.0, create: bool = True, option: str = "--store"):
        """Connect to the store at ``location`` (see :func:`~fairseq_speaker.service.store_location.store_location`)
        and make its tables if missing (``create``; else a missing store is refused); ``timeout``: seconds to connect,
        and a write waits for another's."""
        self.path, self.option = location.shown, option
        self.wal = False
        self._lock = threading.Lock()
        self._closed = False
        self._db = _Server(location, timeout)
        where = f"{option} {location.shown}"
        try:
            schema = self._setup(create)
        except StoreUnavailable as e:
            self._db.close()
            problem = str(e)
            raise StoreError(f"{where}: {problem}: {_advice(problem)}") from None
        except StoreError:
            self._db.close()
            raise
        if schema is None:
            self._db.close()
            raise StoreError(f"{where}: holds no speaker store (no tables meta and speakers in the schema {SCHEMA}): "
                             f"give the database a service wrote to")
        self._check_schema(schema)

    def _setup(self, create: bool):
        """The store's schema version, its tables made first if missing (``create``), a store of schema 1 upgraded;
        None if missing otherwise."""
        db = self._db
        with self._lock:
            db.execute("BEGIN")
            try:
                db.execute("SELECT pg_advisory_xact_lock(?)", (_SETUP_LOCK,))
                missing = [table for table in _TABLES
                           if db.execute("SELECT to_regclass(?)", (f"{SCHEMA}.{table}",)).fetchone()[0] is None]
                if any(table in missing for table in _CORE) and not create:
                    db.execute("ROLLBACK")
                    return None
                if all(table in missing for table in _CORE):
                    # what exists is not made again: CREATE ... IF NOT EXISTS needs the privilege even then
                    if db.execute("SELECT 1 FROM pg_namespace WHERE nspname = ?", (SCHEMA,)).fetchone() is None:
                        db.execute(f"CREATE SCHEMA {SCHEMA}")
                    for table in missing:
                        db.execute(_TABLES[table])
                    db.execute(LOOKS_INDEX)
                    db.execute("INSERT INTO meta VALUES ('schema', ?) ON CONFLICT DO NOTHING", (str(SCHEMA_VERSION),))
                    db.execute("INSERT INTO meta VALUES ('generation', '0') ON CONFLICT DO NOTHING")
                elif any(table in missing for table in _CORE):
                    raise StoreError(f"{self.option} {self.path}: the schema {SCHEMA} has the table(s) "
                                     f"{', '.join(t for t in _CORE if t not in missing)} of a speaker store but not "
                                     f"{', '.join(t for t in _CORE if t in missing)}: give another database")
                row = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
                generation = db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
                if row is None or generation is None:
                    raise StoreError(f"{self.option} {self.path}: the schema {SCHEMA} has tables meta and speakers "
                                     f"that are not a speaker store's (no schema version or generation): give another "
                                     f"database")
                if row[0] == "1":
                    if "models" in missing:
                        db.execute(_TABLES["models"])
                    for statement in _UPGRADE_1_TO_2 + UPGRADE_MODELS:
                        db.execute(statement)
                    row = ("2",)
                twins = []
                if row[0] == "2":
                    twins = upgrade_looks(db)
                    row = (str(SCHEMA_VERSION),)
            except BaseException:
                db.rollback()
                raise
            db.execute("COMMIT")
        log_lookalikes(self.option, self.path, twins)
        return row[0]

    @contextlib.contextmanager
    def _transaction(self, write: bool) -> Iterator[_Server]:
        """One transaction: a write first locks the generation's row, so that writes follow one another and what a
        write reads is still true when it commits; a read sees one snapshot."""
        with self._lock:
            db = self._db
            db.execute("BEGIN" if write else "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            try:
                if write:
                    db.execute("SELECT value FROM meta WHERE key = 'generation' FOR UPDATE")
                yield db
            except BaseException:
                db.rollback()
                raise
            db.execute("COMMIT")

    def readable_versions(self, model: str = DEFAULT_MODEL):
        """As :meth:`versions` (a server's records are read whole or not at all), with no broken speakers."""
        generation, versions = self.versions(model)
        return generation, versions, {}

    def close(self) -> None:
        """Close the connection (safe to call twice)."""
        with self._lock:
            if not self._closed:
                self._db.close()
                self._closed = True
