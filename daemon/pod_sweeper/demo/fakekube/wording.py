"""How a real kube-apiserver words its answers, for the fake: Status bodies, the 404 of a missing pod,
label selectors as the server reads them, and what the shipped Role grants (the access reviews answer
from it)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

Pod = dict[str, Any]

# What deploy/role.yaml grants in a namespace, resource -> verbs (tests/unit/test_deploy.py holds the
# two equal): the access reviews answer from it.
GRANTED: dict[str, tuple[str, ...]] = {"pods": ("get", "list", "delete"), "events": ("create",)}


def now_utc() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def timestamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def status_body(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``kind: Status`` failure body as the API server writes it."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


def not_found(name: str) -> tuple[int, dict[str, Any]]:
    return 404, status_body(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})


# --- label selectors ------------------------------------------------------------------------------

_SET_TERM = re.compile(r"^\s*([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_selector(selector: str) -> list[str]:
    terms, depth, current = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += ch
    if current.strip():
        terms.append(current)
    return terms


def selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """Equality- and set-based label selectors (``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``,
    ``a in (x,y)``, ``a notin (x)``)."""
    for raw in _split_selector(selector):
        term = raw.strip()
        set_term = _SET_TERM.match(term)
        if set_term:
            key, op, values = set_term[1], set_term[2], {v.strip() for v in set_term[3].split(",")}
            if op == "in" and labels.get(key) not in values:
                return False
            if op == "notin" and key in labels and labels[key] in values:
                return False
        elif "!=" in term:
            key, value = (p.strip() for p in term.split("!=", 1))
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = (p.strip() for p in term.replace("==", "=").split("=", 1))
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:].strip() in labels:
                return False
        elif term not in labels:
            return False
    return True
