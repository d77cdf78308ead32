"""The exceptions pod-sweeper raises, each carrying the process exit code it stands for.

The CLI turns any of these into one line on stderr and the code below, so that operators get a clear
message instead of a traceback, and scripts can tell bad configuration from a missing schema.
"""

from __future__ import annotations

import re

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG = 2
EXIT_SCHEMA = 3


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message, or its type's name when it has none."""
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__


# libpq's "connection to server at HOST, port PORT failed: REASON" (psycopg prefixes "connection failed: ").
_LIBPQ_FAILED = re.compile(
    r'connection to server (?:at "(?P<host>[^"]*)", port (?P<port>\d+)|on socket "(?P<sock>[^"]*)") failed: '
)


def connection_failure(exc: BaseException) -> str:
    """Why a connection attempt failed, in one line: the server's own words (``FATAL: role "x" does not
    exist``, ``Connection refused``) and where, without libpq's repeated preamble. With several hosts,
    psycopg's first line is the attempt that decided."""
    line = first_line(exc).removeprefix("connection failed: ")
    match = _LIBPQ_FAILED.search(line)
    if match is None:
        return line
    where = match["sock"] or f"{match['host']}:{match['port']}"
    reason = re.sub(r"^(FATAL|ERROR):\s+", r"\1: ", line[match.end() :])
    return f"{reason} (at {where})"


class PodSweeperError(Exception):
    """Base class: something went wrong that the operator must hear about in one line."""

    exit_code = EXIT_FAILURE


class ConfigError(PodSweeperError):
    """A setting, a flag or a config file is invalid."""

    exit_code = EXIT_CONFIG


class SchemaError(PodSweeperError):
    """The database schema is missing, partial, or of another version."""

    exit_code = EXIT_SCHEMA


class PrivilegeError(PodSweeperError):
    """The database role lacks a privilege on pod-sweeper's schema (``pod-sweeper grant`` gives them):
    like a schema that is behind, a person or the chart's hook must act, so it shares that exit code."""

    exit_code = EXIT_SCHEMA


class MigrationError(PodSweeperError):
    """A migration cannot be applied, or an applied one was edited afterwards."""


class MigrationLockTimeout(MigrationError):
    """``migrate`` could not take a migration's locks within its lock timeout until its deadline; the
    message names the oldest transaction that held a lock on our tables. Nothing of it was applied."""


class AttachError(PodSweeperError):
    """The table given to ``attach`` does not fit the column mapping; nothing was changed."""

    exit_code = EXIT_CONFIG


class DatabaseUnavailable(PodSweeperError):
    """The database cannot be reached or refused the connection."""
