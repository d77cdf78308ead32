"""The fake API server's injected misbehaviour (``Fault``: a status, a delay, a drop, a hang, a lost
response) and its request log (``LoggedRequest``), which tests assert on: tests/harness/fakekube.py's."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Fault:
    """One injected misbehaviour, matched on method and path, used ``times`` times (None: for ever).

    ``action``: ``status`` (answer ``code`` with a Status body; ``text`` for the plain-text 429),
    ``delay`` (wait ``seconds`` then serve normally), ``drop`` (close the connection, no answer),
    ``hang`` (keep the connection open with no answer for ``seconds``, then close),
    ``drop_after`` (serve normally, then close the connection before the answer: a lost response).
    """

    action: str
    method: str | None = None
    path: str | None = None
    code: int = 500
    reason: str | None = None
    retry_after: float | None = None
    text: bool = False
    seconds: float = 0.0
    times: int | None = 1
    used: int = 0

    def matches(self, method: str, path: str) -> bool:
        if self.times is not None and self.used >= self.times:
            return False
        if self.method and self.method != method:
            return False
        return not (self.path and not re.search(self.path, path))


DEFAULT_REASONS = {
    401: "Unauthorized",
    403: "Forbidden",
    409: "Conflict",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


@dataclass
class LoggedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    status: int | None
    at: float = field(default_factory=time.monotonic)
    authorization: str | None = None
