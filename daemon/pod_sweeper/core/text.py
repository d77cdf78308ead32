"""Text for a person's terminal. Values that come from the database or the API server (a pod name, an
error message, a host table's name) are data: a writer of the host table must not be able to colour,
rewrite or forge the lines an operator reads. So every such value is shown with its control characters
escaped (``\\x1b``, ``\\n``, and the bidirectional overrides that reorder what a line seems to say), and
a table cell is cut with an ellipsis; the whole value stays in ``--json``, where JSON escapes it.
"""

from __future__ import annotations

import itertools
import unicodedata
from collections.abc import Iterable

# Explicit direction marks, embeddings, overrides and isolates: printable to Python, but they reorder
# the characters around them on the screen.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
ELLIPSIS = "\u2026"
REDACTED = "[redacted]"


def printable(value: object, limit: int | None = None) -> str:
    """``value`` as text with every control character escaped, cut to ``limit`` characters."""
    text = value if isinstance(value, str) else str(value)
    if not text.isprintable():
        text = "".join(
            ch.encode("unicode_escape").decode("ascii")
            if ch in _BIDI or unicodedata.category(ch) in ("Cc", "Zl", "Zp")
            else ch
            for ch in text
        )
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + ELLIPSIS
    return text


def redacted(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every character that belongs to an occurrence of any of ``secrets`` cut, each run of
    such characters shown once as ``[redacted]``. The occurrences are found in the text as given, all of
    them, overlapping ones too, so no order of the secrets can leave part of one showing (replacing one
    after another could: "abcd" cut first leaves "ef" of "cdef" in "abcdef")."""
    found = [secret for secret in {s for s in secrets if s} if secret in text]
    if not found:
        return text  # every log line comes through here: no list for a line that holds none
    cut = [False] * len(text)
    for secret in found:
        start = text.find(secret)
        while start != -1:
            cut[start : start + len(secret)] = [True] * len(secret)
            start = text.find(secret, start + 1)
    runs = itertools.groupby(zip(text, cut, strict=True), key=lambda pair: pair[1])
    return "".join(REDACTED if hidden else "".join(ch for ch, _ in run) for hidden, run in runs)
