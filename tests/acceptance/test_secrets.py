"""Passwords and tokens never appear in logs or errors: the captured output of every command is
searched for them, at DEBUG, through failures that print connection details."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import make_conninfo

from harness.postgres import free_port
from helpers import with_dbname
from pod_sweeper.core.settings import secret_keywords

DB_PASSWORD = "db-s3cret-pw"
TOKEN = "bearer-s3cret-token"


def with_password(url: str, password: str) -> str:
    return make_conninfo(url, password=password)


def env_for(url: str, kubeconfig: Path, **extra: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("POD_SWEEPER_")}
    environ.update(
        {
            "POD_SWEEPER_DATABASE_URL": url,
            "POD_SWEEPER_KUBECONFIG": str(kubeconfig),
            "POD_SWEEPER_HTTP_PORT": "0",
            "POD_SWEEPER_LOG_LEVEL": "DEBUG",
            "POD_SWEEPER_BACKOFF_BASE": "0.1",
            "POD_SWEEPER_BACKOFF_MAX": "0.3",
            "POD_SWEEPER_CONNECT_TIMEOUT": "1",
            **extra,
        }
    )
    return environ


def cli_output(args: list[str], env: dict[str, str]) -> list[str]:
    """A one-shot command of the real CLI in ``env``, run to its end: its stdout and stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "pod_sweeper", *args], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    return [done.stdout, done.stderr]


def daemon_output(env: dict[str, str], *awaited: str) -> list[str]:
    """What ``pod-sweeper run`` writes until a line holds one of ``awaited``, then through its SIGTERM."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pod_sweeper", "run"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    outputs, line = [], ""
    while not any(word in line for word in awaited):
        line = proc.stderr.readline()
        outputs.append(line)
        assert line, f"the daemon ended before a line said any of {awaited}"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    return [*outputs, out, err]


def test_no_secret_in_any_output(db_url: str, kube: Any, tmp_path: Path) -> None:
    kube.token = TOKEN
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig", token=TOKEN)
    good = with_password(db_url, DB_PASSWORD)  # trust auth ignores it, but every layer sees it
    unreachable = with_password(f"postgresql://app@127.0.0.1:{free_port()}/x", DB_PASSWORD)
    missing_db = with_password(with_dbname(db_url, "no_such_db"), DB_PASSWORD)
    outputs: list[str] = []
    for args, url in (
        (["status"], good),
        (["status"], missing_db),
        (["migrate"], unreachable),
        (["check", "--namespace", "sandboxes"], good),
        (["settings"], good),
        (["status", "--json"], good),
    ):
        outputs += cli_output(args, env_for(url, kubeconfig))
    # The daemon: a start against an unreachable database, then a run with Kubernetes refusing us.
    for url, json_logs in ((unreachable, "text"), (good, "json")):
        outputs += daemon_output(env_for(url, kubeconfig, POD_SWEEPER_LOG_FORMAT=json_logs), "unreachable", "ready")
    text = "".join(outputs)
    assert "password=***" in text  # connection details were shown, masked
    assert DB_PASSWORD not in text
    assert TOKEN not in text


@pytest.mark.parametrize("keyword", sorted(secret_keywords()))
def test_no_libpq_secret_keyword_reaches_any_output(keyword: str, kube: Any, tmp_path: Path) -> None:
    """Every keyword libpq marks as a secret, in a URL and in key=value, in the database URL and the
    LISTEN one, with the database unreachable so that every command shows where it tried to connect:
    status, check, migrate and the daemon's log at DEBUG."""
    secret = f"{keyword}-V4lue"
    port = free_port()  # nothing listens there
    as_url = f"postgresql://app@127.0.0.1:{port}/x?{keyword}={secret}"
    as_pairs = f"host=127.0.0.1 port={port} dbname=x user=app {keyword}={secret}"
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    outputs: list[str] = []
    for database, listen in ((as_url, as_pairs), (as_pairs, as_url)):
        env = env_for(database, kubeconfig, POD_SWEEPER_LISTEN_DATABASE_URL=listen)
        for args in (["status"], ["check", "--namespace", "sandboxes"], ["migrate"], ["settings"]):
            done = subprocess.run(
                [sys.executable, "-m", "pod_sweeper", *args], env=env, capture_output=True, text=True, timeout=30
            )
            outputs += [done.stdout, done.stderr]
        proc = subprocess.Popen(
            [sys.executable, "-m", "pod_sweeper", "run"],
            env=env,
            stderr=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stderr is not None
        line = "."
        while line and "retrying in" not in line:  # the first failed attempt, with where it tried
            line = proc.stderr.readline()
            outputs.append(line)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        outputs += [out, err]
    text = "".join(outputs)
    assert f"{keyword}=***" in text  # the connection details were shown, masked
    assert secret not in text


PLUGIN_SECRET = "plugin-env-s3cret"
BASIC_PASSWORD = "basic-s3cret-pw"


def test_a_credential_plugins_failure_quoting_its_secrets_shows_neither(db_url: str, kube: Any, tmp_path: Path) -> None:
    """A kubeconfig user whose exec plugin fails and writes to its stderr the secret its environment gave
    it and the user's password: the client's loader logs that stderr itself, as it falls back to the
    password, and neither the one-shot ``check`` nor the daemon shows either secret, at DEBUG, in text
    or JSON lines, while the plugin's words around them still show."""
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    document = json.loads(kubeconfig.read_text())
    quote = "import os, sys; sys.stderr.write('cannot renew: ' + os.environ['PLUGIN_SECRET'] + ' / ' + sys.argv[1])"
    document["users"][0]["user"] = {
        "username": "sweeper",
        "password": BASIC_PASSWORD,
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": sys.executable,
            "args": ["-c", quote + "; sys.exit(1)", BASIC_PASSWORD],
            "env": [{"name": "PLUGIN_SECRET", "value": PLUGIN_SECRET}],
            "interactiveMode": "Never",
        },
    }
    kubeconfig.write_text(json.dumps(document))
    outputs: list[str] = []
    outputs += cli_output(["check", "--namespace", "sandboxes"], env_for(db_url, kubeconfig))
    for json_logs in ("text", "json"):
        outputs += daemon_output(env_for(db_url, kubeconfig, POD_SWEEPER_LOG_FORMAT=json_logs), "cannot renew")
    text = "".join(outputs)
    assert text.count("cannot renew: [redacted] / [redacted]") == 3, text
    assert PLUGIN_SECRET not in text and BASIC_PASSWORD not in text
