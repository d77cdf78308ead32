"""The value types of the command line's flags, so that every number and duration a user types is
checked the same way, before any command runs.

Each is an argparse ``type``: argparse calls it with the text, and a bad value becomes one line that
names the flag as the user typed it (``argument --limit: ...``) and exit 2, with nothing changed.
"""

from __future__ import annotations

import argparse
import math
import re
from datetime import timedelta

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MIN_DURATION = timedelta(seconds=1)


def duration(text: str) -> timedelta:
    """'90s', '15m', '2h', '1d' (a number and a unit), at least a second."""
    match = _DURATION.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number and a unit, e.g. 90s, 15m, 2h or 1d")
    length = timedelta(seconds=float(match[1]) * _UNITS[match[2]])
    if length < MIN_DURATION:
        raise argparse.ArgumentTypeError(f"{text!r}: at least 1 s")
    return length


def count(text: str) -> int:
    """A whole number of rows (or of anything else), 1 or more."""
    try:
        value = int(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number, 1 or more") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number, 1 or more")
    return value


def positive(text: str) -> float:
    """A number of seconds or a rate: finite and above 0."""
    try:
        value = float(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number above 0") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number above 0")
    return value
