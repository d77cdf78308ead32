"""A real PgBouncer (Debian's ``pgbouncer`` package) in transaction pooling mode, in front of the
suite's PostgreSQL, for the pooler tier.

Every database name maps to the same database on the server (``* =``), with a pool of ``pool_size``
server connections per database, smaller than the clients the tests put on it. As root, PgBouncer is
told to drop to the user the throwaway clusters run as (it refuses to run as root).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Self

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from harness.postgres import free_port, run_as_user
from helpers import stop_process, wait_until


def find_pgbouncer() -> str | None:
    return shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if Path(p).is_file()), None
    )


class PgBouncer:
    def __init__(self, server_url: str, *, pool_size: int = 3) -> None:
        binary = find_pgbouncer()
        if binary is None:
            raise RuntimeError("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
        self.binary = binary
        self.server = {k: str(v) for k, v in conninfo_to_dict(server_url).items() if v is not None}
        self.port = free_port()
        self.pool_size = pool_size
        self.user = run_as_user()
        self.root = Path(tempfile.mkdtemp(prefix="pod-sweeper-pgbouncer-"))
        self.log = self.root / "pgbouncer.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def _write_config(self) -> Path:
        user = self.server.get("user", "postgres")
        target = " ".join(
            f"{key}={self.server[key]}" for key in ("host", "port", "user", "password") if key in self.server
        )
        (self.root / "userlist.txt").write_text(f'"{user}" ""\n')
        config = self.root / "pgbouncer.ini"
        config.write_text(
            f"""[databases]
* = {target}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.root / "userlist.txt"}
admin_users = {user}
pool_mode = transaction
default_pool_size = {self.pool_size}
max_client_conn = 500
server_reset_query =
logfile = {self.log}
pidfile = {self.root / "pgbouncer.pid"}
"""
        )
        if self.user is not None:
            for path in (self.root, *self.root.iterdir()):
                os.chown(path, self.user.pw_uid, self.user.pw_gid)
        return config

    def url(self, direct_url: str) -> str:
        """``direct_url``'s database, through the pooler."""
        params = {k: str(v) for k, v in conninfo_to_dict(direct_url).items() if v is not None}
        params.update({"host": "127.0.0.1", "port": str(self.port)})
        params.pop("password", None)
        return make_conninfo("", **params)

    def _answers(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"pgbouncer exited with {self.proc.returncode}: {self.log_text()[-2000:]}")
        try:
            with psycopg.connect(
                f"host=127.0.0.1 port={self.port} dbname=pgbouncer user={self.server.get('user', 'postgres')}",
                autocommit=True,
                prepare_threshold=None,
                connect_timeout=2,
            ) as conn:
                conn.execute("SHOW VERSION")
            return True
        except psycopg.Error:
            return False

    def start(self) -> None:
        config = self._write_config()
        command = [self.binary, str(config)]
        if self.user is not None:
            command[1:1] = ["-u", self.user.pw_name]
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self._answers, timeout=20, interval=0.05, what="pgbouncer to accept connections")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
