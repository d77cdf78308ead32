"""The TLS tier: a PostgreSQL of its own that accepts TLS only (``hostssl``, plain TCP refused), with a
certificate authority made for it, scram-sha-256 passwords and client certificates; every certificate
and key is made here with openssl."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from harness.postgres import ThrowawayCluster

KEY_PASSPHRASE = "k3y-passphrase"
APP_PASSWORD = "app-pw-1"


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def _ca(folder: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
             "-keyout", f"{name}.key", "-out", f"{name}.crt", cwd=folder)  # fmt: skip


def _signed(folder: Path, name: str, *, cn: str, ca: str, san: str | None = None) -> None:
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}", "-keyout", f"{name}.key",
             "-out", f"{name}.csr", cwd=folder)  # fmt: skip
    extra: list[str] = []
    if san is not None:
        (folder / f"{name}.ext").write_text(f"subjectAltName={san}\n")
        extra = ["-extfile", f"{name}.ext"]
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-days", "2", "-out", f"{name}.crt", *extra, cwd=folder)  # fmt: skip


@dataclass
class TlsServer:
    cluster: ThrowawayCluster
    certs: Path

    def url(self, user: str, dbname: str = "app", **keywords: str) -> str:
        """A key=value conninfo over TCP to 127.0.0.1 with ``keywords`` (sslmode, sslrootcert, ...)."""
        pairs = {"host": "127.0.0.1", "port": str(self.cluster.port), "dbname": dbname, "user": user, **keywords}
        return " ".join(f"{k}={v}" for k, v in pairs.items())

    def admin(self) -> psycopg.Connection[tuple[object, ...]]:
        """A superuser's connection over the server's Unix socket (local trust), for arranging."""
        return psycopg.connect(
            host=str(self.cluster.socket_dir), port=self.cluster.port, user="postgres", dbname="postgres",
            autocommit=True,
        )  # fmt: skip


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    certs = tmp_path_factory.mktemp("certs")
    _ca(certs, "ca")
    _ca(certs, "other-ca")  # a CA the server's certificate was not signed by
    _signed(certs, "server", cn="127.0.0.1", ca="ca", san="IP:127.0.0.1")
    _signed(certs, "client", cn="certuser", ca="ca")
    # The same client key, encrypted with a passphrase (libpq asks for it as sslpassword).
    _openssl("pkey", "-in", "client.key", "-aes256", "-passout", f"pass:{KEY_PASSPHRASE}", "-out", "client-enc.key",
             cwd=certs)  # fmt: skip
    for key in certs.glob("*.key"):
        key.chmod(0o600)  # libpq refuses a client key others may read
    cluster = ThrowawayCluster()
    # The server's certificate and key where the user it runs as can read them (and, for the key, no
    # one else: the server refuses a key others may read).
    served = cluster.root / "tls"
    served.mkdir()
    for name in ("server.crt", "server.key", "ca.crt"):
        (served / name).write_bytes((certs / name).read_bytes())
        (served / name).chmod(0o600)
        if cluster.user is not None:
            os.chown(served / name, cluster.user.pw_uid, cluster.user.pw_gid)
    if cluster.user is not None:
        os.chown(served, cluster.user.pw_uid, cluster.user.pw_gid)
    cluster.settings |= {
        "ssl": "on",
        "ssl_cert_file": str(served / "server.crt"),
        "ssl_key_file": str(served / "server.key"),
        "ssl_ca_file": str(served / "ca.crt"),
        "password_encryption": "scram-sha-256",
    }
    try:
        cluster.init()
        (cluster.data / "pg_hba.conf").write_text(
            "local all all trust\n"
            "hostssl all certuser 127.0.0.1/32 cert\n"
            "hostssl all all 127.0.0.1/32 scram-sha-256\n"
            "host all all 0.0.0.0/0 reject\n"
        )
        cluster.start()
        server = TlsServer(cluster, certs)
        with server.admin() as conn:
            conn.execute(f"CREATE ROLE app LOGIN PASSWORD '{APP_PASSWORD}'")
            conn.execute("CREATE ROLE certuser LOGIN")
            conn.execute("CREATE DATABASE app OWNER app")
        with psycopg.connect(host=str(cluster.socket_dir), port=cluster.port, user="postgres", dbname="app",
                             autocommit=True) as conn:  # fmt: skip
            conn.execute("GRANT ALL ON SCHEMA public TO certuser")
        yield server
    finally:
        cluster.cleanup()
