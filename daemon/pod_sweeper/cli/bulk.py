"""``retry`` and ``discard`` on many rows: filters (cluster, namespace, status, outcome, a substring of
the last error, age, ids), ``--dry-run`` for a count and a sample that changes nothing, and a bound:
``--limit N``, or ``--yes`` when more than CONFIRM_ABOVE rows match.

The rows are read a page at a time and changed a page at a time, each page in its own short
transaction with its audit row (store/admin/bulk.py), so a bulk action of any size never holds up the
daemon's claims, and a page that fails leaves the pages before it done and recorded.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import Any

from pod_sweeper.cli import args as flag
from pod_sweeper.cli.controls import add_actor
from pod_sweeper.core.errors import EXIT_FAILURE, EXIT_OK, ConfigError
from pod_sweeper.core.settings import Settings
from pod_sweeper.core.states import Outcome, Status
from pod_sweeper.core.text import printable
from pod_sweeper.store.admin import bulk, controls
from pod_sweeper.store.db import Connection, connection
from pod_sweeper.store.schema import migrations

CONFIRM_ABOVE = 1000  # a bulk action on more rows needs --limit or --yes
SAMPLE = 10  # rows a dry run lists
LIST_UP_TO = 20  # the ids changed are listed up to this many

# What each action may touch, and what it does with a row.
STATUSES = {"retry": (Status.DEAD, Status.DONE), "discard": (Status.PENDING, Status.DEAD)}
DONE_VERB = {"retry": "reopened", "discard": "discarded"}


def filters_of(args: argparse.Namespace) -> bulk.Filters:
    """The filters the flags give. Ids alone match any status the action may touch; otherwise the
    status is --status, or dead (``retry --dead`` is the same)."""
    allowed = STATUSES[args.command]
    narrowed = any(
        v is not None for v in (args.cluster, args.namespace, args.outcome, args.error_contains, args.older_than)
    )
    if args.command == "retry" and not (args.dead or args.ids or narrowed or args.status):
        raise ConfigError("retry needs --dead, one or more row ids, or a filter (see `pod-sweeper retry --help`)")
    if args.command == "discard" and not (args.ids or narrowed or args.status):
        raise ConfigError("discard needs one or more row ids or a filter (see `pod-sweeper discard --help`)")
    if args.status is not None:
        statuses: tuple[Status, ...] = (Status(args.status),)
        if statuses[0] not in allowed:
            raise ConfigError(f"--status {args.status}: {args.command} acts on {' or '.join(allowed)} rows only")
    else:
        statuses = allowed if args.ids and not narrowed else (Status.DEAD,)
    if Status.DONE in statuses and args.namespace is None and not args.ids:
        # The done rows are the history: read through their (namespace, name) index or by id, never all.
        raise ConfigError("--status done needs --namespace or row ids: the done history is not read whole")
    if args.outcome is not None and args.outcome not in {o.value for o in Outcome}:
        raise ConfigError(f"--outcome {args.outcome!r}: one of {', '.join(o.value for o in Outcome)}")
    return bulk.Filters(
        statuses=statuses,
        cluster=args.cluster,
        namespace=args.namespace,
        outcome=args.outcome,
        contains=args.error_contains,
        older_than=args.older_than.total_seconds() if args.older_than is not None else None,
        ids=tuple(args.ids),
    )


async def _matched(conn: Connection, filters: bulk.Filters) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    async for page in bulk.matching(conn, filters):
        rows.extend(page)
    return rows


def per_cluster(rows: list[dict[str, Any]]) -> str:
    """How many of the rows each cluster has, for a preview and a result: an action that spans more
    than one cluster's rows says so (``--cluster`` narrows it to one)."""
    counts = Counter(row["cluster"] for row in rows)
    if len(counts) < 2:
        return "".join(f" in cluster {name}" for name in counts)
    return f" in {len(counts)} clusters: " + ", ".join(f"{name} {n}" for name, n in sorted(counts.items()))


def _line(row: dict[str, Any]) -> str:
    error = f": {row['last_error'][:100]}" if row["last_error"] else ""
    where = f"{row['pod_namespace']}/{row['pod_name']} (cluster {row['cluster']})"
    return printable(f"  {row['id']}  {row['status']:<7}  {where}  attempts {row['attempts']}{error}", 300)


async def cmd_bulk(settings: Settings, args: argparse.Namespace) -> int:
    action = args.command
    filters = filters_of(args)
    if action == "discard" and not (args.reason or "").strip():
        raise ConfigError("discard needs --reason (it is kept in the audit trail)")
    async with connection(settings) as conn:
        await migrations.check_schema(conn)
        rows = await _matched(conn, filters)
        if args.limit is not None:
            rows = rows[: args.limit]
        elif len(rows) > CONFIRM_ABOVE and not args.yes and not args.dry_run:
            raise ConfigError(
                f"{len(rows)} rows match, more than {CONFIRM_ABOVE}: pass --limit N, or --yes to {action} them all"
            )
        if args.dry_run:
            print(f"would {action} {len(rows)} row(s){per_cluster(rows)}; nothing changed")
            for row in rows[:SAMPLE]:
                print(_line(row))
            if len(rows) > SAMPLE:
                print(f"  ... and {len(rows) - SAMPLE} more")
            return EXIT_OK
        done = await _act(conn, action, [r["id"] for r in rows], filters, args)
    shown = f": {', '.join(map(str, done))}" if 0 < len(done) <= LIST_UP_TO else ""
    changed = set(done)
    print(f"{DONE_VERB[action]} {len(done)} row(s){per_cluster([r for r in rows if r['id'] in changed])}{shown}")
    left = sorted(set(args.ids) - set(done))
    if left:
        print(
            f"not {DONE_VERB[action]} (no such row, or not {' or '.join(STATUSES[action])}): "
            f"{', '.join(map(str, left))}",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    return EXIT_OK


async def _act(
    conn: Connection, action: str, ids: list[int], filters: bulk.Filters, args: argparse.Namespace
) -> list[int]:
    """The action, a page per transaction, each with its audit row."""
    done: list[int] = []
    arguments = {k: v for k, v in filters.params().items() if v not in (None, [])}
    # How the bound was passed: the trail shows why this many rows changed.
    arguments |= {"limit": args.limit, "yes": args.yes, "matched": len(ids)}
    if action == "discard":
        arguments["reason"] = args.reason
    for start in range(0, len(ids), bulk.PAGE):
        page = ids[start : start + bulk.PAGE]
        async with conn.transaction():
            if action == "retry":
                changed = await bulk.retry(conn, page, who=f"{args.actor} (retry)")
            else:
                changed = await bulk.discard(conn, page)
            trail = controls.Action(args.actor, action, {**arguments, "page": start // bulk.PAGE + 1}, "")
            await controls.audit(conn, trail, affected=len(changed))
        done.extend(changed)
    return sorted(done)


def add_parsers(commands: argparse._SubParsersAction[Any]) -> None:
    def common(p: argparse.ArgumentParser, action: str) -> None:
        p.add_argument("ids", nargs="*", type=flag.count, metavar="ID", help="row ids")
        p.add_argument("--cluster", metavar="NAME", help="only rows of this cluster")
        p.add_argument("--namespace", metavar="NS", help="only rows of this namespace")
        p.add_argument(
            "--status", choices=[s.value for s in STATUSES[action]], help="only rows in this status (default: dead)"
        )
        p.add_argument("--outcome", metavar="OUTCOME", help="only done rows with this outcome")
        p.add_argument("--error-contains", metavar="TEXT", help="only rows whose last error contains TEXT")
        p.add_argument(
            "--older-than",
            type=flag.duration,
            metavar="DURATION",
            help="only rows unchanged for this long: 90s, 15m, 2h, 1d",
        )
        p.add_argument("--dry-run", action="store_true", help="print the count and a sample; change nothing")
        p.add_argument("--limit", type=flag.count, metavar="N", help="act on at most N rows (in id order)")
        p.add_argument("--yes", action="store_true", help=f"act on more than {CONFIRM_ABOVE} rows without --limit")
        add_actor(p)
        p.set_defaults(handler=cmd_bulk)

    p = commands.add_parser("retry", help="reopen dead rows (or done rows by id or filter) with attempts reset")
    p.add_argument("--dead", action="store_true", help="every dead row (with filters: the dead ones matching)")
    common(p, "retry")

    p = commands.add_parser("discard", help="end rows as done, outcome discarded, without a request (kept in audit)")
    p.add_argument("--reason", help="why (required; kept in the audit trail)")
    common(p, "discard")
