"""The commands that set a database up for pod-sweeper, a DBA's: ``migrate`` (and its ``--grant``),
``attach`` and ``detach`` (the trigger on a host table), ``grant`` (a migration-free runtime role's
privileges) and ``backfill`` (rows retired before the attach). Each audits what it did
(pod_sweeper.audit). Their flags are in cli/main.py's parser."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pod_sweeper.core.errors import EXIT_OK, ConfigError
from pod_sweeper.core.settings import DEFAULT_CLUSTER, Settings
from pod_sweeper.core.text import printable
from pod_sweeper.store.admin import attach, backfill, controls
from pod_sweeper.store.db import Connection, connection
from pod_sweeper.store.schema import migrations, roles


async def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    async with connection(settings) as conn, roles.explained_refusal("migrate"):
        pending = await migrations.migrate(
            conn,
            dry_run=args.dry_run,
            lock_timeout=settings.migrate_lock_timeout,
            deadline=settings.migrate_deadline,
            second=lambda: connection(settings),
        )
    if args.dry_run:
        for migration in pending:
            print(f"would apply {migration.filename}")
        print(f"{len(pending)} migration(s) to apply" if pending else "schema is up to date")
        if args.grant:
            print(f"would grant the runtime privileges to {args.grant}")
        return EXIT_OK
    print(f"applied {len(pending)} migration(s)" if pending else "schema is up to date")
    if args.grant:
        # After the migrations, as the same owner: the chart's hook makes a first install whole, so
        # its replicas never start before their role may read the schema (docs/operations.md).
        async with connection(settings) as conn:
            await _apply_grants(conn, args.grant, create=False, verifier=None, actor=args.actor)
    return EXIT_OK


async def _apply_grants(conn: Connection, role: str, *, create: bool, verifier: str | None, actor: str) -> None:
    statements = await roles.runtime_grants(conn, role, create=create, verifier=verifier)
    action = controls.Action(actor, "grant", {"create": create}, f"role {role}")
    async with conn.transaction():
        for statement in statements:
            await conn.execute(statement)
        await controls.audit(conn, action, affected=len(statements))
    print(f"granted the runtime privileges to {role}")


async def cmd_attach(settings: Settings, args: argparse.Namespace) -> int:
    target = attach.parse_table(args.table)
    mapping = attach.parse_mapping(args.column)
    async with connection(settings) as conn:
        await migrations.check_schema(conn)
        action = controls.Action(args.actor, "attach", {"columns": mapping, "cluster": args.cluster}, f"table {target}")
        async with roles.explained_refusal("attach", conn, target), conn.transaction():
            attachment_id = await attach.attach(conn, target, mapping, cluster=args.cluster)
            await controls.audit(conn, action, affected=1)
        nullable = await attach.nullable_columns(conn, target, mapping)
    print(f"attached {target} (attachment {attachment_id})")
    if nullable:
        print(
            f"warning: {', '.join(nullable)} allow NULL: a retire with NULL (or empty) there enqueues nothing"
            " and is recorded in pod_sweeper.rejects instead (`pod-sweeper status` counts them)",
            file=sys.stderr,
        )
    return EXIT_OK


async def cmd_detach(settings: Settings, args: argparse.Namespace) -> int:
    target = attach.parse_table(args.table)
    async with connection(settings) as conn:
        await migrations.check_schema(conn)
        async with roles.explained_refusal("detach", conn, target), conn.transaction():
            removed = await attach.detach(conn, target)
            await controls.audit(conn, controls.Action(args.actor, "detach", {}, f"table {target}"), int(removed))
    print(f"detached {target}" if removed else f"{target} was not attached")
    return EXIT_OK


def _password_from(source: str) -> str:
    """The role's password: the first line of a file, or of standard input for ``-``; never a flag's
    value (shell history, ``ps``)."""
    try:
        text = sys.stdin.readline() if source == "-" else Path(source).read_text(encoding="utf-8").split("\n", 1)[0]
    except OSError as exc:
        raise ConfigError(f"--password-file {source}: cannot read it ({exc.strerror or exc})") from None
    password = text.rstrip("\r\n")
    if not password:
        raise ConfigError(f"--password-file {source}: its first line is empty")
    return password


async def cmd_grant(settings: Settings, args: argparse.Namespace) -> int:
    if args.password_file is not None and not args.create:
        raise ConfigError("--password-file goes with --create (it sets the new role's password)")
    password = _password_from(args.password_file) if args.password_file is not None else None
    async with connection(settings) as conn:
        await migrations.check_schema(conn)
        verifier = roles.password_verifier(conn, args.role, password) if password is not None else None
        if args.apply:
            await _apply_grants(conn, args.role, create=args.create, verifier=verifier, actor=args.actor)
        else:
            for statement in await roles.runtime_grants(conn, args.role, create=args.create, verifier=verifier):
                # The verifier is not the password, but it is not for a terminal either.
                text = statement.as_string(conn)
                print((text.replace(verifier, "SCRAM-SHA-256$...") if verifier else text) + ";")
    return EXIT_OK


async def cmd_backfill(settings: Settings, args: argparse.Namespace) -> int:
    async with connection(settings) as conn:
        await migrations.check_schema(conn)
        async with conn.transaction():
            results = await backfill.backfill(conn, dry_run=args.dry_run)
            if not args.dry_run:
                enqueued = sum(r.enqueued for r in results)
                rejected = sum(r.rejected.total() for r in results)
                arguments = {"rejected": rejected}
                await controls.audit(conn, controls.Action(args.actor, "backfill", arguments, ""), affected=enqueued)
    verb = "would enqueue" if args.dry_run else "enqueued"
    for result in results:
        print(f"{result.table}: {verb} {result.enqueued} retired row(s) the outbox did not have")
        for sandbox_id, generation, namespace, pod, uid, cluster in result.sample if args.dry_run else ():
            where = "" if cluster == DEFAULT_CLUSTER else f" in cluster {cluster}"
            print(printable(f"  {sandbox_id} generation {generation}: {namespace}/{pod}{where} uid {uid}", 300))
        if result.rejected:
            # As the trigger does: a row the outbox cannot hold is a reject, never silently dropped.
            problems = "; ".join(f"{problem}: {n}" for problem, n in result.rejected.most_common())
            rejects = "would be recorded in" if args.dry_run else "recorded in"
            print(
                printable(
                    f"{result.table}: {result.rejected.total()} row(s) {rejects} pod_sweeper.rejects ({problems})"
                ),
                file=sys.stderr,
            )
    if not results:
        print("no attached table")
    return EXIT_OK
