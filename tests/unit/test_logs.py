"""Logging: JSON lines carry keyword fields; stdlib loggers (psycopg, urllib3, kubernetes) land in the
same sink."""

from __future__ import annotations

import io
import json
import logging

import pytest
from loguru import logger

from pod_sweeper.logs import setup_logging

pytestmark = pytest.mark.unit


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
