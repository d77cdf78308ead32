"""``pod-sweeper status`` for people and scripts: what ``store.reads.status`` read, as tables for a terminal
(every value from the database escaped: see ``core.text``) or as JSON."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from pod_sweeper.core.settings import DEFAULT_CLUSTER
from pod_sweeper.core.text import printable
from pod_sweeper.store.sweep import rates


def _of(cluster: str) -> str:
    """ " (cluster NAME)" for a cluster other than the default one, which needs no name."""
    return "" if cluster == DEFAULT_CLUSTER else f" (cluster {cluster})"


CELL_WIDTH = 60  # characters of one table cell; longer values end in an ellipsis (whole in --json)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    return printable(value, CELL_WIDTH)


def render_table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [headers, *[[_cell(v) for v in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_text(status: dict[str, Any]) -> str:
    """The status for a terminal: every value from the database escaped (see ``core.text``)."""
    return "\n".join(printable(line) for line in _render_text(status).split("\n"))


def _outcome(row: dict[str, Any]) -> str | None:
    """A summary line's outcome, with what its count covers: done rows are counted over the last hour,
    and all of them only as the planner estimates (store/reads/status.py: never a read of the history)."""
    if row.get("estimated"):
        return "all (planner's estimate)"
    if row.get("counted_since") is not None:
        return f"{row['outcome']} (last hour)"
    return row["outcome"]  # type: ignore[no-any-return]


def _render_text(status: dict[str, Any]) -> str:
    lag = status["lag"]
    lag_rows = [
        ["pending", lag.get("pending")],
        ["claimable", lag.get("claimable")],
        ["backoff", lag.get("backoff")],
        ["claimed", lag.get("claimed")],
        ["dead", lag.get("dead")],
        ["oldest claimable (s)", lag.get("oldest_claimable_seconds")],
        ["oldest in backoff (s)", lag.get("oldest_backoff_seconds")],
        ["oldest claim (s)", lag.get("oldest_claim_seconds")],
        ["rejected retires", lag.get("rejected")],
    ]
    summary_rows = [
        [r["status"], _outcome(r), r["rows"], r["oldest_enqueued_at"], r["last_updated_at"]] for r in status["summary"]
    ]
    parts = [
        render_table(["lag", "value"], lag_rows),
        render_table(["status", "outcome", "rows", "oldest enqueued", "last updated"], summary_rows)
        if summary_rows
        else "outbox is empty",
    ]
    waiting = status.get("waiting") or []
    if waiting:
        rows = [[w["cluster"], w["reason"], w["rows"], w["oldest_seconds"], w["act"]] for w in waiting]
        parts.append(
            "why open rows wait (`pod-sweeper explain` says it of one row; docs/operations.md, 'Why a row waits')\n"
            + render_table(["cluster", "reason", "rows", "oldest (s)", "to act"], rows)
        )
    for guard in status.get("replication_guard") or []:
        behind = (
            f"the slowest has flushed {_cell(guard['lag_bytes'])} bytes behind ({_cell(guard['lag_seconds'])} s)"
            if guard["lag_bytes"] is not None
            else "their positions unread (none connected, or this role lacks pg_monitor)"
        )
        parts.append(
            f"replication guard{_of(guard['cluster'])} ({', '.join(guard['standbys'])}): {guard['connected']} "
            f"connected, {guard['missing']} missing; {behind}; holds {guard['kept_back_rows']} row(s)"
        )
    replicas = status.get("replicas") or []
    if replicas:
        rows = [
            [
                r["cluster"],
                r["replica"],
                r["host"],
                r["release"],
                r["state"],
                "yes" if r["ready"] else "no",
                ", ".join(sorted(r["waits"])) or "-",
                r["seen_seconds_ago"],
                r["settings"]["replication guard"],
                r["settings"]["dry run"],
            ]
            for r in replicas
        ]
        headers = ["cluster", "replica", "host", "release", "state", "ready", "waits", "seen (s ago)"]
        headers += ["guard", "dry run"]
        parts.append("replicas (pod_sweeper.replicas: their heartbeats)\n" + render_table(headers, rows))
    for cluster, differ in sorted((status.get("disagreements") or {}).items()):
        parts.append(
            f"the live replicas{_of(cluster) or ' (cluster ' + cluster + ')'} disagree on {', '.join(differ)}: "
            "each row waits by the replica that claims it (the table above, replica by replica)"
        )
    failures = status.get("recent_failures") or []
    if failures:
        keys = ["id", "status", "cluster", "pod_namespace", "pod_name", "attempts", "last_http_status", "last_error"]
        parts.append("recent failures\n" + render_table(keys, [[r[k] for k in keys] for r in failures]))
    rejects = status.get("recent_rejects") or []
    if rejects:
        keys = [
            "id",
            "attachment_id",
            "cluster",
            "sandbox_id",
            "generation",
            "pod_namespace",
            "pod_name",
            "pod_uid",
            "problem",
        ]
        parts.append(
            "rejected retires (nothing enqueued: fix the host rows, then clear them from pod_sweeper.rejects)\n"
            + render_table(keys, [[r[k] for k in keys] for r in rejects])
        )
    stuck = status.get("stuck_claims") or []
    if stuck:
        keys = ["id", "cluster", "claimed_by", "claimed_at", "lease_expires_at", "attempts", "pod_name"]
        parts.append(
            "expired claims (waiting for a takeover)\n" + render_table(keys, [[r[k] for k in keys] for r in stuck])
        )
    terminating = status.get("stuck_terminating") or []
    if terminating:
        keys = ["id", "cluster", "pod_namespace", "pod_name", "pod_uid", "done_at", "stuck_at"]
        parts.append(
            "pods still terminating past the limit\n" + render_table(keys, [[r[k] for k in keys] for r in terminating])
        )
    by_rate = status.get("rates") or []
    if by_rate:
        rows = [[r["cluster"], r["arrival_rate"], r["sweep_rate"]] for r in by_rate]
        parts.append(
            "rows a second over the last minute (arrived above swept for minutes: the backlog grows)\n"
            + render_table(["cluster", "arrived/s", "swept/s"], rows)
        )
    pinning = rates.pinned_long([rates.XminHolder(**h) for h in status.get("xmin_horizon") or []])
    if pinning is not None:
        parts.insert(
            0,
            f"XMIN HORIZON PINNED by {pinning.describe()}: vacuum can remove no row version younger than it, so "
            "every claim and record costs more the longer it lasts (docs/dba.md, 'A snapshot kept open')",
        )
    clusters = status.get("clusters") or []
    if any(c["cluster"] != DEFAULT_CLUSTER for c in clusters):
        keys = ["cluster", "pending", "claimable", "backoff", "claimed", "oldest_claimable_seconds", "last_claimed_at"]
        parts.append("open rows by cluster\n" + render_table(keys, [[c[k] for k in keys] for c in clusters]))
    for reconcile in status.get("reconcile") or []:
        if not reconcile.get("last_started_at"):
            continue
        parts.append(
            f"reconciliation{_of(reconcile['cluster'])}: last pass {_cell(reconcile['last_started_at'])} by "
            f"{reconcile['last_replica']}, {_cell(reconcile['last_pods_seen'])} labelled pod(s) seen, "
            f"{_cell(reconcile['last_enqueued'])} enqueued; {reconcile['suspects']} suspect(s) in quarantine"
            + (f" (oldest since {_cell(reconcile['oldest_suspect_since'])})" if reconcile["suspects"] else "")
            + (f"\nlast pass stopped early: {reconcile['last_error']}" if reconcile.get("last_error") else "")
        )
    wakeups = status.get("wakeup") or []
    for wakeup in wakeups:
        state = "armed (a sweeper sleeps: retires NOTIFY)" if wakeup["armed"] else "clear (a sweeper is claiming)"
        parts.append(
            f"wakeup flag{_of(wakeup['cluster'])}: {state}, since {_cell(wakeup['changed_at'])} "
            f"by {_cell(wakeup['changed_by'])}"
        )
    if not wakeups:
        parts.append("wakeup flag: row missing, so every retire NOTIFYs; INSERT INTO pod_sweeper.wakeup DEFAULT VALUES")
    for control in reversed(status.get("controls") or []):
        if control["kind"] == "pause":
            scope = f"cluster {control['cluster']}" + (
                f", namespace {control['pod_namespace']}" if control["pod_namespace"] else ""
            )
            parts.insert(
                0,
                f"PAUSED ({scope}) since {_cell(control['since'])} until {_cell(control['until'])} by "
                f"{control['actor']}: {control['reason']}\nno row there is claimed until then or `{undo(control)}`",
            )
        else:
            pod = f"{control['pod_namespace']}/{control['pod_name']}"
            parts.insert(
                0,
                f"HELD: pod {pod} (cluster {control['cluster']}) until {_cell(control['until'])} by "
                f"{control['actor']}: {control['reason']}\nits rows are not sent until then or `{undo(control)}`",
            )
    for outage in reversed(status.get("outages") or []):
        parts.insert(
            0,
            f"API SERVER UNREACHABLE (cluster {outage['cluster']}) since {_cell(outage['since'])}, reported by "
            f"{outage['replica']} (last probe {_cell(outage['probed_at'])}): {outage['reason']}\n"
            "its rows wait, uncharged; they are claimed again as soon as a probe is answered",
        )
    for large in reversed(status.get("large_transactions") or []):
        parts.insert(
            0,
            f"LARGE TRANSACTION KEPT BACK (cluster {large['cluster']}), id {large['id']}: "
            f"{large['open_rows']} open row(s) "
            f"retired in one host transaction begun {_cell(large['enqueued_at'])}, found {_cell(large['found_at'])} by "
            f"{large['found_by']}: {large['reason']}\nits rows are neither sent nor charged; every other row of the "
            f"cluster sweeps on. After a look: `pod-sweeper release-transaction {large['id']}` (a preview first) "
            f"or `pod-sweeper discard-transaction {large['id']} --reason TEXT`",
        )
    for sweepers in reversed(status.get("sweepers") or []):
        if sweepers["open_rows"] and not sweepers["live_replicas"]:
            parts.insert(0, no_live_replica(sweepers))
    for breaker in reversed(status.get("breakers") or []):
        if breaker.get("tripped_at"):
            parts.insert(
                0,
                f"BREAKER TRIPPED (cluster {breaker['cluster']}) at {_cell(breaker['tripped_at'])} by "
                f"{breaker['tripped_by']}: {breaker['reason']}\nno pod of cluster {breaker['cluster']} is deleted "
                f"until `pod-sweeper reset-breaker --cluster {breaker['cluster']}`",
            )
    return "\n\n".join(parts)


def no_live_replica(sweepers: dict[str, Any]) -> str:
    """The first thing ``status`` says of a cluster with open rows and no live replica (a row of
    ``sql/status_sweepers.sql``), or of one swept only by replicas that keep no row (an older release)."""
    rows = (
        f"(cluster {sweepers['cluster']}): {sweepers['open_rows']} open row(s), the oldest "
        f"enqueued {_cell(sweepers['oldest_open_seconds'])} s ago"
    )
    head = f"NO LIVE REPLICA {rows}"
    if sweepers["unseen"]:
        return (
            f"REPLICAS UNSEEN {rows}; {', '.join(sweepers['unseen'])} claimed or armed there and keep no row "
            "in pod_sweeper.replicas: replicas of a release before migration 0019 may be sweeping it (a "
            "rolling upgrade)"
        )
    return (
        f"{head}: nothing sweeps it; start a replica with POD_SWEEPER_CLUSTER={sweepers['cluster']}, or read the "
        "replicas' /readyz (docs/operations.md, 'PodSweeperNoLiveReplica')"
    )


def undo(control: dict[str, Any]) -> str:
    """The command that ends a pause or a hold (a row of ``sql/status_controls.sql``)."""
    if control["kind"] == "hold":
        return f"pod-sweeper release {control['pod_namespace']}/{control['pod_name']} --cluster {control['cluster']}"
    namespace = f" --namespace {control['pod_namespace']}" if control["pod_namespace"] else ""
    return f"pod-sweeper unpause --cluster {control['cluster']}{namespace}"


def render_json(status: dict[str, Any]) -> str:
    return json.dumps(status, default=str, sort_keys=True)
