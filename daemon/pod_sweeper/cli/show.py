"""The commands that show, and change nothing: ``status``, ``explain`` (rendered by cli/status_text.py
and cli/explain_text.py), ``sql`` (a shipped DBA query) and ``settings`` (the settings table). Their
flags are in cli/main.py's parser."""

from __future__ import annotations

import argparse

from pod_sweeper.cli import status_text
from pod_sweeper.core.errors import EXIT_OK, ConfigError
from pod_sweeper.core.settings import Settings
from pod_sweeper.store import queries
from pod_sweeper.store.db import connection
from pod_sweeper.store.reads import status
from pod_sweeper.store.schema import migrations


async def cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    async with connection(settings) as conn:
        await migrations.check_schema(conn)
        current = await status.read_status(conn)
    print(status_text.render_json(current) if args.json else status_text.render_text(current))
    return EXIT_OK


async def cmd_explain(settings: Settings, args: argparse.Namespace) -> int:
    from pod_sweeper.cli import explain_text
    from pod_sweeper.store.reads import explain

    async with connection(settings) as conn:
        await migrations.check_schema(conn)
        story = await explain.gather(conn, args.target)
    print(explain_text.render_json(story) if args.json else explain_text.render_text(story))
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
