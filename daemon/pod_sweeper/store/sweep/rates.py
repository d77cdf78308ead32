"""How fast rows arrive and leave, and what holds vacuum back: the reads of the breaker's surge watch,
of the rate gauges and of ``status``. Each is bounded by the open rows and a short window of done ones
(the claim index and the done_at index), never by the done history."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pod_sweeper.store import queries
from pod_sweeper.store.db import Connection


@dataclass(frozen=True)
class Arrivals:
    """What the surge watch read of one cluster (``sql/breaker_arrivals.sql``), since its last reset."""

    arrived: int  # host retires enqueued within the window
    window: float  # seconds the count covers
    tripped_reason: str | None  # the breaker as it is now (None: not tripped)

    @property
    def rate(self) -> float:
        return self.arrived / self.window if self.window > 0 else 0.0


async def arrivals(
    conn: Connection,
    *,
    cluster: str,
    window: float,
    dry_run: bool = False,
    shadow: Sequence[str] = (),
    transaction_rows: int = 0,
) -> Arrivals | None:
    """The cluster's arrivals of the last ``window`` seconds that a replica may delete now (none kept by a
    pause or a hold, none in dry run: everywhere with ``dry_run``, or in the ``shadow`` namespaces), and
    none of a host transaction of ``transaction_rows`` or more (the transaction rule's); None when it has
    no breaker row yet."""
    params = {
        "cluster": cluster,
        "window": window,
        "dry_run": dry_run,
        "shadow": sorted(shadow) or None,
        "transaction_rows": transaction_rows,
    }
    row = await (await conn.execute(queries.load("breaker_arrivals"), params)).fetchone()
    if row is None:
        return None
    return Arrivals(int(row["arrived"]), window, row["tripped_reason"])


async def recent_rate(conn: Connection, *, cluster: str, seconds: float) -> float:
    """The cluster's host retires a second over the last ``seconds``."""
    params = {"cluster": cluster, "seconds": seconds}
    row = await (await conn.execute(queries.load("breaker_recent_rate"), params)).fetchone()
    return float(row["rate"]) if row is not None else 0.0


@dataclass(frozen=True)
class ClusterRates:
    """One cluster's rows a second over the last minute (``sql/cluster_rates.sql``)."""

    cluster: str
    arrival_rate: float = 0.0
    sweep_rate: float = 0.0


async def cluster_rates(conn: Connection) -> list[ClusterRates]:
    """Every cluster's arrival and sweep rates."""
    rows = await (await conn.execute(queries.load("cluster_rates"))).fetchall()
    return [ClusterRates(r["cluster"], float(r["arrival_rate"]), float(r["sweep_rate"])) for r in rows]


@dataclass(frozen=True)
class XminHolder:
    """One thing that holds the database's xmin horizon back (``sql/xmin_horizon.sql``)."""

    kind: str  # transaction, slot, prepared, standby
    holder: str  # a pid, a slot's name, a prepared transaction's gid, a standby's application_name
    detail: str | None  # its state, the slot's type, the owner, the standby's address
    age_xids: int
    seconds: float | None  # how long it has held it, where PostgreSQL says

    def describe(self) -> str:
        pinned = f"{self.seconds:.0f} s" if self.seconds is not None else f"{self.age_xids} transactions"
        detail = f" ({self.detail})" if self.detail else ""
        names = {"transaction": "pid", "slot": "replication slot", "prepared": "prepared transaction"}
        return f"{names.get(self.kind, self.kind)} {self.holder}{detail}, held {pinned}"


async def xmin_holders(conn: Connection) -> list[XminHolder]:
    """What pins the xmin horizon, oldest first (at most 5)."""
    rows = await (await conn.execute(queries.load("xmin_horizon"))).fetchall()
    return [XminHolder(r["kind"], r["holder"], r["detail"], int(r["age_xids"]), r["seconds"]) for r in rows]


# A holder is worth a warning past these: five minutes of a transaction (a sweep at 100 retires a second
# leaves some 90,000 row versions behind in that time), or, for a slot or a standby that has no time,
# the transactions such a span takes on a busy database.
PINNED_LONG_SECONDS = 300.0
PINNED_LONG_XIDS = 100_000


def pinned_long(holders: list[XminHolder]) -> XminHolder | None:
    """The first holder that has pinned the horizon long enough to warn of, or None."""
    for holder in holders:
        if (holder.seconds if holder.seconds is not None else 0.0) >= PINNED_LONG_SECONDS:
            return holder
        if holder.seconds is None and holder.age_xids >= PINNED_LONG_XIDS:
            return holder
    return None
