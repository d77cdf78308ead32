"""Parsing ``--table`` and ``--column`` as Postgres reads identifiers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pod_sweeper.core.errors import ConfigError
from pod_sweeper.store.admin.attach import ROLES, HostTable, parse_mapping, parse_table


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("public.executions", HostTable("public", "executions")),
        ("Public.Executions", HostTable("public", "executions")),
        ('"App"."My.Table"', HostTable("App", "My.Table")),
        ('app."we""ird"', HostTable("app", 'we"ird')),
    ],
)
def test_parse_table(text: str, expected: HostTable) -> None:
    assert parse_table(text) == expected


@pytest.mark.parametrize("text", ["executions", "a.b.c", "a.", ".b", "a.b;drop", "a b.c", '"a.b', ""])
def test_parse_table_rejects(text: str) -> None:
    with pytest.raises(ConfigError, match=r"expected SCHEMA\.TABLE"):
        parse_table(text)


@given(st.text(min_size=1, max_size=40), st.text(min_size=1, max_size=40))
def test_any_quoted_name_round_trips(schema: str, table: str) -> None:
    def quote(name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    assert parse_table(f"{quote(schema)}.{quote(table)}") == HostTable(schema, table)


def test_parse_mapping_defaults_and_overrides() -> None:
    mapping = parse_mapping(["active=live", "pod_uid=uid=odd"])
    assert mapping["active"] == "live"
    assert mapping["pod_uid"] == "uid=odd"
    assert set(mapping) == set(ROLES)


@pytest.mark.parametrize("pair", ["active", "active=", "colour=red"])
def test_parse_mapping_rejects(pair: str) -> None:
    with pytest.raises(ConfigError):
        parse_mapping([pair])
