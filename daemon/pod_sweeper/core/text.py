"""Text for a person's terminal. Values that come from the database or the API server (a pod name, an
error message, a host table's name) are data: a writer of the host table must not be able to colour,
rewrite or forge the lines an operator reads. So every such value is shown with its control characters
escaped (``\\x1b``, ``\\n``, and the bidirectional overrides that reorder what a line seems to say), and
a table cell is cut with an ellipsis; the whole value stays in ``--json``, where JSON escapes it.
"""

from __future__ import annotations

import unicodedata

# Explicit direction marks, embeddings, overrides and isolates: printable to Python, but they reorder
# the characters around them on the screen.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
ELLIPSIS = "\u2026"


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
