"""Logging: loguru for our own lines, with the stdlib loggers of psycopg, urllib3 and kubernetes
routed through it so that every line has one format.

``text`` is for people at a terminal; ``json`` writes one object per line (time, level, message, the
logger's name and any keyword fields) for journald and log shippers. Under systemd, when the output
is the journal (``$JOURNAL_STREAM``), each line starts with its syslog priority (``<4>`` for a
warning), which journald files the line under and strips (``SyslogLevelPrefix=yes``), so
``journalctl -p warning`` works. Log calls use loguru's ``{}`` placeholders with keyword arguments,
which also land as fields in the JSON lines.

Every line is cut of the secrets the process was told of (``hide``: the Kubernetes credentials, as
they are loaded and renewed), whoever wrote it: a credential plugin's error that quotes its token, the
client library's own lines. Tracebacks never show local variables (loguru's ``diagnose`` is off): a
frame of the client's holds the ``Authorization`` header.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import traceback
from typing import TYPE_CHECKING, Any, TextIO

from loguru import logger

from pod_sweeper.core.text import printable, redacted

if TYPE_CHECKING:
    from loguru import Message, Record

# {extra[shown]}: the message with its control characters escaped (see _escaped): a value from the
# database or the API server cannot colour, rewrite or forge a line at a terminal or in the journal.
# {extra[trace]}: the traceback, if any, cut of the hidden secrets (loguru's {exception} cannot be).
_TEXT_FORMAT = (
    "<green>{time:YYYY-MM-DD HH:mm:ss.SSS}</green> <level>{level: <7}</level> <cyan>{name}</cyan> {extra[shown]}\n"
    "{extra[trace]}"
)
# journald stamps each line itself; the "<N>" prefix is the syslog priority it files the line under.
_JOURNAL_TEXT_FORMAT = "{level: <7} {name} {extra[shown]}\n{extra[trace]}"
# loguru level -> syslog priority (journalctl -p): debug 7, info 6, notice 5, warning 4, err 3, crit 2.
_PRIORITY = {"TRACE": 7, "DEBUG": 7, "INFO": 6, "SUCCESS": 5, "WARNING": 4, "ERROR": 3, "CRITICAL": 2}


def writes_to_journal(stream: TextIO) -> bool:
    """Whether ``stream`` is systemd's journal stream: ``$JOURNAL_STREAM`` names its device and inode
    (set by systemd for a service whose output goes to the journal)."""
    expected = os.environ.get("JOURNAL_STREAM")
    if not expected:
        return False
    try:
        info = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (a test's StringIO)
        return False
    return expected == f"{info.st_dev}:{info.st_ino}"


# The secrets every line is cut of, each kept as one tuple replaced whole (a single store under the GIL),
# so a sink reading them on any thread finds a complete one; writers take _HIDING. Those a configuration
# holds for good (a kubeconfig's) are all kept; those renewed as the process runs (a token an hour, or
# every few minutes from an exec plugin) only the newest _MOST_RENEWED: every line is looked through
# for each.
_lasting: tuple[str, ...] = ()
_renewed: tuple[str, ...] = ()
_HIDING = threading.Lock()
_MOST_RENEWED = 64
# Shorter is no credential (a token, a key, a password a server accepts), and cut out of every line it
# would make the lines unreadable: "abc" hidden cuts it from every word that holds it.
SHORTEST_HIDDEN = 6


def hide(*secrets: str, renewed: bool = False) -> None:
    """Cut each of ``secrets`` out of every line logged from now on (one shorter than ``SHORTEST_HIDDEN``
    is left: no credential is that short, and cutting it everywhere would leave the lines unreadable).
    ``renewed``: a credential the process renews as it runs; only the newest of those are kept."""
    global _lasting, _renewed
    known = (*_lasting, *_renewed)
    fresh = [s for s in dict.fromkeys(secrets) if len(s) >= SHORTEST_HIDDEN and s not in known]
    if not fresh:
        return
    with _HIDING:
        if renewed:
            _renewed = (*(s for s in _renewed if s not in fresh), *fresh)[-_MOST_RENEWED:]
        else:
            _lasting = (*dict.fromkeys((*_lasting, *fresh)),)


def hidden() -> tuple[str, ...]:
    """The secrets hidden so far, for text that leaves the process by another way (a row's last error)."""
    return (*_lasting, *_renewed)


def scrub(text: str) -> str:
    """``text`` cut of every secret hidden so far."""
    secrets = hidden()
    return redacted(text, secrets) if secrets and text else text


def _escaped(record: Record) -> None:
    record["extra"]["shown"] = printable(scrub(record["message"]))
    caught = record["exception"]
    if caught is None:
        record["extra"]["trace"] = ""
    else:  # the standard rendering, cut: loguru's own ({exception}) is rendered where nothing can cut it
        trace = traceback.format_exception(caught.type, caught.value, caught.traceback)
        record["extra"]["trace"] = scrub("".join(trace))


def _text_format(record: Record) -> str:
    _escaped(record)
    return _TEXT_FORMAT


def _journal_format(record: Record) -> str:
    _escaped(record)
    # "\<" keeps loguru from reading "<6>" as a colour tag.
    return f"\\<{_PRIORITY.get(record['level'].name, 6)}>" + _JOURNAL_TEXT_FORMAT


_ROUTED = ("psycopg", "psycopg.pool", "urllib3", "kubernetes")


class _InterceptHandler(logging.Handler):
    """Hands stdlib log records to loguru, keeping their level and their caller."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            level: str | int = logger.level(record.levelname).name
        except ValueError:
            level = record.levelno
        logger.bind(logger_name=record.name).opt(depth=6, exception=record.exc_info).log(level, record.getMessage())


def _json_sink(stream: TextIO, *, journal: bool = False) -> Any:
    prefix = _PRIORITY if journal else None

    def sink(message: Message) -> None:
        record: Record = message.record
        entry: dict[str, Any] = {
            "ts": record["time"].isoformat(),
            "level": record["level"].name,
            "msg": record["message"],
            "logger": record["extra"].get("logger_name", record["name"]),
        }
        for key, value in record["extra"].items():
            if key != "logger_name":
                entry[key] = value
        if record["exception"] is not None and record["exception"].type is not None:
            entry["exception"] = f"{record['exception'].type.__name__}: {record['exception'].value}"
        priority = f"<{prefix.get(record['level'].name, 6)}>" if prefix is not None else ""
        # Cut as written, whatever each field was: an exception or a list given as a keyword field is
        # only text here.
        stream.write(priority + scrub(json.dumps(entry, default=str)) + "\n")
        stream.flush()

    return sink


def setup_logging(log_format: str = "text", level: str = "INFO", stream: TextIO | None = None) -> None:
    """(Re)configure every sink; idempotent, so the CLI can call it again once settings are read."""
    out = stream if stream is not None else sys.stderr
    journal = writes_to_journal(out)
    logger.remove()
    if log_format == "json":
        logger.add(_json_sink(out, journal=journal), level=level, format="{message}", diagnose=False)
    elif journal:
        logger.add(out, level=level, format=_journal_format, colorize=False, diagnose=False)
    else:
        logger.add(out, level=level, format=_text_format, colorize=out.isatty(), diagnose=False)
    handler = _InterceptHandler()
    logging.basicConfig(handlers=[handler], level=0, force=True)
    for name in _ROUTED:
        stdlib = logging.getLogger(name)
        stdlib.handlers = [handler]
        stdlib.propagate = False
        # urllib3 is chatty at DEBUG about every connection; keep it at WARNING unless tracing.
        stdlib.setLevel(logging.DEBUG if level in ("TRACE", "DEBUG") and name != "urllib3" else logging.WARNING)
