"""Failpoints cannot hurt a user: a bad value is one line and exit 2 from any command, never a
traceback; an armed one says so at start, in a WARNING and a gauge (the chaos suite arms them:
tests/chaos)."""

from __future__ import annotations

import io
from typing import Any

import psycopg

from helpers import DaemonThread, cli, daemon_settings
from pod_sweeper.core import failpoints
from pod_sweeper.core.logs import setup_logging


def test_a_bad_value_is_one_line_and_exit_2_from_any_command(db_url: str) -> None:
    for args in (("status",), ("sql",), ("run",)):
        result = cli(*args, url=db_url, POD_SWEEPER_FAILPOINTS="garbage")
        assert result.returncode == 2, (args, result.stderr)
        [line] = result.stderr.strip().splitlines()
        assert line.startswith("pod-sweeper: invalid setting POD_SWEEPER_FAILPOINTS: cannot read 'garbage'")
        assert "Traceback" not in result.stdout + result.stderr


def test_an_armed_failpoint_is_a_warning_and_a_gauge_at_start(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    out = io.StringIO()
    setup_logging("text", "INFO", out)
    try:
        # Armed on a hit that never comes: the daemon runs as usual, and says it is armed.
        with DaemonThread(daemon_settings(db_url, kube, failpoints="after_answer=raise@1000000")) as daemon:
            assert daemon.daemon.metrics.value("pod_sweeper_failpoints_armed") == 1
    finally:
        setup_logging()
        failpoints.arm("")  # the process's points, disarmed for the tests after this one
    [line] = [x for x in out.getvalue().splitlines() if "failpoints armed" in x]
    assert "WARNING" in line and "after_answer" in line and "for chaos tests only" in line
