"""A PostgreSQL server of the tests' own: a new cluster in a temporary folder, on a free port of 127.0.0.1, with
password authentication, stopped and removed at the end.

PostgreSQL refuses to run as root: where the tests run as root (CI, a container), the server runs as the
unprivileged ``postgres`` user that Debian's package creates (``runuser -u postgres``). The binaries are found on
the PATH or in Debian's ``/usr/lib/postgresql/VERSION/bin`` (.ci/run installs the package where it is missing).
Where none can start, :func:`start` raises :class:`PostgresMissing` saying why (the fixture skips, or fails on CI).
"""

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from typing import List, Optional

PASSWORD = "store-test-password"
USER = "postgres"


class PostgresMissing(Exception):
    """No PostgreSQL server can be started here; the message says why and what to install."""


def _binaries() -> Optional[str]:
    """The folder of initdb and pg_ctl (the newest version installed), or None."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return os.path.dirname(os.path.realpath(found))
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                      key=lambda path: [int(x) if x.isdigit() else 0 for x in path.split("/")[4].split(".")])
    return os.path.dirname(versions[-1]) if versions else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """A running server (see the module documentation); :meth:`database` makes a new, empty database."""

    def __init__(self, folder: str, bin_dir: str, as_user: List[str], port: int):
        self.folder, self.bin_dir, self.as_user, self.port = folder, bin_dir, as_user, port
        self.data, self.log = os.path.join(folder, "data"), os.path.join(folder, "server.log")
        self._databases = 0

    def _run(self, program: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([*self.as_user, os.path.join(self.bin_dir, program), *args], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise PostgresMissing(f"{program} failed ({proc.returncode}): {proc.stdout[-2000:]}{self.log_tail()}")
        return proc

    def log_tail(self) -> str:
        try:
            with open(self.log, encoding="utf-8", errors="replace") as f:
                return "\nserver log: " + f.read()[-2000:]
        except OSError:
            return ""

    def url(self, database: str = "postgres", password: Optional[str] = PASSWORD, port: Optional[int] = None) -> str:
        secret = f":{password}" if password is not None else ""
        return f"postgresql://{USER}{secret}@127.0.0.1:{port or self.port}/{database}"

    def start(self) -> None:
        self._run("pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", "60", "-o",
                  f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``immediate``: as a crash would, without a checkpoint)."""
        self._run("pg_ctl", "-D", self.data, "-m", mode, "-w", "stop", check=False)

    def database(self) -> str:
        """The URL of a new, empty database (with the password)."""
        import psycopg

        self._databases += 1
        name = f"store_{os.getpid()}_{self._databases}"
        with psycopg.connect(self.url(), autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def remove(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.folder, ignore_errors=True)


def start() -> PostgresServer:
    """A new server, started; raises :class:`PostgresMissing` where none can be."""
    try:
        import psycopg  # noqa: F401
    except ImportError as e:
        raise PostgresMissing(f"the PostgreSQL driver is not installed ({e}): pip install -e '.[test]'") from None
    bin_dir = _binaries()
    if bin_dir is None:
        raise PostgresMissing("PostgreSQL is not installed (no initdb on the PATH or in /usr/lib/postgresql/*/bin): "
                              "apt-get install postgresql (.ci/run does where it runs as root)")
    as_user: List[str] = []
    if os.geteuid() == 0:  # postgres refuses root
        try:
            pwd.getpwnam(USER)
        except KeyError:
            raise PostgresMissing(f"the tests run as root, which PostgreSQL refuses, and there is no '{USER}' user to "
                                  f"run it as (Debian's postgresql package creates it)") from None
        if shutil.which("runuser") is None:
            raise PostgresMissing("the tests run as root, which PostgreSQL refuses, and there is no runuser to run it "
                                  f"as '{USER}'")
        as_user = ["runuser", "-u", USER, "--"]
    folder = tempfile.mkdtemp(prefix="fairseq-speaker-postgres-")  # not under pytest's folder: root's, closed to others
    if as_user:
        account = pwd.getpwnam(USER)
        os.chown(folder, account.pw_uid, account.pw_gid)
    password_file = os.path.join(folder, "password")
    with open(password_file, "w") as f:
        f.write(PASSWORD + "\n")
    if as_user:
        os.chown(password_file, account.pw_uid, account.pw_gid)
    server = PostgresServer(folder, bin_dir, as_user, _free_port())
    try:
        server._run("initdb", "-D", server.data, "-U", USER, "--auth-local=trust", "--auth-host=scram-sha-256",
                    f"--pwfile={password_file}", "-E", "UTF8", "--locale=C", "--no-sync")
        for attempt in range(3):  # the free port may be taken before the server binds it
            try:
                server.start()
                break
            except PostgresMissing:
                if attempt == 2:
                    raise
                server.port = _free_port()
                time.sleep(0.5)
    except BaseException:
        server.remove()
        raise
    return server
