"""What a speaker store raises: :class:`StoreError`, a store that cannot be used as asked (unreadable, of another
model or a newer schema), and its kinds :class:`StoreModelMismatch` (a model id tied to another model) and
:class:`StoreDamaged` (a file or a record that cannot be read, with how to recover); :class:`StoreUnavailable`, a
database that cannot be reached now (retry); :class:`StoreConflict`, a write that the store's contents contradict.
Here too the URL schemes of each kind of store (:mod:`~fairseq_speaker.service.store_location` reads ``--store`` by
them), by which a damaged store's message tells a database from a file.
"""

import sqlite3
from typing import Optional

from fairseq_speaker.errors import UserError

#: the URL schemes of each kind of store (libpq accepts both spellings of PostgreSQL's)
SQLITE_SCHEMES = ("sqlite",)
POSTGRES_SCHEMES = ("postgresql", "postgres")


class StoreError(UserError):
    """A store that cannot be used as asked (unreadable, of another model or a newer schema); the message says why."""


class StoreModelMismatch(StoreError):
    """A model id of the store tied to a model of another fingerprint than the one given
    (:meth:`~fairseq_speaker.service.store_statements.StoreStatements.bind`)."""


class StoreDamaged(StoreError):
    """A store whose file, or one speaker's record in it, cannot be read: the message names the file, what is wrong
    and how to recover."""

    def __init__(self, path: str, what: str, speaker: Optional[str] = None, skippable: bool = True,
                 option: str = "--store"):
        """``option``: the option that named the store (``--store`` of the service, whose ways to go on the message
        gives; ``--from`` or ``--to`` of ``fairseq-speaker-store copy``)."""
        if path.startswith(tuple(f"{scheme}://" for scheme in POSTGRES_SCHEMES)):
            recover = "restore the database from a backup (pg_dump makes one of a live store)"
        else:
            recover = (f"restore {path} from a backup (sqlite3 FILE '.backup COPY' makes one of a live store), check "
                       f"it with sqlite3 {path} 'PRAGMA integrity_check'")
        if option != "--store":
            recover += f", then run the command again, or give another {option}"
        elif skippable:
            recover += (", or start fairseq-speaker-serve with --skip-broken-speakers to serve without the speakers "
                        "whose records cannot be read (it logs their names; their sentences are lost unless restored)")
        else:
            recover += (", or start with a new --store file or database (the onboarded speakers are then lost unless "
                        "restored)")
        super().__init__(f"{option} {path}: {what}. To recover: {recover}")
        self.speaker = speaker
        self.what = what


class StoreUnavailable(sqlite3.OperationalError):
    """A database server that cannot be reached or does not answer now (down, unreachable, a lock or a statement that
    timed out): the message says which and why. It is an :class:`sqlite3.OperationalError`, the SQLite store's error
    of a file that is busy or locked, so that whoever uses a store treats both alike: retry later (the service
    answers 503 ``store_unavailable``), never as damage."""


class StoreFileGone(StoreUnavailable):
    """A store file removed or replaced while the service ran: retrying does not help, a restart from the restored
    file does (the message says so; the service answers 503 ``store_unavailable`` saying its log tells how)."""


class StoreConflict(Exception):
    """A write that the store's current contents contradict: the speaker ``exists``, was ``deleted``, or ``changed``
    meanwhile (its ``reason``)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
