"""Owner of the daemon's and the CLI's fixed SQL statements: each lives in ``sql/*.sql``, loaded by
name, so that DBAs can read (and EXPLAIN) exactly what runs; read-only queries meant for people live in
``sql/dba/``. Also the channel's name and the advisory lock keys.

The modules that write a statement of their own are listed in ``STATEMENTS_ELSEWHERE``, each with its
reason; tests/unit/test_queries.py holds the list to the code, both ways. Most name a host's own tables
and columns, which no fixed file can: those are composed, always through ``psycopg.sql.Identifier`` with
values as parameters.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import LiteralString, cast

from psycopg import sql

from pod_sweeper.core.resources import resource_dir
from pod_sweeper.core.settings import DEFAULT_CLUSTER

# The NOTIFY channel (a contract name, docs/design.md): the enqueue NOTIFYs it, the listener LISTENs on it.
# The default cluster's; another cluster's is CHANNEL/NAME (channel(), and pod_sweeper.channel() in SQL).
CHANNEL = "pod_sweeper"


def channel(*, cluster: str) -> str:
    """A cluster's NOTIFY channel: a replica hears its own cluster's retires and no other's."""
    return CHANNEL if cluster == DEFAULT_CLUSTER else f"{CHANNEL}/{cluster}"


class Lock(enum.IntEnum):
    """The transaction-scoped advisory lock keys, each the bytes of a short word read as a bigint.
    ``WAKEUP``'s value is also written in the enqueue of migrations 0007 and 0009 (an applied migration
    cannot change); the migration tier checks that the enqueue the database runs takes this key
    (``test_the_live_enqueue_takes_the_wakeup_lock_the_sweeper_arms_with``)."""

    MIGRATION = 0x706F6473776570  # "podswep": one migration at a time
    PRUNE = 0x706F647072756E  # "podprun": one retention pass at a time
    WAKEUP = 0x706F6477616B6575  # "podwakeu": enqueues hold it shared, arming takes it exclusively


def notify_params(payload: str = "", *, cluster: str) -> dict[str, str]:
    """The parameters of ``sql/notify.sql``: the cluster's channel and ``payload``."""
    return {"channel": channel(cluster=cluster), "payload": payload}


def listen(*, cluster: str) -> sql.Composed:
    """``LISTEN`` on the cluster's channel (a name, so composed rather than parameterised)."""
    return sql.SQL("LISTEN {}").format(sql.Identifier(channel(cluster=cluster)))


_HOST_TABLE = "reads of the host's own table, whose names are composed"
STATEMENTS_ELSEWHERE: Mapping[str, str] = {
    "store/admin/attach.py": "the trigger and its function on the host's table (composed), the catalog reads of"
    " its columns, and the attachments row written in the same transaction as that trigger",
    "store/admin/backfill.py": "the enqueue of the host's retired rows, composed from the enqueue rule, and the"
    " counts of what that very transaction enqueued and rejected (its now()), run beside it",
    "store/db.py": "the idle-in-transaction timeout each transaction (or a direct session) sets: part of the"
    " connection, under every statement, not one a caller runs",
    "store/queries.py": "LISTEN names the cluster's channel, an identifier, so it is composed (listen())",
    "store/reads/explain.py": _HOST_TABLE,
    "store/reads/waits.py": "the per-cluster count wraps sql/row_waits.sql as a subquery, so that explain and"
    " status read one statement",
    "store/schema/roles.py": "grants to a role named on the command line (composed)",
    "store/sweep/recheck.py": _HOST_TABLE,
    "cli/demo.py": "the demo's own database and its stand-in host application's writes, not pod-sweeper's",
    "demo/reference.py": "the reference host table's DDL: the host's schema (the demo's and the tests'),"
    " not pod-sweeper's",
}

# The tables and views whose rows belong to one Kubernetes cluster. A statement under sql/ that reads or
# writes one of them names its cluster (a ``%(cluster)s`` parameter), or is listed in SPANS_CLUSTERS
# with the reason it spans every cluster on purpose. tests/unit/test_queries.py holds every file to it.
CLUSTER_OWNED = (
    "outbox",
    "attempts",
    "breaker",
    "wakeup",
    "reconcile_state",
    "suspects",
    "pauses",
    "holds",
    "outages",
    "replicas",
    "large_transactions",
    "rejects",
    "lag",
    "lag_by_cluster",
    "summary",
)

_STATUS = "`pod-sweeper status` shows every cluster, each row with its cluster: one command for on-call"
_EXPLAIN = "`pod-sweeper explain` answers for a pod of any cluster and names the cluster of each row"
_BULK = "a bulk action spans the clusters its filters match (--cluster narrows); its preview counts per cluster"
_DBA = "a read-only query for people, over every cluster, each row with its cluster"
SPANS_CLUSTERS: Mapping[str, str] = {
    "prune": "retention is the database's, not a cluster's: whichever replica holds the prune lock keeps the"
    " whole outbox within it, so a cluster with no replica left is pruned too (a dry run's rows are kept)",
    "outage_prune": "the outage reports nobody renewed for an hour, of any cluster: their replicas are gone",
    "bulk_match": _BULK,
    "retry": _BULK + " (it acts on the ids bulk_match chose)",
    "discard": _BULK + " (it acts on the ids bulk_match chose)",
    "explain_outbox": _EXPLAIN,
    "explain_attempts": _EXPLAIN + " (the attempts of the rows explain_outbox found)",
    "explain_suspects": _EXPLAIN,
    "status_lag": "the whole outbox's lag, beside each cluster's (status_clusters, cluster_gauges)",
    "status_clusters": _STATUS,
    "cluster_gauges": "every replica exports every cluster's gauges, so a cluster whose replicas are all down"
    " still pages from the others",
    "cluster_rates": "every replica exports every cluster's rates, as cluster_gauges; `status` shows them",
    "status_summary": _STATUS,
    "status_failures": _STATUS,
    "status_rejects": _STATUS,
    "status_stuck": _STATUS,
    "status_terminating": _STATUS,
    "status_breaker": _STATUS,
    "status_outages": _STATUS,
    "status_reconcile": _STATUS,
    "status_wakeup": _STATUS,
    "status_controls": _STATUS,
    "status_replicas": _STATUS + "; the replicas of every cluster, and the open rows of each (a cluster with"
    " open rows and no live replica is the first thing it says)",
    "status_sweepers": _STATUS + "; who sweeps each cluster, a cluster with open rows and no live replica first"
    " (the metrics refresher exports it for every cluster, as cluster_gauges)",
    "status_large_transactions": _STATUS + "; the metrics refresher exports every cluster's, as cluster_gauges",
    "large_transaction_rows": "`release-transaction ID` previews the transaction it names, whatever its cluster",
    "large_transaction_end": "`release-transaction ID` and `discard-transaction ID` act on the transaction they"
    " name, whatever its cluster (its id is unique)",
    "large_transaction_prune": "retention is the database's, not a cluster's (as prune)",
    "replica_beat": "a heartbeat also deletes the rows of replicas of any cluster an hour gone (its own cluster's"
    " replicas may all be gone, so no replica of that cluster is left to delete them)",
    "breaker_reset": "`pod-sweeper reset-breaker --all-clusters` closes every tripped breaker (else the one named)",
    "dba/alerts": _DBA,
    "dba/dead": _DBA,
    "dba/lag": _DBA,
    "dba/open": _DBA,
    "dba/rejects": _DBA,
    "dba/replicas": _DBA,
}


@cache
def load(name: str) -> sql.SQL:
    """The statement in ``sql/NAME.sql`` (``dba/NAME`` for the hand-run queries)."""
    return shipped_sql(resource_dir("sql") / f"{name}.sql")


def shipped_sql(path: Path) -> sql.SQL:
    """The statement(s) in a file that ships with pod-sweeper (a query or a migration).

    A file we ship is as trusted as a literal in the source: it holds no values, only SQL, so it may
    stand where psycopg asks for a ``LiteralString``."""
    return shipped_sql_text(path.read_text(encoding="utf-8"))


def shipped_sql_text(text: str) -> sql.SQL:
    """A part of a shipped file (a migration's step): as trusted as the file, see ``shipped_sql``."""
    return sql.SQL(cast(LiteralString, text))  # type: ignore[redundant-cast]


def for_parameterized(trusted: str) -> sql.SQL:
    """Quoted SQL text (a name, a type from ``format_type``) for a statement that carries ``%s`` parameters.

    psycopg looks for placeholders in the whole composed text, quoted names included, so a host table
    or column called ``50%`` would break the statement; doubling ``%`` here makes the server see one.
    Use it only where the statement is executed with parameters (without them ``%%`` stays ``%%``)."""
    return sql.SQL(cast(LiteralString, trusted.replace("%", "%%")))  # type: ignore[redundant-cast]


def name_in_parameterized(*parts: str) -> sql.SQL:
    """``sql.Identifier(*parts)``, safe in a statement that carries parameters (see above)."""
    return for_parameterized(sql.Identifier(*parts).as_string())


def dba_query_names() -> list[str]:
    """Names of the shipped read-only queries for DBAs and on-call."""
    return sorted(p.stem for p in (resource_dir("sql") / "dba").glob("*.sql"))
