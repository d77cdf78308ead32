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

from pod_sweeper.core.logs import hide, setup_logging


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


def test_a_hidden_secret_is_cut_from_every_line_and_traceback_whoever_wrote_it(stream: io.StringIO) -> None:
    """Once hidden, a secret never shows: not in our own lines (message or keyword field, a string or not),
    not in a stdlib logger's (the kubernetes loader logs an exec plugin's stderr itself), not in a
    traceback's message nor its chained cause's."""
    hide("tok-unit-7781", "")
    setup_logging("text", "DEBUG", stream)
    logger.info("renewing {what}", what="tok-unit-7781")
    logging.getLogger("kubernetes").error("exec: process returned 1. tok-unit-7781 refused")
    try:
        try:
            raise RuntimeError("refresh of tok-unit-7781 failed")
        except RuntimeError as exc:
            raise ValueError("bearer tok-unit-7781") from exc
    except ValueError:
        logger.exception("a request failed")
    setup_logging("json", "DEBUG", stream)
    logger.bind(error=RuntimeError("got tok-unit-7781 back"), seen=["tok-unit-7781"]).warning("a hook failed")
    text = stream.getvalue()
    assert "tok-unit-7781" not in text
    assert "refresh of [redacted] failed" in text and "ValueError: bearer [redacted]" in text
    assert "exec: process returned 1. [redacted] refused" in text and "renewing [redacted]" in text
    entry = json.loads(text.splitlines()[-1])
    assert (entry["error"], entry["seen"]) == ("got [redacted] back", ["[redacted]"])


def test_a_short_value_is_never_hidden_and_renewed_tokens_never_push_out_a_lasting_secret(
    stream: io.StringIO,
) -> None:
    """Five characters are no credential, and hiding them would cut them from every word; a kubeconfig's
    secrets stay hidden however many tokens are renewed after them, and only the newest renewed ones do."""
    hide("abcde", "kubeconfig-secret-4410")
    for n in range(100):
        hide(f"renewed-token-{n:03d}", renewed=True)
    setup_logging("text", "INFO", stream)
    logger.info("abcde kubeconfig-secret-4410 renewed-token-000 renewed-token-099")
    assert "abcde [redacted] renewed-token-000 [redacted]" in stream.getvalue()
