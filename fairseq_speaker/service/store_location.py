"""Where a speaker store is, as ``--store`` (or another option) names it, checked without opening it
(:func:`store_location`, a :class:`StoreLocation`): an SQLite file (or ``sqlite:///FILE``, or SQLite's URI filename
``file:FILE``) or a PostgreSQL URL. A
store SQLite keeps in memory is refused where what is written must last (:func:`durable_location`); a URL's
password is hidden in messages (:func:`hide_password`); :func:`postgres_driver` is the PostgreSQL driver, or says
how to install it.
"""

import re
import urllib.parse
from dataclasses import dataclass

from fairseq_speaker.service.store_errors import POSTGRES_SCHEMES, SQLITE_SCHEMES, StoreError

#: what --store takes, for messages
STORE_FORMS = ("an SQLite file (speakers.db, or sqlite:///speakers.db; sqlite:////abs/path.db) or a PostgreSQL "
               "database (postgresql://USER@HOST[:PORT]/DATABASE)")


@dataclass(frozen=True)
class StoreLocation:
    """Where a store is, as ``--store`` names it (see :func:`store_location`)."""

    #: ``sqlite`` or ``postgresql``
    kind: str
    #: the SQLite file (or ``:memory:``), or the PostgreSQL URL as given (password included)
    target: str
    #: how messages and logs name it: the file, or the URL without its password
    shown: str


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
    if text.startswith("file:"):
        return _sqlite_uri(text, option)
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
        if "%" in path:  # a URL's %20 is a space: read as written, it named another file
            raise StoreError(f"{option} {text}: an SQLite store URL's path is taken as written, and '%' escapes would "
                             f"name another file than the URL means: give the file's path itself (--store FILE)")
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


def _sqlite_uri(text: str, option: str) -> StoreLocation:
    """The store of an SQLite URI filename (``file:speakers.db``, ``file:///abs/speakers.db``), as the file it
    names: SQLite reads such a name as a URI where it was built to (Python's is, on most systems) and as a file
    literally named ``file:...`` elsewhere, and one store spelt two ways was copied into itself. In memory
    (``file::memory:``, ``?mode=memory``) it is ``:memory:``; other parameters (``?mode=ro``, ``?immutable=1``) are
    refused: the store is the file, opened as the service opens it."""
    uri = text[len("file:"):].partition("#")[0]
    path, _, query = uri.partition("?")
    if path.startswith("//"):
        authority, _, rest = path[2:].partition("/")
        if authority not in ("", "localhost"):
            raise StoreError(f"{option} {text}: an SQLite store is a file on this machine (the URI names the host "
                             f"{authority!r}): give the file's path")
        path = "/" + rest
    path = urllib.parse.unquote(path)
    params = urllib.parse.parse_qsl(query, keep_blank_values=True)
    if path in ("", ":memory:") or ("mode", "memory") in params:
        return StoreLocation("sqlite", ":memory:", text)
    if params:
        raise StoreError(f"{option} {text}: an SQLite URI's parameters ({', '.join(k for k, _ in params)}) are not "
                         f"taken here: the store is the file, opened as the service opens it; give the file's path "
                         f"({path})")
    return StoreLocation("sqlite", path, path)


def in_memory(location: StoreLocation) -> bool:
    """Whether SQLite keeps the store of ``location`` nowhere once it is closed: ``:memory:`` (``sqlite:///:memory:``,
    or an SQLite URI filename in memory: :func:`_sqlite_uri`)."""
    return location.kind == "sqlite" and location.target == ":memory:"


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
