"""The ``pod-sweeper`` command line: the parser (every command's flags, in one place, so ``--help``
reads as one list), reading settings, running one command, and turning every failure into one line on
stderr and the exit code docs/design.md fixes (0 ok, 1 failure, 2 bad configuration or usage, 3 schema
missing or of another version). The handlers live beside their kin: cli/setup.py (a DBA's setup),
cli/show.py (what shows and changes nothing), cli/controls.py and cli/bulk.py (an on-call's levers);
``run``, ``check`` and ``demo`` stay here, as the shims that import what only they need.

A command imports what it alone needs when it runs: the Kubernetes client (half a second to import) and
the daemon's machinery load for ``run`` and ``check``, never for ``status``, ``explain`` or the other
commands that talk to the database alone (tests/acceptance/test_cli.py holds that)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, NoReturn

import psycopg
from loguru import logger

from pod_sweeper import __version__
from pod_sweeper.cli import args as flag
from pod_sweeper.cli import bulk as bulk_cli
from pod_sweeper.cli import controls as controls_cli
from pod_sweeper.cli import setup, show
from pod_sweeper.core.errors import EXIT_CONFIG, EXIT_FAILURE, EXIT_OK, ConfigError, PodSweeperError, first_line
from pod_sweeper.core.logs import scrub, setup_logging, writes_to_journal
from pod_sweeper.core.settings import (
    CONFIG_FILE_ENV,
    ENV_PREFIX,
    Settings,
    load_settings,
    unknown_environment,
)
from pod_sweeper.store.admin import attach

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


async def cmd_check(settings: Settings, args: argparse.Namespace) -> int:
    from pod_sweeper.cli import check

    settings.require_database_url()
    checks = await check.run_checks(settings, args.namespace)
    for item in checks:
        print(item)
    return EXIT_OK if all(c.ok for c in checks) else EXIT_FAILURE


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
    p.set_defaults(handler=setup.cmd_migrate)

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
    p.set_defaults(handler=setup.cmd_attach)

    p = commands.add_parser("detach", help="remove the enqueue trigger from a host table")
    p.add_argument("--table", required=True, metavar="SCHEMA.TABLE")
    controls_cli.add_actor(p)
    p.set_defaults(handler=setup.cmd_detach)

    p = commands.add_parser("status", help="print the outbox state and lag")
    p.add_argument("--json", action="store_true", help="print only JSON on stdout")
    p.set_defaults(handler=show.cmd_status)

    p = commands.add_parser("explain", help="the whole story of one pod: executions, outbox row, attempts, what next")
    p.add_argument("target", metavar="POD|UID|SANDBOX_ID", help="a pod UID, NAMESPACE/NAME, a pod name or a sandbox id")
    p.add_argument("--json", action="store_true", help="print only JSON on stdout")
    p.set_defaults(handler=show.cmd_explain)

    p = commands.add_parser("run", help="run the daemon until SIGTERM or SIGINT")
    p.set_defaults(handler=cmd_run)

    bulk_cli.add_parsers(commands)

    p = commands.add_parser("prune", help="delete done rows older than the retention, in small batches")
    p.add_argument("--older-than", type=flag.positive, metavar="SECONDS", help="default: POD_SWEEPER_RETENTION")
    p.add_argument("--batch", type=flag.count, default=1000, help="rows per transaction (default 1000)")
    controls_cli.add_actor(p)
    p.set_defaults(handler=controls_cli.cmd_prune)

    p = commands.add_parser("sql", help="print a shipped DBA query (no NAME: list them)")
    p.add_argument("name", nargs="?", metavar="NAME")
    p.set_defaults(handler=show.cmd_sql)

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
    p.set_defaults(handler=setup.cmd_grant)

    p = commands.add_parser("backfill", help="enqueue rows retired before attach (idempotent)")
    p.add_argument("--dry-run", action="store_true", help="count and list, write nothing")
    controls_cli.add_actor(p)
    p.set_defaults(handler=setup.cmd_backfill)

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
    p.set_defaults(handler=controls_cli.cmd_reset_breaker)

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
    p.set_defaults(handler=show.cmd_settings)
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
        print(f"{prefix}pod-sweeper: {scrub(message)}", file=sys.stderr)
