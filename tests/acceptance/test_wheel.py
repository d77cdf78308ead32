"""The wheel carries sql/ and migrations/: build it, install it into a fresh virtual environment, and
run ``pod-sweeper migrate`` from there, far from the source tree."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from pod_sweeper.store.migrations import shipped

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_installs_and_migrates(tmp_path: Path, empty_db_url: str) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
    )
    [wheel] = dist.glob("pod_sweeper-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "pod_sweeper/migrations/0001_outbox.sql" in names
    assert "pod_sweeper/sql/claim.sql" in names and "pod_sweeper/sql/dba/lag.sql" in names

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
