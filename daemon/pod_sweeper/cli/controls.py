"""``pause``, ``unpause``, ``hold`` and ``release``: an on-call's levers, narrower than scaling every
replica to zero and reversible by one command (docs/operations.md, "Stop it now"); and the levers
beside them, ``reset-breaker`` (close a tripped breaker after a look), ``release-transaction`` and
``discard-transaction`` (end the wait of a large host transaction the breaker's rule keeps back, after a
preview) and ``prune`` (the done history older than the retention, at once).

Each command writes its change and its audit row in one transaction (store/admin/controls.py), says in one
line what it did, and exits 2 with one line on a bad argument. A pause or a hold stops new claims at
once on every replica (the claim reads them); rows already claimed are not recalled, so each command
says how many may still be sent and until when, and ``pause --wait`` returns once none is in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from pod_sweeper.cli import args as flag
from pod_sweeper.core.errors import EXIT_FAILURE, EXIT_OK, ConfigError
from pod_sweeper.core.settings import Settings
from pod_sweeper.core.text import printable
from pod_sweeper.kube.scope import invalid_name, valid_namespace
from pod_sweeper.store.admin import controls
from pod_sweeper.store.db import Connection, connection
from pod_sweeper.store.reads import status
from pod_sweeper.store.schema import migrations
from pod_sweeper.store.sweep import breaker, channel, retention

DEFAULT_FOR = timedelta(hours=1)
MAX_FOR = timedelta(hours=24)  # longer needs --until: a forgotten pause must end by itself
WAIT_POLL_SECONDS = 0.5


def window_of(args: argparse.Namespace) -> controls.Window:
    """When a pause or a hold ends: ``--until`` (an ISO 8601 time), else ``--for`` (at most MAX_FOR;
    default DEFAULT_FOR) from the database's clock, never this machine's: an on-call laptop with a
    wrong clock neither shortens nor lengthens it. That ``--until`` is still to come is the database's
    to say too (``controls.pause`` and ``hold`` return None for a time that has passed)."""
    if args.until is not None:
        if args.for_ is not None:
            raise ConfigError("give --for or --until, not both")
        try:
            until = datetime.fromisoformat(args.until)
        except ValueError:
            raise ConfigError(f"--until {args.until!r}: expected an ISO 8601 time, e.g. 2026-12-05T09:00Z") from None
        return controls.Window(until=until if until.tzinfo else until.replace(tzinfo=UTC))
    if args.for_ is None:
        return controls.Window(length=DEFAULT_FOR)
    try:
        length = flag.duration(args.for_)
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"argument --for: {exc}") from None
    if length > MAX_FOR:
        hours = MAX_FOR.total_seconds() / 3600
        raise ConfigError(f"argument --for: {args.for_!r}: at most {hours:g} h (longer: --until)")
    return controls.Window(length=length)


def _passed(args: argparse.Namespace) -> ConfigError:
    return ConfigError(f"--until {args.until}: that time has passed (by the database's clock); nothing changed")


def _namespace(text: str | None) -> str:
    if text is None:
        return controls.WHOLE_CLUSTER
    if not valid_namespace(text):
        raise ConfigError(f"--namespace {text!r} is not a valid Kubernetes namespace")
    return text


def _pod(text: str) -> tuple[str, str]:
    namespace, _, name = text.partition("/")
    if not name or (why := invalid_name(namespace, name)) is not None:
        raise ConfigError(f"{text!r}: expected NAMESPACE/POD" + (f" ({why})" if name else ""))
    return namespace, name


def _scope(cluster: str, namespace: str) -> str:
    return f"cluster {cluster}" + (f", namespace {namespace}" if namespace else "")


def _stamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _reason(text: str) -> str:
    if not text.strip():
        raise ConfigError("--reason must say why (it is shown by status and explain, and kept in the audit trail)")
    return text.strip()


async def cmd_pause(settings: Settings, args: argparse.Namespace) -> int:
    cluster, namespace = args.cluster or settings.cluster, _namespace(args.namespace)
    window, reason = window_of(args), _reason(args.reason)
    scope = _scope(cluster, namespace)
    async with connection(settings) as conn:
        await migrations.check_schema(conn)
        async with conn.transaction():
            until = await controls.pause(
                conn, cluster=cluster, namespace=namespace, window=window, reason=reason, actor=args.actor
            )
            if until is None:
                raise _passed(args)
            arguments = {"until": until.isoformat(), "reason": reason, **window.arguments()}
            await controls.audit(conn, controls.Action(args.actor, "pause", arguments, scope), affected=1)
        flying = await controls.in_flight(conn, cluster=cluster, namespace=namespace)
        print(f"paused {scope} until {_stamp(until)}: no new claims there from now on")
        if flying.rows and flying.last_lease_ends is not None:
            ends = _stamp(flying.last_lease_ends)
            hint = "" if args.wait else " (`pause --wait` returns once none is in flight)"
            print(f"{flying.rows} row(s) claimed before the pause may still be sent, until {ends}{hint}")
        if args.wait:
            return await _wait(conn, cluster, namespace, args.wait_timeout)
    return EXIT_OK


async def _wait(conn: Connection, cluster: str, namespace: str, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while (flying := await controls.in_flight(conn, cluster=cluster, namespace=namespace)).rows:
        if time.monotonic() >= deadline:
            print(f"still {flying.rows} row(s) in flight after {timeout:g} s")
            return EXIT_FAILURE
        await asyncio.sleep(WAIT_POLL_SECONDS)
    print("no row of the scope is in flight")
    return EXIT_OK


async def cmd_unpause(settings: Settings, args: argparse.Namespace) -> int:
    cluster, namespace = args.cluster or settings.cluster, _namespace(args.namespace)
    scope = _scope(cluster, namespace)
    async with connection(settings) as conn:
        await migrations.check_schema(conn)
        async with conn.transaction():
            # The trail row of a pause that ends is the database's to write (migration 0012), whoever
            # ends it; this command only names itself for it, and records a pause that was not there.
            action = controls.Action(args.actor, "unpause", {}, scope)
            await controls.name_command(conn, action)
            was = await controls.unpause(conn, cluster=cluster, namespace=namespace)
            if not was:
                await controls.audit(conn, action, affected=0)
            await channel.notify(conn, cluster=cluster)  # its replicas may sleep until their poll: wake them
    print(f"unpaused {scope}: claims resume" if was else f"{scope} was not paused")
    return EXIT_OK


async def cmd_hold(settings: Settings, args: argparse.Namespace) -> int:
    cluster, (namespace, name) = args.cluster or settings.cluster, _pod(args.pod)
    window, reason = window_of(args), _reason(args.reason)
    try:
        uid = uuid.UUID(args.uid) if args.uid is not None else None
    except ValueError:
        raise ConfigError(f"--uid {args.uid!r} is not a UUID") from None
    scope = f"cluster {cluster}, pod {namespace}/{name}" + (f" uid {uid}" if uid else "")
    async with connection(settings) as conn:
        await migrations.check_schema(conn)
        async with conn.transaction():
            until = await controls.hold(
                conn,
                cluster=cluster,
                namespace=namespace,
                name=name,
                uid=uid,
                window=window,
                reason=reason,
                actor=args.actor,
            )
            if until is None:
                raise _passed(args)
            arguments = {"until": until.isoformat(), "reason": reason, "uid": str(uid) if uid else None}
            arguments |= window.arguments()
            await controls.audit(conn, controls.Action(args.actor, "hold", arguments, scope), affected=1)
        flying = await controls.in_flight(conn, cluster=cluster, namespace=namespace, name=name)
    print(f"holding {namespace}/{name} in cluster {cluster} until {_stamp(until)}: its rows are not sent")
    if flying.rows and flying.last_lease_ends is not None:
        print(f"a row of it claimed before the hold may still be sent, until {_stamp(flying.last_lease_ends)}")
    return EXIT_OK


async def cmd_release(settings: Settings, args: argparse.Namespace) -> int:
    cluster, (namespace, name) = args.cluster or settings.cluster, _pod(args.pod)
    scope = f"cluster {cluster}, pod {namespace}/{name}"
    async with connection(settings) as conn:
        await migrations.check_schema(conn)
        async with conn.transaction():
            action = controls.Action(args.actor, "release", {}, scope)
            await controls.name_command(conn, action)  # the hold's end is recorded by the database, as above
            was = await controls.release(conn, cluster=cluster, namespace=namespace, name=name)
            if not was:
                await controls.audit(conn, action, affected=0)
            await channel.notify(conn, cluster=cluster)
    print(f"released {namespace}/{name}: its rows go on" if was else f"{namespace}/{name} was not held")
    return EXIT_OK


def login_name() -> str:
    """The login name, for the audit trail; a process whose user has no name (a container's uid
    without a passwd entry, and no USER or LOGNAME) is named by its uid instead of failing."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"


def add_actor(parser: argparse.ArgumentParser) -> None:
    """``--actor``: the operator's name in the audit trail (default: the login name)."""
    parser.add_argument("--actor", default=login_name(), help="your name in the audit trail (default: the login name)")


def add_parsers(commands: argparse._SubParsersAction[Any]) -> None:
    def timing(p: argparse.ArgumentParser, what: str) -> None:
        p.add_argument(
            "--for",
            dest="for_",
            metavar="DURATION",
            help=f"how long the {what} lasts: 90s, 15m, 2h, 1d (default 1h, at most 24h)",
        )
        p.add_argument("--until", metavar="TIME", help=f"when the {what} ends, ISO 8601 (instead of --for)")
        p.add_argument("--reason", required=True, help="why: shown by status, kept in the audit trail")
        add_actor(p)

    p = commands.add_parser("pause", help="stop claims in a cluster or one namespace of it, for a while")
    p.add_argument("--cluster", metavar="NAME", help="default: POD_SWEEPER_CLUSTER")
    p.add_argument("--namespace", metavar="NS", help="only this namespace (default: the whole cluster)")
    timing(p, "pause")
    p.add_argument("--wait", action="store_true", help="return once no row of the scope is in flight")
    p.add_argument(
        "--wait-timeout", type=flag.positive, default=120.0, metavar="SECONDS", help="with --wait (default 120)"
    )
    p.set_defaults(handler=cmd_pause)

    p = commands.add_parser("unpause", help="end a pause (claims resume at once)")
    p.add_argument("--cluster", metavar="NAME", help="default: POD_SWEEPER_CLUSTER")
    p.add_argument("--namespace", metavar="NS", help="the namespace paused (default: the whole cluster's pause)")
    add_actor(p)
    p.set_defaults(handler=cmd_unpause)

    p = commands.add_parser("hold", help="keep one pod's rows from being sent, for a while (forensics)")
    p.add_argument("pod", metavar="NAMESPACE/POD")
    p.add_argument("--cluster", metavar="NAME", help="default: POD_SWEEPER_CLUSTER")
    p.add_argument("--uid", help="only the pod with this UID (default: whichever pod holds the name)")
    timing(p, "hold")
    p.set_defaults(handler=cmd_hold)

    p = commands.add_parser("release", help="end a pod's hold")
    p.add_argument("pod", metavar="NAMESPACE/POD")
    p.add_argument("--cluster", metavar="NAME", help="default: POD_SWEEPER_CLUSTER")
    add_actor(p)
    p.set_defaults(handler=cmd_release)

    for name, what in (
        ("release-transaction", "let a large host transaction's rows go (the breaker's rule keeps them back)"),
        ("discard-transaction", "end a large host transaction's rows as discarded, no request sent"),
    ):
        p = commands.add_parser(name, help=what)
        p.add_argument("transaction", type=int, metavar="ID", help="its id, as `pod-sweeper status` lists it")
        p.add_argument("--yes", action="store_true", help="do it (without: a preview, nothing changed)")
        if name == "discard-transaction":
            p.add_argument("--reason", required=True, help="why: kept in the audit trail")
        add_actor(p)
        p.set_defaults(handler=cmd_end_transaction)


# --- a large host transaction the breaker's rule keeps back: let it go, or end its rows ---------------

PREVIEW_ROWS = 10


async def cmd_end_transaction(settings: Settings, args: argparse.Namespace) -> int:
    """``release-transaction ID`` / ``discard-transaction ID --reason``: without ``--yes``, the preview (the
    transaction, its open rows, ten of them) and nothing changed; with it, the change and its audit row
    in one transaction, and the cluster's replicas woken."""
    how = "discarded" if args.command == "discard-transaction" else "released"
    async with connection(settings) as conn:
        await migrations.check_schema(conn)
        kept = {t["id"]: t for t in await controls.large_transactions(conn)}
        found = kept.get(args.transaction)
        if found is None:
            known = ", ".join(str(i) for i in sorted(kept)) or "none"
            raise ConfigError(
                f"no large transaction {args.transaction} is kept back (kept back now: {known}; "
                "`pod-sweeper status` lists them)"
            )
        if not args.yes:
            print(
                _transaction_preview(
                    found, await controls.large_transaction_rows(conn, found["id"], limit=PREVIEW_ROWS)
                )
            )
            print(
                f"nothing changed; run again with --yes to {'discard its rows' if how == 'discarded' else 'release it'}"
            )
            return EXIT_OK
        scope = f"cluster {found['cluster']}"
        arguments = {"transaction": found["id"], "began": found["enqueued_at"], "reason": getattr(args, "reason", None)}
        async with conn.transaction():
            ended = await controls.end_transaction(conn, found["id"], how=how, actor=args.actor)
            if ended is not None:  # ended by someone else meanwhile: no trail row for what did not happen
                command = "discard-transaction" if how == "discarded" else "release-transaction"
                affected = int(ended["discarded"] if how == "discarded" else ended["open_rows"])
                await controls.audit(conn, controls.Action(args.actor, command, arguments, scope), affected)
                await channel.notify(conn, cluster=found["cluster"])
    if ended is None:
        print(f"large transaction {found['id']} was ended by someone else meanwhile; nothing changed")
    elif how == "discarded":
        print(f"large transaction {found['id']}: {ended['discarded']} row(s) discarded, no request sent")
    else:
        print(f"large transaction {found['id']} released: its {ended['open_rows']} open row(s) are swept from now on")
    return EXIT_OK


def _transaction_preview(found: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    lines = [
        f"large transaction {found['id']} (cluster {found['cluster']}): "
        f"begun {found['enqueued_at']:%Y-%m-%d %H:%M:%S}, "
        f"{found['open_rows']} open row(s) ({found['rows_found']} when found {found['found_at']:%Y-%m-%d %H:%M:%S} "
        f"by {found['found_by']}): {found['reason']}"
    ]
    lines += [f"  {r['pod_namespace']}/{r['pod_name']} uid {r['pod_uid']}, sandbox {r['sandbox_id']}" for r in rows]
    if found["open_rows"] > len(rows):
        lines.append(f"  ... and {found['open_rows'] - len(rows)} more")
    return "\n".join(printable(line) for line in lines)


# --- the breaker's reset and the history's prune: levers too, audited like the rest ------------------


async def cmd_prune(settings: Settings, args: argparse.Namespace) -> int:
    older_than = args.older_than if args.older_than is not None else settings.retention.total_seconds()
    async with connection(settings) as conn:
        await migrations.check_schema(conn)
        deleted = await retention.prune(conn, retention_seconds=older_than, batch=args.batch)
        # Batches commit one by one (they must not hold up the claims): the trail records the pass after.
        action = controls.Action(args.actor, "prune", {"older_than_seconds": older_than}, "")
        async with conn.transaction():
            await controls.audit(conn, action, affected=deleted or 0)
    if deleted is None:
        print("another replica is pruning right now; nothing done")
    else:
        print(f"deleted {deleted} done row(s) finished more than {older_than:g} s ago")
    return EXIT_OK


async def cmd_reset_breaker(settings: Settings, args: argparse.Namespace) -> int:
    """Close a cluster's tripped blast-radius breaker (the breaker trips by itself; a person resets it)."""
    cluster = args.cluster or settings.cluster
    async with connection(settings) as conn:
        await migrations.check_schema(conn)
        scope = "every cluster" if args.all_clusters else f"cluster {cluster}"
        async with conn.transaction():
            touched = await breaker.reset_breakers(
                conn, cluster=cluster, all_clusters=args.all_clusters, who=f"{args.actor} (reset-breaker)"
            )
            resumed = sorted(name for name, was_tripped in touched.items() if was_tripped)
            await controls.audit(
                conn, controls.Action(args.actor, "reset-breaker", {"resumed": resumed}, scope), len(resumed)
            )
        still = [b["cluster"] for b in await status.breakers(conn) if b["tripped_at"] is not None]
        for name in resumed:  # the cluster's replicas sleep until their poll: wake them now
            await channel.notify(conn, cluster=name)
    if resumed:
        print(f"breaker closed, deletes resume in cluster {', '.join(resumed)}")
    elif cluster not in touched and not args.all_clusters:
        print(f"cluster {cluster} has no breaker yet (no replica of it has started): nothing to reset")
    else:
        print(
            f"the breaker of cluster {cluster} was not tripped" if not args.all_clusters else "no breaker was tripped"
        )
    if still:
        print(
            f"still tripped: cluster {', '.join(still)} (`pod-sweeper reset-breaker --cluster NAME`)", file=sys.stderr
        )
    return EXIT_OK
