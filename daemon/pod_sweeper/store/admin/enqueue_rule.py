"""The enqueue rule as SQL, written once for every path that enqueues from a host row.

docs/design.md, "The enqueue rule": which host rows are enqueued (a retire, a UID recorded on a
retired row, a deleted row that names a UID) and with what. The trigger ``attach`` generates and
``backfill`` both compose their SQL from here: the same WHEN predicates, and the same call of
``pod_sweeper.enqueue`` (or ``enqueue_text_uid`` for a UID kept as text), which checks every field
and records a row it cannot hold in ``pod_sweeper.rejects`` (migrations 0008 and 0009). So a row the
trigger would reject, backfill rejects too, with the same problem.

Every name goes through ``psycopg.sql.Identifier``; ``row`` is ``NEW``, ``OLD`` or a query's alias.
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import sql

from pod_sweeper.core.settings import DEFAULT_CLUSTER

# How each role's value reaches pod_sweeper.enqueue (None: as the column holds it).
_CASTS = {"sandbox_id": "text", "generation": "bigint", "pod_namespace": "text", "pod_name": "text", "cluster": "text"}


@dataclass(frozen=True)
class Rule:
    """One attached table's enqueue: its column ``mapping`` (role -> column), the column ``types``
    (column -> pg_type.typname) and the cluster of every row when no column names one."""

    attachment_id: int
    mapping: dict[str, str]
    types: dict[str, str]
    cluster: str = DEFAULT_CLUSTER

    def value(self, role: str, row: str) -> sql.Composable:
        column = sql.SQL("{}.{}").format(sql.SQL(row), sql.Identifier(self.mapping[role]))
        cast = _CASTS.get(role) if role != "pod_uid" else (None if self.uid_is_uuid else "text")
        return sql.SQL("{}::{}").format(column, sql.SQL(cast)) if cast else column

    @property
    def uid_is_uuid(self) -> bool:
        return self.types[self.mapping["pod_uid"]] == "uuid"

    def call(self, row: str, reason: str) -> sql.Composed:
        """``pod_sweeper.enqueue(...)`` of ``row``'s values: a UID held as text goes in as it is, and
        ``enqueue_text_uid`` records a malformed one as a reject (migration 0008)."""
        cluster = self.value("cluster", row) if "cluster" in self.mapping else sql.Literal(self.cluster)
        return sql.SQL("pod_sweeper.{}({}, {}, {}, {}, {}, {}, {}, {})").format(
            sql.Identifier("enqueue" if self.uid_is_uuid else "enqueue_text_uid"),
            sql.Literal(self.attachment_id),
            self.value("sandbox_id", row),
            self.value("generation", row),
            self.value("pod_namespace", row),
            self.value("pod_name", row),
            self.value("pod_uid", row),
            sql.Literal(reason),
            cluster,
        )

    def retired(self, row: str) -> sql.Composed:
        """A row that is retired and names a UID: the INSERT trigger's condition, and backfill's."""
        return sql.SQL("{} IS NOT NULL AND NOT {}").format(self.value("pod_uid", row), self.value("active", row))

    def when(self) -> dict[str, sql.Composed]:
        """The triggers' WHEN clauses: a retire (active goes false while a UID is set), a UID recorded
        or changed on a retired row, an inactive row inserted with a UID, a deleted row that names a
        UID. Anything else never calls the function."""
        new_uid, old_uid = self.value("pod_uid", "NEW"), self.value("pod_uid", "OLD")
        return {
            "ins": self.retired("NEW"),
            "upd": sql.SQL("{} AND ({} OR {} IS DISTINCT FROM {})").format(
                self.retired("NEW"), self.value("active", "OLD"), old_uid, new_uid
            ),
            "del": sql.SQL("{} IS NOT NULL").format(old_uid),
        }
