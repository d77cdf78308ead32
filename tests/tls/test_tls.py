"""The database as production runs it: TLS verified against a CA, client certificates with and without
a passphrase, a wrong CA or host name as one line, plain TCP refused; and a password that rotates
while the daemon sweeps, read from a libpq passfile at each new connection."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from helpers import DaemonThread, clean_env, daemon_settings, wait_until
from pod_sweeper.core.errors import EXIT_FAILURE
from tls.conftest import APP_PASSWORD, KEY_PASSPHRASE, TlsServer


def pod_sweeper(*args: str, url: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pod_sweeper", *args],
        env=clean_env(POD_SWEEPER_DATABASE_URL=url, POD_SWEEPER_CONNECT_TIMEOUT="3", **env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def verified(server: TlsServer, **keywords: str) -> dict[str, str]:
    return {"sslmode": "verify-full", "sslrootcert": str(server.certs / "ca.crt"), **keywords}


def test_verify_full_with_a_password_and_client_certificates_with_and_without_a_passphrase(
    tls_server: TlsServer,
) -> None:
    app = tls_server.url("app", password=APP_PASSWORD, **verified(tls_server))
    migrated = pod_sweeper("migrate", url=app)
    assert migrated.returncode == 0, migrated.stderr
    assert pod_sweeper("status", url=app).returncode == 0
    granted = pod_sweeper("grant", "certuser", "--apply", url=app)  # the runtime role signs in with its certificate
    assert granted.returncode == 0, granted.stderr
    certs = tls_server.certs
    with_key = tls_server.url(
        "certuser", **verified(tls_server, sslcert=str(certs / "client.crt"), sslkey=str(certs / "client.key"))
    )
    status = pod_sweeper("status", url=with_key)
    assert status.returncode == 0, status.stderr
    encrypted = tls_server.url(
        "certuser",
        **verified(
            tls_server,
            sslcert=str(certs / "client.crt"),
            sslkey=str(certs / "client-enc.key"),
            sslpassword=KEY_PASSPHRASE,
        ),
    )
    status = pod_sweeper("status", url=encrypted)
    assert status.returncode == 0, status.stderr
    assert KEY_PASSPHRASE not in status.stdout + status.stderr


@pytest.mark.parametrize(
    ("keywords", "says"),
    [
        ({"sslrootcert": "other-ca.crt"}, "certificate verify failed"),
        ({"host": "localhost"}, "does not match host name"),
        ({"sslmode": "disable"}, "no encryption"),
    ],
)
def test_a_wrong_ca_a_wrong_host_name_or_no_tls_is_one_line_and_exit_1(
    tls_server: TlsServer, keywords: dict[str, str], says: str
) -> None:
    given = {**verified(tls_server), **keywords}
    if given["sslrootcert"] == "other-ca.crt":
        given["sslrootcert"] = str(tls_server.certs / "other-ca.crt")
    url = tls_server.url("app", password=APP_PASSWORD, **given)
    for args in (["status"], ["check"]):
        done = pod_sweeper(*args, url=url)
        assert done.returncode == EXIT_FAILURE, done.stdout + done.stderr
        lines = [line for line in (done.stdout + done.stderr).splitlines() if says in line]
        assert lines and "Traceback" not in done.stderr, done.stdout + done.stderr
        assert APP_PASSWORD not in done.stdout + done.stderr


def test_a_password_that_rotates_every_few_seconds_is_read_from_the_passfile_at_each_connection(
    tls_server: TlsServer, kube: Any, tmp_path: Path
) -> None:
    """The daemon's URL names a libpq passfile, not a password: each new connection reads it. The
    password changes three times while the daemon sweeps, its backends terminated each time: it
    reconnects with the new one, no restart, no row lost."""
    passfile = tmp_path / "pgpass"

    def rotate(password: str) -> None:
        passfile.write_text(f"*:*:*:app:{password}\n")
        passfile.chmod(0o600)
        with tls_server.admin() as conn:
            conn.execute(sql.SQL("ALTER ROLE app PASSWORD {}").format(sql.Literal(password)))
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'app'")

    rotate(APP_PASSWORD)
    url = tls_server.url("app", passfile=str(passfile), **verified(tls_server))
    assert pod_sweeper("migrate", url=url).returncode == 0

    def host() -> psycopg.Connection[Any]:
        return psycopg.connect(
            host=str(tls_server.cluster.socket_dir), port=tls_server.cluster.port, user="postgres", dbname="app",
            autocommit=True,
        )  # fmt: skip

    with host() as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS executions (sandbox_id text PRIMARY KEY, generation int NOT NULL DEFAULT 1,"
            " pod_namespace text NOT NULL, pod_name text NOT NULL, pod_uid uuid, active bool NOT NULL DEFAULT true)"
        )
        conn.execute("ALTER TABLE executions OWNER TO app")  # the host's table, owned by its application
    assert pod_sweeper("attach", "--table", "public.executions", url=url).returncode == 0
    settings = daemon_settings(url, kube, poll_interval=0.5)
    with DaemonThread(settings):
        for round_ in range(4):
            if round_:
                rotate(f"rotated-{round_}")
            with host() as conn:
                for i in range(5):
                    pod = kube.create_pod("sandboxes", f"r{round_}-{i}")
                    conn.execute(
                        "INSERT INTO executions (sandbox_id, pod_namespace, pod_name, pod_uid, active)"
                        " VALUES (%s, 'sandboxes', %s, %s, false)",
                        (f"r{round_}-{i}", f"r{round_}-{i}", pod["metadata"]["uid"]),
                    )

            def swept(n: int = (round_ + 1) * 5) -> bool:
                with host() as conn:
                    row = conn.execute(
                        "SELECT count(*) FROM pod_sweeper.outbox WHERE status = 'done' AND outcome = 'deleted'"
                    ).fetchone()
                return row is not None and row[0] == n

            wait_until(swept, timeout=60, what=f"round {round_}'s rows swept with the password of the moment")
    with host() as conn:
        assert conn.execute("SELECT count(*) FROM pod_sweeper.outbox WHERE status <> 'done'").fetchone() == (0,)
