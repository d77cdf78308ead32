"""One-line error texts: the first line of any exception, and why a connection attempt failed."""

from __future__ import annotations

import pytest

from pod_sweeper.core.errors import connection_failure, first_line


def test_first_line_of_an_empty_message_is_the_type() -> None:
    assert first_line(ValueError("")) == "ValueError"
    assert first_line(ValueError("\n  \n")) == "ValueError"
    assert first_line(ValueError("\n  one\ntwo")) == "one"


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            'connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  role "x" does not exist',
            'FATAL: role "x" does not exist (at 127.0.0.1:5432)',
        ),
        (
            'connection failed: connection to server at "10.0.0.2", port 6432 failed: Connection refused\n'
            "\tIs the server running on that host and accepting TCP/IP connections?",
            "Connection refused (at 10.0.0.2:6432)",
        ),
        (
            'connection failed: connection to server on socket "/run/pg/.s.PGSQL.5432" failed: '
            "No such file or directory",
            "No such file or directory (at /run/pg/.s.PGSQL.5432)",
        ),
        (
            'connection failed: connection to server at "h2", port 5432 failed: server is not in hot standby mode\n'
            "Multiple connection attempts failed. All failures were:\n- host: 'h1' ...",
            "server is not in hot standby mode (at h2:5432)",
        ),
        ("timeout expired", "timeout expired"),
    ],
    ids=["refused-role", "refused-connection", "socket", "multi-host", "other"],
)
def test_connection_failure_is_the_servers_reason_and_where(message: str, expected: str) -> None:
    assert connection_failure(Exception(message)) == expected
