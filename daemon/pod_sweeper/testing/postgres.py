"""A throwaway PostgreSQL cluster from the local binaries, in a temporary folder.

Used by the demo, the benchmarks and the test suite when no database URL is given and no Docker engine
answers. The binaries are looked up on PATH, then through ``pg_config --bindir``, then in Debian's
``/usr/lib/postgresql/N/bin``. PostgreSQL refuses to run as root, so as root the cluster belongs to,
and runs as, the ``postgres`` user. Durability is switched off: the data dies with the folder anyway.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Self


class PostgresNotFound(RuntimeError):
    """No ``initdb``/``pg_ctl`` could be found on this machine."""


def find_bindir() -> Path:
    """The folder holding ``initdb`` and ``pg_ctl``."""
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
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "pg_ctl").is_file():
            return bindir
    raise PostgresNotFound("no PostgreSQL binaries (initdb, pg_ctl) on PATH, via pg_config, or in /usr/lib/postgresql")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ThrowawayCluster:
    """``with ThrowawayCluster() as pg: pg.url("postgres")``; stopped and removed on exit."""

    def __init__(self, *, port: int | None = None, extra_settings: dict[str, str] | None = None) -> None:
        self.bindir = find_bindir()
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
            **(extra_settings or {}),
        }
        self._user: str | None = None
        if os.geteuid() == 0:
            self._user = "postgres"
            entry = pwd.getpwnam(self._user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self.socket_dir.mkdir()
        if self._user:
            os.chown(self.socket_dir, pwd.getpwnam(self._user).pw_uid, -1)

    def _run(self, *args: str) -> None:
        result = subprocess.run(
            [str(self.bindir / args[0]), *args[1:]],
            user=self._user,
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
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
        with (self.data / "postgresql.auto.conf").open("a") as conf:
            for key, value in self.settings.items():
                conf.write(f"{key} = '{value}'\n")

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.logfile), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

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
