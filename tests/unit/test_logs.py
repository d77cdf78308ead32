"""Logging: JSON lines carry keyword fields; stdlib loggers (psycopg, urllib3, kubernetes) land in the
same sink."""

from __future__ import annotations

import io
import json
import logging
import os
from pathlib import Path

import pytest
from loguru import logger

from pod_sweeper.core.logs import setup_logging


@pytest.fixture
def stream() -> io.StringIO:
    out = io.StringIO()
    yield out
    setup_logging()


def test_json_lines_carry_fields(stream: io.StringIO) -> None:
    setup_logging("json", "INFO", stream)
    logger.info("claimed {count} rows", count=3)
    entry = json.loads(stream.getvalue().splitlines()[-1])
    assert entry["msg"] == "claimed 3 rows"
    assert entry["count"] == 3
    assert entry["level"] == "INFO"
    assert entry["logger"] == "tests.unit.test_logs" or entry["logger"].endswith("test_logs")


def test_stdlib_loggers_are_routed(stream: io.StringIO) -> None:
    setup_logging("json", "INFO", stream)
    logging.getLogger("kubernetes.client.rest").warning("from the client")
    logging.getLogger("psycopg.pool").warning("from the pool")
    entries = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(e["logger"], e["msg"]) for e in entries] == [
        ("kubernetes.client.rest", "from the client"),
        ("psycopg.pool", "from the pool"),
    ]


def test_text_format_and_level(stream: io.StringIO) -> None:
    setup_logging("text", "WARNING", stream)
    logger.info("hidden")
    logger.warning("shown {x}", x=1)
    assert "hidden" not in stream.getvalue()
    assert "WARNING" in stream.getvalue() and "shown 1" in stream.getvalue()


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_under_systemd_each_line_starts_with_its_journal_priority(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log_format: str
) -> None:
    path = tmp_path / "journal"
    with path.open("w") as journal:
        info = os.fstat(journal.fileno())
        monkeypatch.setenv("JOURNAL_STREAM", f"{info.st_dev}:{info.st_ino}")
        setup_logging(log_format, "DEBUG", journal)
        logger.debug("d")
        logger.info("i")
        logger.warning("w")
        logger.error("e")
        logger.critical("c")
        setup_logging()
    prefixes = [line[:3] for line in path.read_text().splitlines()]
    assert prefixes == ["<7>", "<6>", "<4>", "<3>", "<2>"]
    if log_format == "json":  # journald strips the prefix; what stays is one JSON object
        assert json.loads(path.read_text().splitlines()[2][3:])["msg"] == "w"


def test_not_the_journal_stream_means_no_prefix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOURNAL_STREAM", "1:2")  # systemd's, but this file is not it
    path = tmp_path / "log"
    with path.open("w") as out:
        setup_logging("json", "INFO", out)
        logger.warning("w")
        setup_logging()
    assert path.read_text().startswith("{")
