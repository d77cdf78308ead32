"""The table of why a row waits (core.waits), without I/O: every reason has its rule, the SQL that gives
each row its reason applies them in the order the table states, and the log says a reason's start and
end once each, never a routine one. Every surface, for real: tests/integration/test_waits.py."""

from __future__ import annotations

import re

import pytest

from pod_sweeper.core.resources import resource_dir
from pod_sweeper.core.waits import DUE, ROW_ORDER, RULES, Process, Seen, Wait, WaitLog, describe, readiness, unready


def test_every_reason_has_a_rule_and_every_row_reason_an_order() -> None:
    assert set(RULES) == set(Wait)
    assert set(ROW_ORDER) == {w for w in Wait if RULES[w].seen is not Seen.REPLICA}
    assert all(rule.what and rule.ends and rule.act for rule in RULES.values())
    assert all(rule.alert for rule in RULES.values() if not rule.ready)  # a reason that unreadies pages


def test_row_waits_sql_gives_the_reasons_in_the_tables_order() -> None:
    text = (resource_dir("sql") / "row_waits.sql").read_text()
    given = re.findall(r"THEN '(\w+)'", text)
    assert given == [w.value for w in ROW_ORDER]
    assert f"ELSE '{DUE}'" in text


def test_the_log_says_a_start_and_an_end_once_each() -> None:
    log = WaitLog()
    breaker = {(Wait.BREAKER, "this replica"): "tripped: too many"}
    started = log.update(breaker)
    assert started == [("WARNING", "waiting started (this replica): " + describe(Wait.BREAKER, "tripped: too many"))]
    assert log.update(breaker) == []  # still holding: nothing more
    assert log.update({**breaker, (Wait.BACKOFF, "cluster default"): "3 rows"}) == []  # routine: never logged
    ended = log.update({})
    assert ended == [("INFO", f"waiting ended (this replica): [breaker] {RULES[Wait.BREAKER].what}")]


def test_readiness_fails_for_the_reasons_whose_rule_says_so() -> None:
    active = {Wait.BREAKER: "tripped", Wait.PAUSED: "paused", Wait.SCHEMA: "not claiming: too new"}
    assert unready(active) == ["tripped [breaker]", "not claiming: too new [schema]"]


@pytest.mark.parametrize(
    ("active", "process", "expected"),
    [
        ({}, Process(), (True, "ok")),
        ({Wait.PAUSED: "x", Wait.DRY_RUN: "y", Wait.REPLICATION_GUARD: "z"}, Process(), (True, "ok")),
        ({Wait.BREAKER: "tripped"}, Process(), (False, "tripped [breaker]")),
        ({}, Process(stopping=True), (False, "stopping")),
        ({}, Process(database_error="refused"), (False, "database: refused")),
        ({}, Process(schema_checked=False), (False, "schema not checked")),
        ({}, Process(listener_hearing=False), (False, "listener not hearing NOTIFY")),
        ({}, Process(listener_hearing=None), (True, "ok")),  # poll-only: no listener to hear
        (
            {Wait.KUBE_UNREACHABLE: "no route"},
            Process(stopping=True, started=False),
            (False, "stopping; no route [kube_unreachable]; starting"),
        ),
    ],
)
def test_readiness_is_one_decision_of_the_reasons_and_the_process(
    active: dict[Wait, str], process: Process, expected: tuple[bool, str]
) -> None:
    assert readiness(active, process) == expected
