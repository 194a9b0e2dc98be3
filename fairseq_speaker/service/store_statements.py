"""The statements of a speaker store, the same in SQLite and PostgreSQL (:class:`StoreStatements`, the base of both
stores): the model ids and their fingerprints (:meth:`~StoreStatements.bind`, :meth:`~StoreStatements.rebind`), the
reads (:meth:`~StoreStatements.generation`, :meth:`~StoreStatements.versions`, :meth:`~StoreStatements.get`, ...)
and the writes (:meth:`~StoreStatements.put`, :meth:`~StoreStatements.put_records`, :meth:`~StoreStatements.delete`),
each one transaction of the store's. The stores open their database and begin its transactions
(:mod:`~fairseq_speaker.service.store` for SQLite, :mod:`~fairseq_speaker.service.store_postgres` for PostgreSQL).
"""

import datetime
import json
import sqlite3
import threading
from typing import Any, ContextManager, Dict, List, Optional, Sequence, Tuple

from fairseq_speaker.data.speaker_labels import new_label_problem
from fairseq_speaker.service.store_errors import StoreConflict, StoreDamaged, StoreError, StoreModelMismatch
from fairseq_speaker.service.store_schema import (COLUMNS, DEFAULT_MODEL, FINGERPRINT_KEYS, StoredSpeaker, looks,
                                                  speaker_text)


class StoreStatements:
    """The methods of a speaker store (see the module documentation of :mod:`~fairseq_speaker.service.store`).

    The statements of the methods below are those of PostgreSQL too (its store changes how a transaction begins and
    how the tables are made): one set of rules for both. A store gives what they run on: ``path`` and ``option``,
    ``_lock``, ``_db`` and ``_transaction``."""

    #: how messages name the store (the file, or the URL without its password), and the option that named it
    path: str
    option: str
    #: held by every call: one statement or transaction at a time on the connection
    _lock: threading.Lock
    #: the connection, whose ``execute`` takes these statements (``?`` for each parameter)
    _db: Any

    def _transaction(self, write: bool) -> ContextManager[Any]:
        """One transaction, its connection yielded (see the stores')."""
        raise NotImplementedError

    def _next_version(self, db) -> int:
        db.execute("UPDATE meta SET value = CAST(CAST(value AS BIGINT) + 1 AS TEXT) WHERE key = 'generation'")
        return int(db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])

    # -- the models -------------------------------------------------------------------------------------
    def bind(self, fingerprint: Dict, made_for: str = "the model", *, model: str = DEFAULT_MODEL) -> None:
        """Tie the model id ``model`` to the model of ``fingerprint`` (see
        :func:`~fairseq_speaker.service.store_schema.fingerprint_of`) where the store has no such id yet, or check that
        it is tied to that model; ``made_for`` names the model (its checkpoint) in messages."""
        with self._transaction(write=True) as db:
            row = db.execute("SELECT fingerprint, made_for FROM models WHERE id = ?", (model,)).fetchone()
            if row is None:
                db.execute("INSERT INTO models (id, fingerprint, made_for) VALUES (?, ?, ?)",
                           (model, json.dumps(fingerprint, sort_keys=True), made_for))
                return
            theirs = self._parsed_fingerprint(row[0], model)
            if theirs != fingerprint and not db.execute("SELECT COUNT(*) FROM speakers WHERE model = ?",
                                                        (model,)).fetchone()[0]:
                # no speaker of the id to keep from another model: it was refused at start, a reload took it
                db.execute("UPDATE models SET fingerprint = ?, made_for = ? WHERE id = ?",
                           (json.dumps(fingerprint, sort_keys=True), made_for, model))
                return
        if theirs != fingerprint:
            differ = [key for key in FINGERPRINT_KEYS if theirs.get(key) != fingerprint.get(key)]
            if self.option != "--store":  # fairseq-speaker-store copy's --to
                advice = (f"copy into a new {self.option} (a file or database of its own), or into the store of that "
                          f"model")
            else:
                advice = (f"serve that model with this store, or give {made_for} a store of its own (a new --store "
                          f"file or database)"
                          + ("" if model == DEFAULT_MODEL else f" or another model id; a reload of model {model!r} "
                             f"(POST /models/{model}/reload) refits its speakers on the new checkpoint"))
            raise StoreModelMismatch(
                f"{self.option} {self.path} holds the speakers{_of_model(model)} of another model ({row[1]}): "
                f"{_fingerprint_text(theirs)}; {made_for} has {_fingerprint_text(fingerprint)} (differs in: "
                f"{', '.join(differ)}). Speaker rows only mean something in the model they were fitted on: {advice}")

    def _parsed_fingerprint(self, text: str, model: str) -> Dict:
        try:
            theirs = json.loads(text)
            if not isinstance(theirs, dict):
                raise ValueError(f"a {type(theirs).__name__}, not an object")
            missing = [key for key in FINGERPRINT_KEYS if key not in theirs]
            if missing:  # every store has written them all: another program changed it
                raise ValueError(f"without {', '.join(map(repr, missing))}")
        except ValueError as e:
            raise StoreDamaged(self.path, f"the record of the model it was made for{_of_model(model)} (its "
                               f"fingerprint) is not readable ({e})", skippable=False, option=self.option) from None
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
            return _generation(self._db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchall())

    def ready(self) -> None:
        """Raise what reading the store raises where a table that requests read cannot be read (dropped or damaged by
        another program): a row of each, whatever the store's size (``GET /health`` asks)."""
        with self._transaction(write=False) as db:
            _generation(db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchall())
            db.execute("SELECT name, version FROM speakers LIMIT 1").fetchall()
            db.execute("SELECT id, fingerprint FROM models LIMIT 1").fetchall()

    def versions(self, model: str = DEFAULT_MODEL) -> Tuple[int, Dict[str, int]]:
        """The generation and each speaker's version, of the model ``model``, of one snapshot."""
        with self._transaction(write=False) as db:
            generation = _generation(db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchall())
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
        out = []
        for row in rows:
            try:
                out.append(_speaker(row, self.path, model))
            except StoreDamaged:  # its own reading says so (the service's start, which skips it or stops)
                continue
        return out

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
        Raises :class:`StoreConflict` otherwise, and (reason ``lookalike``) for a new name that looks like another
        speaker's of ``model`` (in this transaction: another process's check in memory cannot see it). With ``fingerprint`` (the model's the rows were fitted on), the
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
            if current is None:
                self._check_not_lookalike(db, model, name, {})
            version = self._next_version(db)
            created = current[1] if current is not None else now
            self._write(db, StoredSpeaker(name, len(pairs), created, now, version, rows, list(pairs), model))
        return StoredSpeaker(name, len(pairs), created, now, version, model=model)

    def put_records(self, records: Sequence[StoredSpeaker], replace: bool = False) -> Dict[str, List[str]]:
        """Write ``records`` (with their rows and pairs, each of its model) as they are, their times included, in one
        transaction: a speaker the store lacks is ``added``, one it holds alike (the same rows and sentence pairs) is
        left (``same``), one it holds otherwise is overwritten with ``replace`` (``replaced``). Without ``replace``
        such a speaker is a :class:`StoreConflict` (reason ``changed``, the speakers in its message) and nothing is
        written; so is a new speaker whose name looks like another's of its model (reason ``lookalike``). Returns the speakers of each outcome, as messages name them (:func:`speaker_text`)."""
        for record in records:
            self._check_name(record.name)
        outcome: Dict[str, List[str]] = {"added": [], "same": [], "replaced": [], "differ": []}
        with self._transaction(write=True) as db:
            writes: List[StoredSpeaker] = []
            added: Dict[Tuple[str, str], str] = {}
            for record in records:
                shown = speaker_text(record.model, record.name)
                current = db.execute("SELECT rows, pairs FROM speakers WHERE model = ? AND name = ?",
                                     (record.model, record.name)).fetchone()
                if current is None:
                    self._check_not_lookalike(db, record.model, record.name, added)
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

    @staticmethod
    def _check_not_lookalike(db, model: str, name: str, added: Dict[Tuple[str, str], str]) -> None:
        """Refuse (:class:`StoreConflict`, reason ``lookalike``) a new speaker ``name`` of ``model`` that looks like
        another the store holds (:func:`~fairseq_speaker.service.store_schema.looks`), or one of ``added`` (what the
        same transaction adds before it, by model and look), where it is added."""
        form = looks(name)
        twin = added.setdefault((model, form), name)
        if twin == name:
            found = db.execute("SELECT name FROM speakers WHERE model = ? AND looks = ? AND name <> ?",
                               (model, form, name)).fetchone()
            twin = found[0] if found else name
        if twin != name:
            raise StoreConflict("lookalike", f"speaker {speaker_text(model, name)} looks like {twin!r}, a speaker the "
                                f"store holds (onboarded by another process meanwhile?): use that name, or one that "
                                f"looks different")

    def _check_name(self, name: str) -> None:
        problem = new_label_problem(name)
        if problem:
            raise StoreError(f"{self.option} {self.path}: cannot store speaker {name!r}: {problem}")

    @staticmethod
    def _write(db, record: StoredSpeaker) -> None:
        pairs = [[source, target] for source, target in record.pairs]
        db.execute(f"INSERT INTO speakers ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (model, name) DO "
                   "UPDATE SET rows = excluded.rows, pairs = excluded.pairs, sentences = excluded.sentences, "
                   "created = excluded.created, updated = excluded.updated, version = excluded.version",
                   (record.model, record.name, sqlite3.Binary(record.rows), json.dumps(pairs, ensure_ascii=False),
                    len(pairs), record.created, record.updated, record.version, looks(record.name)))

    def delete(self, name: str, model: str = DEFAULT_MODEL) -> bool:
        """Remove speaker ``name`` of ``model``; False if the store does not hold it."""
        with self._transaction(write=True) as db:
            if db.execute("SELECT 1 FROM speakers WHERE model = ? AND name = ?", (model, name)).fetchone() is None:
                return False
            self._next_version(db)
            db.execute("DELETE FROM speakers WHERE model = ? AND name = ?", (model, name))
        return True


def _damage(error: sqlite3.Error) -> bool:
    """Whether ``error`` says the file is damaged (not busy, locked or closed: those pass)."""
    return isinstance(error, sqlite3.DatabaseError) and not isinstance(error, (sqlite3.OperationalError,
                                                                                sqlite3.ProgrammingError))


def _of_model(model: str) -> str:
    """`` (model 'en-de')`` for a model other than the default, for messages."""
    return "" if model == DEFAULT_MODEL else f" (model {model!r})"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _fingerprint_text(fp: Dict) -> str:
    return (f"a {fp.get('variant_spelling')!r} speaker bias (rows {fp.get('row_shapes')}), a target dictionary of "
            f"{fp.get('target_dictionary_size')} words (hash {str(fp.get('target_dictionary_hash'))[:12]}), shared "
            f"speaker parameters {str(fp.get('shared_sha1'))[:12]}")


def _same_pairs(stored: str, pairs: Sequence[Tuple[str, str]]) -> bool:
    try:
        return [tuple(pair) for pair in json.loads(stored)] == [tuple(pair) for pair in pairs]
    except (TypeError, ValueError):
        return False


def _record_problem(name, sentences, created, updated, version) -> Optional[str]:
    """Why the columns of a speaker's record cannot be what the store writes, or None: a count of sentences that is no
    whole number from 0 (a text was served until it failed the listing of every speaker), a time that is no ISO 8601
    time, a version that is no whole number."""
    for what, value in (("count of sentences", sentences), ("version", version)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return f"its {what} is {value!r}, not a whole number from 0"
    for what, value in (("time of creation", created), ("time of its last change", updated)):
        try:
            datetime.datetime.fromisoformat(value)
        except (TypeError, ValueError):
            return f"its {what} is {value!r}, not an ISO 8601 time"
    return None


def _speaker(row, path: str, model: str) -> StoredSpeaker:
    problem = _record_problem(*row[:5])
    if problem:
        raise StoreDamaged(path, f"the record of speaker {speaker_text(model, row[0])} is damaged: {problem}", row[0])
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


def _generation(rows) -> int:
    """The store's count of writes from its ``meta`` rows; a store where it is missing or not a whole number is one
    that cannot be read (``sqlite3.DatabaseError``: a service answers 503 and logs it), where the ``ValueError`` of a
    running service's every request was a 500."""
    value = rows[0][0] if rows else None
    try:
        number = int(value)
        if number < 0 or isinstance(value, bool) or (isinstance(value, float) and value != number):
            raise ValueError(value)  # a count of writes below 0, or 1.5 read as 1 (a write could be missed)
        return number
    except (TypeError, ValueError):
        raise UnreadableGeneration(f"its count of writes (meta 'generation') is {value!r}, not a whole number from "
                                   f"0: the store is damaged") from None


class UnreadableGeneration(sqlite3.DatabaseError):
    """The store's count of writes is missing or not a whole number (:func:`_generation`)."""
