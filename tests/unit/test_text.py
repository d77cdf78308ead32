"""What a person reads is safe to read: ``core.text.printable`` and the text log format."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest
from loguru import logger

from pod_sweeper.core.logs import setup_logging
from pod_sweeper.core.text import ELLIPSIS, REDACTED, printable, redacted

HOSTILE = "evil\x1b[31mRED\x1b[0m\nnewline\r\u202egnp.exe\x07"


def test_control_characters_are_escaped_and_ordinary_text_is_not() -> None:
    shown = printable(HOSTILE)
    assert shown == "evil\\x1b[31mRED\\x1b[0m\\nnewline\\r\\u202egnp.exe\\x07"
    assert shown.isprintable()
    for plain in ("pod-a-1", "café ß 東京", "tab-free spaces", ""):
        assert printable(plain) == plain
    assert printable(42) == "42" and printable(None) == "None"


def test_a_long_value_is_cut_with_an_ellipsis() -> None:
    assert printable("a" * 10_000, 60) == "a" * 59 + ELLIPSIS
    assert printable("short", 60) == "short"
    assert len(printable("\x1b" * 100, 20)) == 20  # cut after escaping: the width is what is shown


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    out = io.StringIO()
    yield out
    setup_logging()


def test_text_logs_escape_what_a_value_carries(stream: io.StringIO) -> None:
    setup_logging("text", "INFO", stream)
    logger.error("row {id} is dead: pod {pod}", id=7, pod=HOSTILE)
    [line] = stream.getvalue().splitlines()  # one line: the newline in the value did not forge another
    assert "\x1b" not in line and "\u202e" not in line and "evil\\x1b[31mRED" in line


def test_json_logs_keep_the_value_whole_for_json_to_escape(stream: io.StringIO) -> None:
    setup_logging("json", "INFO", stream)
    logger.error("pod {pod}", pod=HOSTILE)
    [line] = stream.getvalue().splitlines()
    assert "\x1b" not in line  # JSON escapes it
    assert json.loads(line)["pod"] == HOSTILE


def test_a_secret_is_cut_wherever_it_occurs_and_whatever_overlaps_it() -> None:
    """Every occurrence, overlapping ones and ones that overlap another secret: no order of the secrets
    leaves part of one showing, and each run of cut characters shows once."""
    assert redacted("abcdef and cdef", ["abcd", "cdef"]) == f"{REDACTED} and {REDACTED}"  # not "...ef"
    assert redacted("aaaa", ["aa"]) == REDACTED
    assert redacted("token tok-1 again tok-1.", ["tok-1", ""]) == f"token {REDACTED} again {REDACTED}."
    assert redacted("nothing here", []) == "nothing here" and redacted("", ["x"]) == ""
