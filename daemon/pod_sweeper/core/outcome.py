"""How a finished outbox row ended: the ``outcome`` column's values, a contract DBAs read.

It belongs to neither side: the Kubernetes side says which outcome an answer means, the database side
records it, and neither should import the other for it.
"""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    """How a finished row ended (the ``outcome`` column)."""

    DELETED = "deleted"
    ABSENT = "absent"
    REPLACED = "replaced"
    SKIPPED_ACTIVE = "skipped_active"
    WOULD_DELETE = "would_delete"
