"""``pod-sweeper demo``: the newcomer's first minute runs, sweeps, and cleans up after itself."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.versions]


def demo(*args: str) -> subprocess.Popen[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("POD_SWEEPER_")}
    return subprocess.Popen(
        [sys.executable, "-m", "pod_sweeper", "demo", "--seed", "3", *args],
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_demo_sweeps_and_removes_what_it_started() -> None:
    # A high rate keeps the control plane and the daemon inside queries when the stop comes, which is
    # when a task cancelled twice made psycopg log two warnings; a normal stop logs none.
    proc = demo("--duration", "5", "--rate", "300")
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    assert "WARNING" not in err, err
    root = re.search(r"started a throwaway PostgreSQL in (\S+)", out)
    assert root and not Path(root[1]).exists()
    final = out.rsplit("pod-sweeper demo", 1)[1]
    deleted = re.search(r"done: deleted\s+(\d+)", final)
    assert deleted and int(deleted[1]) > 50
    assert "dead                  0" in final
    assert "everything it started is gone" in out


def test_ctrl_c_stops_the_demo_cleanly() -> None:
    proc = demo("--rate", "10")
    assert proc.stdout is not None
    lines = []
    while "Ctrl-C stops" not in (line := proc.stdout.readline()):
        lines.append(line)
        assert line, proc.stderr.read() if proc.stderr else ""
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert "everything it started is gone" in out
    root = re.search(r"started a throwaway PostgreSQL in (\S+)", "".join(lines))
    assert root and not Path(root[1]).exists()
