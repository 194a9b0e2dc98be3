"""The speaker store: the durable record of the speakers a service onboarded, in SQLite or PostgreSQL.

One store holds, for each onboarded speaker, its rows of the speaker bias (the bytes of the ``.npz`` file
:meth:`SpeakerTranslator.export_speakers` would write for it alone), the sentence pairs it was fitted on,
their count, and when it was created and last changed. A write is one transaction, committed (SQLite:
``synchronous = FULL``; PostgreSQL: a synchronous commit) before the method returns: a speaker the service
acknowledged survives a crash or a power cut.

A store serves several models, each under an id (``--model ID=CHECKPOINT``; ``default`` for the checkpoint a
service is started with alone): a speaker is the pair (model id, name), so that one name onboarded for two models is
two speakers, each with its own rows and sentences. Each model id is tied to one model by a fingerprint: what makes
speaker rows portable between models (:func:`fairseq_speaker.onboarding.vectors.describe`: the variant, its row
shapes, the target dictionary's hash and size, and a SHA-1 of the bias's shared parameters). A model with another
fingerprint is refused under that id: its rows would mean something else there (a reload of the id refits them on
the new model from their sentences, and ties the id to it: :meth:`SpeakerStore.rebind`).

Schema 2 keys speakers by (model id, name) and keeps each id's fingerprint in a table ``models``; a store of schema 1
(one model, written by fairseq-speaker 0.8 and before) is upgraded when it is first opened, in one transaction: its
speakers become those of the model ``default``. An older fairseq-speaker then refuses the store (a newer schema).

Where it is (``--store``, :func:`store_location`): a file, or ``sqlite:///FILE``, is an SQLite store (the
embedded default, :class:`SpeakerStore`), which several processes on one machine may share (WAL mode; not on a
network file system); ``postgresql://USER@HOST/DATABASE`` is a PostgreSQL store
(:class:`~fairseq_speaker.service.store_postgres.PostgresSpeakerStore`, with the ``postgres`` extra), which
replicas on many machines may share. Every write bumps a store-wide ``generation`` and stamps the speaker with
it (its ``version``), so that a process learns with one read whether anything changed since it last looked,
and which speakers did. Writes are serialized by the database (SQLite's ``BEGIN IMMEDIATE``, a row lock on the
generation in PostgreSQL), so that what a write read is still true when it commits: of two processes
onboarding one name, one succeeds and the other gets :class:`StoreConflict`.

:func:`copy_speakers` copies one store's speakers into another (``fairseq-speaker-store copy``).
"""

import contextlib
import datetime
import json
import os
import re
import sqlite3
import threading
import urllib.parse
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from fairseq_speaker.data.speaker_dictionary import new_label_problem
from fairseq_speaker.errors import UserError

SCHEMA_VERSION = 2
#: the id of the model a service serves when it is started with one checkpoint (and of every speaker of a store of
#: schema 1)
DEFAULT_MODEL = "default"

#: the keys of :func:`~fairseq_speaker.onboarding.vectors.describe` that tie rows to a model
FINGERPRINT_KEYS = ("variant_spelling", "row_shapes", "target_dictionary_hash", "target_dictionary_size",
                    "shared_sha1")

#: the URL schemes of each kind of store (libpq accepts both spellings of PostgreSQL's)
SQLITE_SCHEMES = ("sqlite",)
POSTGRES_SCHEMES = ("postgresql", "postgres")
#: what --store takes, for messages
STORE_FORMS = ("an SQLite file (speakers.db, or sqlite:///speakers.db; sqlite:////abs/path.db) or a PostgreSQL "
               "database (postgresql://USER@HOST[:PORT]/DATABASE)")

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
    PRIMARY KEY (model, name)
);
"""
#: the columns of ``speakers``, in the order :meth:`SpeakerStore._write` gives them
_COLUMNS = "model, name, rows, pairs, sentences, created, updated, version"
#: schema 1 to 2 in SQLite: the speakers keyed by (model, name), all of them the default model's; the fingerprint of
#: the store's one model moved from ``meta`` to ``models`` (the table ``models`` is made first)
_UPGRADE_1_TO_2 = [
    "ALTER TABLE speakers RENAME TO speakers_schema_1",
    "CREATE TABLE speakers (model TEXT NOT NULL, name TEXT NOT NULL, rows BLOB NOT NULL, pairs TEXT NOT NULL, "
    "sentences INTEGER NOT NULL, created TEXT NOT NULL, updated TEXT NOT NULL, version INTEGER NOT NULL, "
    "PRIMARY KEY (model, name))",
    f"INSERT INTO speakers ({_COLUMNS}) SELECT '{DEFAULT_MODEL}', name, rows, pairs, sentences, created, updated, "
    "version FROM speakers_schema_1",
    "DROP TABLE speakers_schema_1",
]
#: schema 1 to 2 in both databases, once the speakers have their model: the fingerprint moved to ``models``
UPGRADE_MODELS = [
    f"INSERT INTO models (id, fingerprint, made_for) SELECT '{DEFAULT_MODEL}', f.value, COALESCE((SELECT value FROM "
    "meta WHERE key = 'model'), 'unknown') FROM meta f WHERE f.key = 'fingerprint'",
    "DELETE FROM meta WHERE key IN ('fingerprint', 'model')",
    "UPDATE meta SET value = '2' WHERE key = 'schema'",
]


class StoreError(UserError):
    """A store that cannot be used as asked (unreadable, of another model or a newer schema); the message says why."""


class StoreModelMismatch(StoreError):
    """A model id of the store tied to a model of another fingerprint than the one given (:meth:`SpeakerStore.bind`)."""


class StoreDamaged(StoreError):
    """A store whose file, or one speaker's record in it, cannot be read: the message names the file, what is wrong
    and how to recover."""

    def __init__(self, path: str, what: str, speaker: Optional[str] = None, skippable: bool = True):
        if path.startswith(tuple(f"{scheme}://" for scheme in POSTGRES_SCHEMES)):
            recover = "restore the database from a backup (pg_dump makes one of a live store)"
        else:
            recover = (f"restore {path} from a backup (sqlite3 FILE '.backup COPY' makes one of a live store), check "
                       f"it with sqlite3 {path} 'PRAGMA integrity_check'")
        if skippable:
            recover += (", or start fairseq-speaker-serve with --skip-broken-speakers to serve without the speakers "
                        "whose records cannot be read (it logs their names; their sentences are lost unless restored)")
        else:
            recover += (", or start with a new --store file or database (the onboarded speakers are then lost unless "
                        "restored)")
        super().__init__(f"--store {path}: {what}. To recover: {recover}")
        self.speaker = speaker
        self.what = what


class StoreUnavailable(sqlite3.OperationalError):
    """A database server that cannot be reached or does not answer now (down, unreachable, a lock or a statement that
    timed out): the message says which and why. It is an :class:`sqlite3.OperationalError`, the SQLite store's error
    of a file that is busy or locked, so that whoever uses a store treats both alike: retry later (the service
    answers 503 ``store_unavailable``), never as damage."""


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


def _of_model(model: str) -> str:
    """`` (model 'en-de')`` for a model other than the default, for messages."""
    return "" if model == DEFAULT_MODEL else f" (model {model!r})"


@dataclass(frozen=True)
class StoreLocation:
    """Where a store is, as ``--store`` names it (see :func:`store_location`)."""

    #: ``sqlite`` or ``postgresql``
    kind: str
    #: the SQLite file (or ``:memory:``), or the PostgreSQL URL as given (password included)
    target: str
    #: how messages and logs name it: the file, or the URL without its password
    shown: str


def fingerprint_of(description: Dict) -> Dict:
    """The part of a bias's :func:`~fairseq_speaker.onboarding.vectors.describe` that ties rows to a model."""
    return {key: description.get(key) for key in FINGERPRINT_KEYS}


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _fingerprint_text(fp: Dict) -> str:
    return (f"a {fp.get('variant_spelling')!r} speaker bias (rows {fp.get('row_shapes')}), a target dictionary of "
            f"{fp.get('target_dictionary_size')} words (hash {str(fp.get('target_dictionary_hash'))[:12]}), shared "
            f"speaker parameters {str(fp.get('shared_sha1'))[:12]}")


# -- where a store is ------------------------------------------------------------------------------------------


def hide_password(url: str) -> str:
    """``url`` with the password it holds (``user:PASSWORD@`` or ``password=...``) written ``***``."""
    url = re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://[^/?#@:]*):[^/?#@]*@", r"\1:***@", url)
    return re.sub(r"([?&]password=)[^&#]*", r"\1***", url)


def store_location(text: str, option: str = "--store") -> StoreLocation:
    """Where ``text`` (the value of ``option``) says the store is, checked without opening it: a file path or
    ``sqlite:///FILE`` (three slashes before a relative path, four before an absolute one) for SQLite;
    ``postgresql://...`` or ``postgres://...`` (libpq's URL, whose parameters it checks) for PostgreSQL, which needs
    the driver (the ``postgres`` extra). Raises :class:`StoreError` naming ``option`` and the forms it takes."""
    if not isinstance(text, str) or not text.strip():
        raise StoreError(f"{option} is empty: give {STORE_FORMS}")
    scheme = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://", text)
    if scheme is None:
        slashless = re.match(r"^(sqlite|postgresql|postgres):(?!//)", text, re.IGNORECASE)
        if slashless:
            raise StoreError(f"{option} {hide_password(text)}: a URL is written {slashless.group(1)}://... (two "
                             f"slashes after the colon): give {STORE_FORMS}")
        return StoreLocation("sqlite", text, text)
    name = scheme.group(1).lower()
    if name in SQLITE_SCHEMES:
        rest = text[scheme.end():]
        if not rest.startswith("/"):
            raise StoreError(f"{option} {text}: an SQLite store is a file on this machine, written sqlite:///FILE (no "
                             f"host: three slashes before a relative path, four before an absolute one)")
        path = rest[1:]
        if not path:
            raise StoreError(f"{option} {text}: no file named: write sqlite:///speakers.db (relative) or "
                             f"sqlite:////abs/path/speakers.db")
        if "?" in path or "#" in path:  # ?mode=memory became part of a file's name, and the store was a file
            raise StoreError(f"{option} {text}: an SQLite store URL takes no parameters (?...) or fragment (#...): "
                             f"the store is the file, opened as the service opens it; write sqlite:///FILE")
        return StoreLocation("sqlite", path, path)
    shown = hide_password(text)
    if name not in POSTGRES_SCHEMES:
        raise StoreError(f"{option} {shown}: {scheme.group(1)}:// is not a kind of store this service knows: give "
                         f"{STORE_FORMS}")
    psycopg = postgres_driver(option, shown)
    try:
        params = psycopg.conninfo.conninfo_to_dict(text)
    except psycopg.Error as e:
        raise StoreError(f"{option} {shown}: not a PostgreSQL URL ({one_line(e)}): write "
                         f"postgresql://USER@HOST[:PORT]/DATABASE, with libpq's parameters after '?'") from None
    for port in str(params.get("port") or "").split(","):
        if port and not (port.isdigit() and 1 <= int(port) <= 65535):
            raise StoreError(f"{option} {shown}: the port {port!r} is not a number between 1 and 65535")
    return StoreLocation("postgresql", text, shown)


def in_memory(location: StoreLocation) -> bool:
    """Whether SQLite keeps the store of ``location`` nowhere once it is closed: ``:memory:`` (``sqlite:///:memory:``),
    or an SQLite URI filename (``file:...``, which SQLite reads as a URI) naming ``:memory:``, no file, or
    ``mode=memory``."""
    if location.kind != "sqlite":
        return False
    if location.target == ":memory:":
        return True
    if not location.target.startswith("file:"):
        return False
    path, _, query = location.target[len("file:"):].partition("#")[0].partition("?")
    modes = [value for key, value in urllib.parse.parse_qsl(query, keep_blank_values=True) if key == "mode"]
    return path in ("", ":memory:") or "memory" in modes


def durable_location(text: str, option: str = "--store", lost: str = "when the process ends") -> StoreLocation:
    """:func:`store_location`, refusing a store SQLite keeps in memory (:func:`in_memory`): what is written there is
    gone ``lost``, while the command would say it was kept."""
    location = store_location(text, option)
    if in_memory(location):
        raise StoreError(f"{option} {text} is an SQLite database in memory, gone {lost}: give a file (speakers.db, or "
                         f"sqlite:///speakers.db) or a PostgreSQL database (postgresql://USER@HOST[:PORT]/DATABASE)")
    return location


def postgres_driver(option: str = "--store", shown: str = "postgresql://..."):
    """The PostgreSQL driver (psycopg 3), or a :class:`StoreError` saying how to install it."""
    try:
        import psycopg
    except ImportError as e:
        raise StoreError(f"{option} {shown}: a PostgreSQL store needs the driver psycopg 3, which is not installed "
                         f"({e}): pip install 'fairseq-speaker[postgres]'") from None
    return psycopg


def one_line(error: BaseException) -> str:
    """An error's message on one line, its spaces single (libpq's run over several lines, with double spaces)."""
    return " ".join(str(error).split())


# -- SQLite ----------------------------------------------------------------------------------------------------


class SpeakerStore:
    """The speakers of one SQLite file (see the module documentation). Safe to use from several threads.

    The statements of the methods below are those of PostgreSQL too (its store changes how a transaction begins and
    how the tables are made): one set of rules for both."""

    def __init__(self, path: str, timeout: float = 10.0, create: bool = True, option: str = "--store"):
        """Open (or, with ``create``, make) the store at ``path``; ``timeout``: seconds a write waits for another
        process's; ``option`` names it in messages."""
        self.path, self.option = path, option
        where = f"{option} {path}"
        folder = os.path.dirname(os.path.abspath(path))
        if path != ":memory:" and not os.path.isdir(folder):
            raise StoreError(f"{where}: the folder {folder} does not exist")
        if os.path.isdir(path):
            raise StoreError(f"{where} is a directory: give the path of a file (it is created if missing)")
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
                if create:  # statement by statement: executescript would commit the transaction first
                    for statement in filter(str.strip, _SCHEMA.split(";")):
                        db.execute(statement)
                    db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
                    db.execute("INSERT OR IGNORE INTO meta VALUES ('generation', '0')")
                tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                if not {"meta", "speakers"} <= tables:
                    raise _NotAStore("it has no tables meta and speakers")
                row = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
                schema = row[0] if row else None
            if schema == "1":
                schema = self._upgrade()
        except sqlite3.DatabaseError as e:
            self._db.close()
            if _is_sqlite(path) and not isinstance(e, _NotAStore):
                raise StoreDamaged(path, f"the file is damaged ({e})", skippable=False) from None
            advice = "give a new file name, or the store of this model" if create else "give a speaker store's file"
            raise StoreError(f"{where}: not a speaker store ({e}): {advice}") from None
        self._check_schema(schema)

    def _upgrade(self) -> str:
        """Upgrade a store of schema 1 to this one's, in one transaction (another process may have done it first);
        the schema it then has."""
        with self._transaction(write=True) as db:
            schema = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0]
            if schema == "1":
                db.execute(_MODELS_TABLE)
                for statement in _UPGRADE_1_TO_2 + UPGRADE_MODELS:
                    db.execute(statement)
                schema = str(SCHEMA_VERSION)
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
            except (ValueError, TypeError, IndexError):
                problem = "its count of writes (meta 'generation') is missing or not a whole number"
        if problem is not None:
            self.close()
            raise StoreDamaged(self.path, problem, skippable=False)
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
            self._db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _next_version(self, db) -> int:
        db.execute("UPDATE meta SET value = CAST(CAST(value AS BIGINT) + 1 AS TEXT) WHERE key = 'generation'")
        return int(db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])

    # -- the models -------------------------------------------------------------------------------------
    def bind(self, fingerprint: Dict, made_for: str = "the model", *, model: str = DEFAULT_MODEL) -> None:
        """Tie the model id ``model`` to the model of ``fingerprint`` (see :func:`fingerprint_of`) where the store
        has no such id yet, or check that it is tied to that model; ``made_for`` names the model (its checkpoint) in
        messages."""
        with self._transaction(write=True) as db:
            row = db.execute("SELECT fingerprint, made_for FROM models WHERE id = ?", (model,)).fetchone()
            if row is None:
                db.execute("INSERT INTO models (id, fingerprint, made_for) VALUES (?, ?, ?)",
                           (model, json.dumps(fingerprint, sort_keys=True), made_for))
                return
        theirs = self._parsed_fingerprint(row[0], model)
        if theirs != fingerprint:
            differ = [key for key in FINGERPRINT_KEYS if theirs.get(key) != fingerprint.get(key)]
            raise StoreModelMismatch(
                f"{self.option} {self.path} holds the speakers{_of_model(model)} of another model ({row[1]}): "
                f"{_fingerprint_text(theirs)}; {made_for} has {_fingerprint_text(fingerprint)} (differs in: "
                f"{', '.join(differ)}). Speaker rows only mean something in the model they were fitted on: serve that "
                f"model with this store, or give {made_for} a store of its own (a new --store file or database)"
                + ("" if model == DEFAULT_MODEL else f" or another model id; a reload of model {model!r} (POST "
                   f"/models/{model}/reload) refits its speakers on the new checkpoint"))

    def _parsed_fingerprint(self, text: str, model: str) -> Dict:
        try:
            theirs = json.loads(text)
            if not isinstance(theirs, dict):
                raise ValueError(f"a {type(theirs).__name__}, not an object")
        except ValueError as e:
            raise StoreDamaged(self.path, f"the record of the model it was made for{_of_model(model)} (its "
                               f"fingerprint) is not readable ({e})", skippable=False) from None
        return theirs

    def fingerprint(self, model: str = DEFAULT_MODEL) -> Optional[Dict]:
        """The fingerprint of the model ``model`` is tied to, or None while the store has no such id."""
        with self._transaction(write=False) as db:
            row = db.execute("SELECT fingerprint FROM models WHERE id = ?", (model,)).fetchone()
        return self._parsed_fingerprint(row[0], model) if row else None

    def made_for(self, model: str = DEFAULT_MODEL) -> Optional[str]:
        """The checkpoint the id ``model`` was tied to, as the service that tied it named it, or None."""
        with self._transaction(write=False) as db:
            row = db.execute("SELECT made_for FROM models WHERE id = ?", (model,)).fetchone()
        return row[0] if row else None

    def models(self) -> List[str]:
        """The model ids the store has, in the order of their names."""
        with self._transaction(write=False) as db:
            return [name for (name,) in db.execute("SELECT id FROM models ORDER BY id")]

    def rebind(self, model: str, fingerprint: Dict, made_for: str, rows: Dict[str, bytes],
               versions: Dict[str, int]) -> Dict[str, StoredSpeaker]:
        """Tie ``model`` to the model of ``fingerprint`` and give its speakers the ``rows`` fitted on it (name ->
        rows), in one transaction: what a reload to a checkpoint of another fingerprint stores, its speakers refitted
        from their sentences. ``versions`` are the speakers' versions the rows were fitted from: if the model's
        speakers are no longer those (another process wrote one meanwhile), :class:`StoreConflict` and nothing is
        written. Returns the speakers as stored (without rows and pairs)."""
        now = _now()
        with self._transaction(write=True) as db:
            current = dict(db.execute("SELECT name, version FROM speakers WHERE model = ?", (model,)))
            if current != versions:
                raise StoreConflict("changed", f"the speakers of model {model!r} changed while they were refitted (by "
                                    f"another process)")
            version = self._next_version(db)
            db.execute("INSERT INTO models (id, fingerprint, made_for) VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE "
                       "SET fingerprint = excluded.fingerprint, made_for = excluded.made_for",
                       (model, json.dumps(fingerprint, sort_keys=True), made_for))
            for name, blob in rows.items():
                db.execute("UPDATE speakers SET rows = ?, updated = ?, version = ? WHERE model = ? AND name = ?",
                           (sqlite3.Binary(blob), now, version, model, name))
            stored = db.execute("SELECT name, sentences, created, updated, version FROM speakers WHERE model = ?",
                                (model,)).fetchall()
        return {row[0]: _speaker(row, self.path, model) for row in stored}

    # -- reading ----------------------------------------------------------------------------------------
    def generation(self) -> int:
        """A number that grows with every committed write, by any process, to any model's speakers. (One statement,
        read in a transaction of its own: every translation request asks, and a BEGIN and a COMMIT around it would
        treble the cost.)"""
        with self._lock:
            return int(self._db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchall()[0][0])

    def versions(self, model: str = DEFAULT_MODEL) -> Tuple[int, Dict[str, int]]:
        """The generation and each speaker's version, of the model ``model``, of one snapshot."""
        with self._transaction(write=False) as db:
            generation = int(db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])
            return generation, dict(db.execute("SELECT name, version FROM speakers WHERE model = ?", (model,)))

    def readable_versions(self, model: str = DEFAULT_MODEL) -> Tuple[int, Dict[str, int], Dict[str, str]]:
        """As :meth:`versions`, each speaker read alone: also the speakers whose record cannot be read, with why (for
        ``--skip-broken-speakers``, where :meth:`versions` fails on a damaged file). Not one snapshot: each statement
        is a transaction of its own (a transaction that met a damaged page cannot be committed)."""
        with self._lock:
            db = self._db
            generation = int(db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])
            names = [name for (name,) in db.execute("SELECT name FROM speakers INDEXED BY sqlite_autoindex_speakers_1 "
                                                    "WHERE model = ?", (model,))]
            versions, broken = {}, {}
            for name in names:
                try:
                    row = db.execute("SELECT version FROM speakers WHERE model = ? AND name = ?",
                                     (model, name)).fetchone()
                    versions[name] = int(row[0])
                except sqlite3.Error as e:
                    if not _damage(e):
                        raise
                    broken[name] = f"its record cannot be read ({e})"
        return generation, versions, broken

    def get(self, name: str, contents: bool = True, model: str = DEFAULT_MODEL) -> Optional[StoredSpeaker]:
        """The speaker ``name`` of ``model`` (with its rows and sentence pairs if ``contents``), or None. Raises
        :class:`StoreDamaged` for a record that cannot be read."""
        columns = "name, sentences, created, updated, version" + (", rows, pairs" if contents else "")
        try:
            with self._transaction(write=False) as db:
                row = db.execute(f"SELECT {columns} FROM speakers WHERE model = ? AND name = ?",
                                 (model, name)).fetchone()
        except sqlite3.Error as e:
            if not _damage(e):
                raise
            raise StoreDamaged(self.path, f"the record of speaker {speaker_text(model, name)} cannot be read ({e})",
                               name) from None
        return _speaker(row, self.path, model) if row else None

    def speakers(self, model: str = DEFAULT_MODEL) -> List[StoredSpeaker]:
        """Every speaker of ``model``, without rows and sentences, oldest first (in a damaged file: those that can be
        read)."""
        columns = "name, sentences, created, updated, version"
        try:
            with self._transaction(write=False) as db:
                rows = db.execute(f"SELECT {columns} FROM speakers WHERE model = ? ORDER BY created, name",
                                  (model,)).fetchall()
        except sqlite3.Error as e:
            if not _damage(e):
                raise
            rows = sorted(self._readable_rows(columns, model), key=lambda row: (row[2], row[0]))
        return [_speaker(row, self.path, model) for row in rows]

    def records(self) -> List[StoredSpeaker]:
        """Every speaker of every model with its rows and sentence pairs, by model, oldest first, of one snapshot
        (what a copy reads). Raises :class:`StoreDamaged` for a record that cannot be read."""
        with self._transaction(write=False) as db:
            rows = db.execute("SELECT name, sentences, created, updated, version, rows, pairs, model FROM speakers "
                              "ORDER BY model, created, name").fetchall()
        return [_speaker(row[:7], self.path, row[7]) for row in rows]

    def _readable_rows(self, columns: str, model: str) -> List[tuple]:
        """``columns`` of each speaker of ``model`` whose record can be read, one statement each (see
        :meth:`readable_versions`)."""
        rows = []
        with self._lock:
            names = self._db.execute("SELECT name FROM speakers INDEXED BY sqlite_autoindex_speakers_1 WHERE model = ?",
                                     (model,)).fetchall()
            for (name,) in names:
                try:
                    rows.append(self._db.execute(f"SELECT {columns} FROM speakers WHERE model = ? AND name = ?",
                                                 (model, name)).fetchone())
                except sqlite3.Error as e:
                    if not _damage(e):
                        raise
        return rows

    # -- writing ----------------------------------------------------------------------------------------
    def put(self, name: str, rows: bytes, pairs: Sequence[Tuple[str, str]], expect: Optional[int] = None,
            replace: bool = False, model: str = DEFAULT_MODEL, fingerprint: Optional[Dict] = None) -> StoredSpeaker:
        """Write speaker ``name`` of ``model`` (its rows, the sentence pairs they were fitted on) in one transaction.

        A new name is added, unless ``expect`` is given. An existing one is overwritten only with ``replace``
        (whatever its version), or when its version is ``expect`` (nobody changed it since it was read).
        Raises :class:`StoreConflict` otherwise. With ``fingerprint`` (the model's the rows were fitted on), the
        write is refused (:class:`StoreConflict`, reason ``model``) where ``model`` is now tied to another model: a
        process reloaded it with a checkpoint of another fingerprint meanwhile.
        """
        self._check_name(name)
        now = _now()
        with self._transaction(write=True) as db:
            if fingerprint is not None:
                tied = db.execute("SELECT fingerprint, made_for FROM models WHERE id = ?", (model,)).fetchone()
                if tied is None or self._parsed_fingerprint(tied[0], model) != fingerprint:
                    raise StoreConflict("model", f"model {model!r} was reloaded meanwhile with another checkpoint "
                                        f"({tied[1] if tied else 'removed from the store'}), whose speaker rows differ")
            current = db.execute("SELECT version, created FROM speakers WHERE model = ? AND name = ?",
                                 (model, name)).fetchone()
            shown = speaker_text(model, name)
            if current is None and expect is not None:
                raise StoreConflict("deleted", f"speaker {shown} was deleted meanwhile (by another process)")
            if current is not None and not replace and expect is None:
                raise StoreConflict("exists", f"speaker {shown} already exists")
            if current is not None and not replace and current[0] != expect:
                raise StoreConflict("changed", f"speaker {shown} was changed meanwhile (by another process)")
            version = self._next_version(db)
            created = current[1] if current is not None else now
            self._write(db, StoredSpeaker(name, len(pairs), created, now, version, rows, list(pairs), model))
        return StoredSpeaker(name, len(pairs), created, now, version, model=model)

    def put_records(self, records: Sequence[StoredSpeaker], replace: bool = False) -> Dict[str, List[str]]:
        """Write ``records`` (with their rows and pairs, each of its model) as they are, their times included, in one
        transaction: a speaker the store lacks is ``added``, one it holds alike (the same rows and sentence pairs) is
        left (``same``), one it holds otherwise is overwritten with ``replace`` (``replaced``). Without ``replace``
        such a speaker is a :class:`StoreConflict` (reason ``changed``, the speakers in its message) and nothing is
        written. Returns the speakers of each outcome, as messages name them (:func:`speaker_text`)."""
        for record in records:
            self._check_name(record.name)
        outcome: Dict[str, List[str]] = {"added": [], "same": [], "replaced": [], "differ": []}
        with self._transaction(write=True) as db:
            writes = []
            for record in records:
                shown = speaker_text(record.model, record.name)
                current = db.execute("SELECT rows, pairs FROM speakers WHERE model = ? AND name = ?",
                                     (record.model, record.name)).fetchone()
                if current is None:
                    outcome["added"].append(shown)
                elif bytes(current[0]) == record.rows and _same_pairs(current[1], record.pairs):
                    outcome["same"].append(shown)
                    continue
                else:
                    outcome["replaced" if replace else "differ"].append(shown)
                writes.append(record)
            if outcome["differ"]:
                raise StoreConflict("changed", ", ".join(outcome["differ"]))
            if writes:
                version = self._next_version(db)
                for record in writes:
                    self._write(db, StoredSpeaker(record.name, len(record.pairs), record.created, record.updated,
                                                  version, record.rows, record.pairs, record.model))
        del outcome["differ"]
        return outcome

    def _check_name(self, name: str) -> None:
        problem = new_label_problem(name)
        if problem:
            raise StoreError(f"{self.option} {self.path}: cannot store speaker {name!r}: {problem}")

    @staticmethod
    def _write(db, record: StoredSpeaker) -> None:
        pairs = [[source, target] for source, target in record.pairs]
        db.execute(f"INSERT INTO speakers ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (model, name) DO "
                   "UPDATE SET rows = excluded.rows, pairs = excluded.pairs, sentences = excluded.sentences, "
                   "created = excluded.created, updated = excluded.updated, version = excluded.version",
                   (record.model, record.name, sqlite3.Binary(record.rows), json.dumps(pairs, ensure_ascii=False),
                    len(pairs), record.created, record.updated, record.version))

    def delete(self, name: str, model: str = DEFAULT_MODEL) -> bool:
        """Remove speaker ``name`` of ``model``; False if the store does not hold it."""
        with self._transaction(write=True) as db:
            if db.execute("SELECT 1 FROM speakers WHERE model = ? AND name = ?", (model, name)).fetchone() is None:
                return False
            self._next_version(db)
            db.execute("DELETE FROM speakers WHERE model = ? AND name = ?", (model, name))
        return True

    def close(self) -> None:
        """Close the file (safe to call twice)."""
        with self._lock:
            if not self._closed:
                self._db.close()
                self._closed = True


class _NotAStore(sqlite3.DatabaseError):
    """An SQLite file that is whole but holds no speaker store."""


def _same_pairs(stored: str, pairs: Sequence[Tuple[str, str]]) -> bool:
    try:
        return [tuple(pair) for pair in json.loads(stored)] == [tuple(pair) for pair in pairs]
    except (TypeError, ValueError):
        return False


def _is_sqlite(path: str) -> bool:
    """Whether ``path`` begins as an SQLite file does (so that an error reading it means damage, not another kind of
    file)."""
    try:
        with open(path, "rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def _speaker(row, path: str, model: str) -> StoredSpeaker:
    speaker = StoredSpeaker(*row[:5], model=model)
    if len(row) > 5:
        try:
            speaker.rows = bytes(row[5])
            pairs = json.loads(row[6])
            speaker.pairs = [(source, target) for source, target in pairs]
            if not all(isinstance(x, str) for pair in speaker.pairs for x in pair):
                raise ValueError("a sentence is not a string")
        except (TypeError, ValueError) as e:
            raise StoreDamaged(path, f"the record of speaker {speaker_text(model, speaker.name)} is damaged: its "
                               f"sentence pairs are not a JSON list of [source, target] strings ({e})", speaker.name) from None
    return speaker


# -- copying ---------------------------------------------------------------------------------------------------


@dataclass
class CopyReport:
    """What :func:`copy_speakers` did: the names copied, found alike, and overwritten; how many speakers the target
    holds that the source does not (left as they are)."""

    added: List[str] = field(default_factory=list)
    same: List[str] = field(default_factory=list)
    replaced: List[str] = field(default_factory=list)
    others: int = 0


def copy_speakers(source: SpeakerStore, target: SpeakerStore, replace: bool = False) -> CopyReport:
    """Copy every speaker of ``source`` into ``target`` (an SQLite store into PostgreSQL, or any store into any
    other), as it is, under its model id: its rows, its sentence pairs, when it was created and updated. One snapshot
    of the source is read and written in one transaction: all or nothing. Idempotent: a speaker the target holds alike
    is left; one it holds otherwise (changed since an earlier copy) refuses the copy, naming it, unless ``replace``.
    Each model id of the target must be new or tied to the source's model of that id; speakers only the target holds
    are left. Raises :class:`StoreError` saying what to do."""
    models = {model: source.fingerprint(model) for model in source.models()}
    try:
        records = source.records()
    except StoreDamaged as e:
        raise StoreError(f"{source.option} {source.path}: {e.what}: nothing was copied. Restore the store from a "
                         f"backup, or serve it with --skip-broken-speakers and onboard that speaker again (PUT with "
                         f"\"replace\": true), then copy") from None
    report = CopyReport()
    if not records:  # nothing to copy: a target is left as it is, even unbound
        return report
    for model, fingerprint in models.items():
        if fingerprint is not None and any(record.model == model for record in records):
            target.bind(fingerprint, f"the model of {source.option} {source.path} ({source.made_for(model)})",
                        model=model)
    try:
        outcome = target.put_records(records, replace=replace)
    except StoreConflict as e:
        raise StoreError(f"{target.option} {target.path} holds speaker(s) {e} otherwise than {source.option} "
                         f"{source.path} (other rows or sentences: changed after an earlier copy?): nothing was copied. "
                         f"Give --replace to overwrite them with the source's, or delete them from the target "
                         f"(DELETE /speakers/NAME) and copy again") from None
    report.added, report.same, report.replaced = outcome["added"], outcome["same"], outcome["replaced"]
    keys = {(record.model, record.name) for record in records}
    report.others = sum(1 for model in target.models() for speaker in target.speakers(model)
                        if (model, speaker.name) not in keys)
    return report
