"""The ``pod-sweeper`` command line: parses flags, reads settings, runs one command, and turns every
failure into one line on stderr and the exit code docs/design.md fixes (0 ok, 1 failure, 2 bad
configuration or usage, 3 schema missing or of another version).

A command imports what it alone needs when it runs: the Kubernetes client (half a second to import) and
the daemon's machinery load for ``run`` and ``check``, never for ``status``, ``explain`` or the other
commands that talk to the database alone (tests/acceptance/test_cli.py holds that)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, NoReturn

import psycopg
from loguru import logger

from pod_sweeper import __version__
from pod_sweeper.cli import args as flag
from pod_sweeper.cli import bulk as bulk_cli
from pod_sweeper.cli import controls as controls_cli
from pod_sweeper.cli import status_text
from pod_sweeper.core.errors import EXIT_CONFIG, EXIT_FAILURE, EXIT_OK, ConfigError, PodSweeperError, first_line
from pod_sweeper.core.logs import setup_logging, writes_to_journal
from pod_sweeper.core.settings import (
    CONFIG_FILE_ENV,
    DEFAULT_CLUSTER,
    ENV_PREFIX,
    Settings,
    load_settings,
    unknown_environment,
)
from pod_sweeper.core.text import printable
from pod_sweeper.store import attach, backfill, controls, migrations, outbox, queries, roles, status
from pod_sweeper.store.db import Connection, connection

Handler = Callable[[Settings, argparse.Namespace], Coroutine[Any, Any, int]]


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # No abbreviations: an old flag's name must not silently mean a new one (`--password` read as
        # `--password-file`, its value then shown as a file name).
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        # One line, not argparse's usage block: the usage is one `--help` away. Unrecognized arguments
        # are named by their flags only: a value typed after an unknown flag may be a secret.
        if message.startswith("unrecognized arguments: "):
            words = message.removeprefix("unrecognized arguments: ").split()
            message = "unrecognized arguments: " + " ".join(w if w.startswith("-") else "(a value)" for w in words)
        self.exit(EXIT_CONFIG, f"pod-sweeper: {message} (see `pod-sweeper --help`)\n")


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


async def cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    async with connection(settings) as conn:
        await migrations.check_schema(conn)
        current = await status.read_status(conn, guard=settings.guard_standbys)
    print(status_text.render_json(current) if args.json else status_text.render_text(current))
    return EXIT_OK


async def cmd_explain(settings: Settings, args: argparse.Namespace) -> int:
    from pod_sweeper.cli import explain_text
    from pod_sweeper.store import explain

    async with connection(settings) as conn:
        await migrations.check_schema(conn)
        story = await explain.gather(conn, args.target, guard=settings.guard_standbys)
    print(explain_text.render_json(story) if args.json else explain_text.render_text(story))
    return EXIT_OK


async def cmd_run(settings: Settings, args: argparse.Namespace) -> int:
    from pod_sweeper.tasks.process import runner

    settings.require_database_url()
    logger.info(
        "starting pod-sweeper {version}; database {db}", version=__version__, db=settings.redacted_database_url()
    )
    return await runner.Daemon(settings).run()


async def cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    from pod_sweeper.cli.demo import run_demo  # the demo's stand-ins are not loaded by any other command

    url = args.database_url or (settings.database_url.get_secret_value() if settings.database_url else None)
    return await run_demo(url, args.rate, args.duration, args.seed)


async def cmd_prune(settings: Settings, args: argparse.Namespace) -> int:
    retention = args.older_than if args.older_than is not None else settings.retention.total_seconds()
    async with connection(settings) as conn:
        await migrations.check_schema(conn)
        deleted = await outbox.prune(conn, retention_seconds=retention, batch=args.batch)
        # Batches commit one by one (they must not hold up the claims): the trail records the pass after.
        action = controls.Action(args.actor, "prune", {"older_than_seconds": retention}, "")
        async with conn.transaction():
            await controls.audit(conn, action, affected=deleted or 0)
    if deleted is None:
        print("another replica is pruning right now; nothing done")
    else:
        print(f"deleted {deleted} done row(s) finished more than {retention:g} s ago")
    return EXIT_OK


async def cmd_sql(settings: Settings, args: argparse.Namespace) -> int:
    names = queries.dba_query_names()
    if args.name is None:
        print("\n".join(names))
        return EXIT_OK
    if args.name not in names:
        raise ConfigError(f"no shipped query {args.name!r}; there are: {', '.join(names)}")
    print(queries.load(f"dba/{args.name}").as_string().rstrip())
    return EXIT_OK


async def cmd_check(settings: Settings, args: argparse.Namespace) -> int:
    from pod_sweeper.cli import check

    settings.require_database_url()
    checks = await check.run_checks(settings, args.namespace)
    for item in checks:
        print(item)
    return EXIT_OK if all(c.ok for c in checks) else EXIT_FAILURE


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


async def cmd_reset_breaker(settings: Settings, args: argparse.Namespace) -> int:
    """Close a cluster's tripped blast-radius breaker (the breaker trips by itself; a person resets it)."""
    cluster = args.cluster or settings.cluster
    async with connection(settings) as conn:
        await migrations.check_schema(conn)
        scope = "every cluster" if args.all_clusters else f"cluster {cluster}"
        async with conn.transaction():
            touched = await outbox.reset_breakers(
                conn, cluster=cluster, all_clusters=args.all_clusters, who=f"{args.actor} (reset-breaker)"
            )
            resumed = sorted(name for name, was_tripped in touched.items() if was_tripped)
            await controls.audit(
                conn, controls.Action(args.actor, "reset-breaker", {"resumed": resumed}, scope), len(resumed)
            )
        still = [b["cluster"] for b in await status.breakers(conn) if b["tripped_at"] is not None]
        for name in resumed:  # the cluster's replicas sleep until their poll: wake them now
            await outbox.notify(conn, cluster=name)
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


async def cmd_settings(settings: Settings, args: argparse.Namespace) -> int:
    print(settings_markdown())
    return EXIT_OK


def settings_markdown() -> str:
    """The settings table of docs/operations.md, made from the settings' own descriptions."""
    lines = ["| variable | default | meaning |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = "(hostname-pid)" if field.default_factory else field.default
        shown = "-" if default is None else f"`{default}`"
        lines.append(f"| `POD_SWEEPER_{name.upper()}` | {shown} | {field.description} |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="pod-sweeper", description="Delete the pods of retired generations.")
    parser.add_argument("--version", action="version", version=f"pod-sweeper {__version__}")
    parser.add_argument("--config", metavar="FILE", help=f"TOML settings file (same as {CONFIG_FILE_ENV})")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    p = commands.add_parser("migrate", help="apply the schema migrations (idempotent)")
    p.add_argument("--dry-run", action="store_true", help="print what would be applied, change nothing")
    p.add_argument(
        "--grant",
        metavar="ROLE",
        help="then give ROLE the runtime privileges, as `grant ROLE --apply` does (the chart's hook uses it)",
    )
    controls_cli.add_actor(p)
    p.set_defaults(handler=cmd_migrate)

    p = commands.add_parser("attach", help="install the enqueue trigger on a host table")
    p.add_argument("--table", required=True, metavar="SCHEMA.TABLE")
    p.add_argument(
        "--column",
        action="append",
        default=[],
        metavar="ROLE=NAME",
        help=f"map a role to the table's column name; roles: {', '.join(attach.ROLES + attach.OPTIONAL_ROLES)}"
        " (cluster: the column naming each row's Kubernetes cluster)",
    )
    p.add_argument(
        "--cluster",
        metavar="NAME",
        help="the Kubernetes cluster of every row of this table (default: the default cluster, 'default')",
    )
    controls_cli.add_actor(p)
    p.set_defaults(handler=cmd_attach)

    p = commands.add_parser("detach", help="remove the enqueue trigger from a host table")
    p.add_argument("--table", required=True, metavar="SCHEMA.TABLE")
    controls_cli.add_actor(p)
    p.set_defaults(handler=cmd_detach)

    p = commands.add_parser("status", help="print the outbox state and lag")
    p.add_argument("--json", action="store_true", help="print only JSON on stdout")
    p.set_defaults(handler=cmd_status)

    p = commands.add_parser("explain", help="the whole story of one pod: executions, outbox row, attempts, what next")
    p.add_argument("target", metavar="POD|UID|SANDBOX_ID", help="a pod UID, NAMESPACE/NAME, a pod name or a sandbox id")
    p.add_argument("--json", action="store_true", help="print only JSON on stdout")
    p.set_defaults(handler=cmd_explain)

    p = commands.add_parser("run", help="run the daemon until SIGTERM or SIGINT")
    p.set_defaults(handler=cmd_run)

    bulk_cli.add_parsers(commands)

    p = commands.add_parser("prune", help="delete done rows older than the retention, in small batches")
    p.add_argument("--older-than", type=flag.positive, metavar="SECONDS", help="default: POD_SWEEPER_RETENTION")
    p.add_argument("--batch", type=flag.count, default=1000, help="rows per transaction (default 1000)")
    controls_cli.add_actor(p)
    p.set_defaults(handler=cmd_prune)

    p = commands.add_parser("sql", help="print a shipped DBA query (no NAME: list them)")
    p.add_argument("name", nargs="?", metavar="NAME")
    p.set_defaults(handler=cmd_sql)

    p = commands.add_parser("check", help="verify settings, database, schema and Kubernetes permissions")
    p.add_argument(
        "--namespace",
        action="append",
        default=[],
        metavar="NS",
        help="namespace to check (repeatable); default: every namespace the outbox names",
    )
    p.set_defaults(handler=cmd_check)

    p = commands.add_parser("grant", help="print (or --apply) the privileges of a migration-free runtime role")
    p.add_argument("role", metavar="ROLE")
    p.add_argument("--create", action="store_true", help="also CREATE ROLE ... LOGIN")
    p.add_argument(
        "--password-file",
        metavar="FILE",
        help="with --create: a file whose first line is the role's password (- : standard input); sent as a"
        " SCRAM verifier computed here, never as the password, and never printed",
    )
    p.add_argument("--apply", action="store_true", help="run the statements instead of printing them")
    controls_cli.add_actor(p)
    p.set_defaults(handler=cmd_grant)

    p = commands.add_parser("backfill", help="enqueue rows retired before attach (idempotent)")
    p.add_argument("--dry-run", action="store_true", help="count and list, write nothing")
    controls_cli.add_actor(p)
    p.set_defaults(handler=cmd_backfill)

    # The breaker trips by itself and a person resets it; `resume`, its name before, still works (it read
    # as the end of a pause, which it is not: that is `unpause`).
    p = commands.add_parser(
        "reset-breaker", aliases=["resume"], help="close a cluster's tripped blast-radius breaker after a look"
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--cluster", metavar="NAME", help="the cluster whose breaker to close (default: POD_SWEEPER_CLUSTER)"
    )
    which.add_argument("--all-clusters", action="store_true", help="close every tripped breaker")
    controls_cli.add_actor(p)
    p.set_defaults(handler=cmd_reset_breaker)

    controls_cli.add_parsers(commands)

    p = commands.add_parser("demo", help="the whole loop on this machine: throwaway database, fake API server")
    p.add_argument(
        "--database-url",
        help="a server on which to create (and drop) a demo database; "
        "default: a throwaway cluster from the local PostgreSQL binaries",
    )
    p.add_argument("--rate", type=flag.positive, default=20.0, help="executions created per second (default 20)")
    p.add_argument("--duration", type=flag.positive, help="stop after this many seconds (default: at Ctrl-C)")
    p.add_argument("--seed", type=int, help="seed of the workload's random choices")
    p.set_defaults(handler=cmd_demo)

    p = commands.add_parser("settings", help="print every setting with its default, as Markdown")
    p.set_defaults(handler=cmd_settings)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    # Until the settings are read, the format the environment asks for: a bad setting of another kind
    # must still be reported as the JSON line a log shipper (or journald) expects.
    log_format = "json" if os.environ.get(f"{ENV_PREFIX}LOG_FORMAT", "").strip().lower() == "json" else "text"
    setup_logging(log_format)
    try:
        if args.config:
            os.environ[CONFIG_FILE_ENV] = args.config
        try:
            settings = load_settings()
        except ConfigError as exc:
            # A sidecar with a bad setting stays up, so that its pod's other containers start.
            if args.command != "run":
                raise
            from pod_sweeper.tasks.process import startup

            if startup.mode_from_environment() != startup.WAIT:
                raise
            waited = asyncio.run(startup.settings_when_valid(exc))
            if waited is None:
                return EXIT_OK
            settings = waited
        log_format = settings.log_format
        setup_logging(settings.log_format, settings.log_level)
        for name in unknown_environment():
            logger.warning("ignoring {variable}: no such setting", variable=name)
        return asyncio.run(handler(settings, args))
    except PodSweeperError as exc:
        _fail(log_format, " ".join(str(exc).split()))  # one line, whatever the cause said
        return exc.exit_code
    except psycopg.Error as exc:
        _fail(log_format, f"database error: {first_line(exc)}")
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130


def _fail(log_format: str, message: str) -> None:
    """The one line a failed command leaves: plain for people, a JSON log line (level CRITICAL) for
    journald and log shippers when the settings ask for JSON. Either way, written to the journal it
    carries its priority (critical), so that ``journalctl -p err`` shows why a unit failed."""
    if log_format == "json":
        logger.critical("pod-sweeper: {error}", error=message)
    else:
        prefix = "<2>" if writes_to_journal(sys.stderr) else ""
        print(f"{prefix}pod-sweeper: {message}", file=sys.stderr)
