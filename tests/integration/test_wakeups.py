"""The wakeup flag of migration 0007 on real PostgreSQL: retires NOTIFY only while a sweeper sleeps,
and the arming protocol loses no retire (a writer either notifies or is seen by the claim after arming).

Whether a retire notified is read without waiting for an absence: after the retire commits, a sentinel
NOTIFY is sent from another session; notifications arrive in commit order, so the first one to arrive
tells whether the retire sent one."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from helpers import DaemonThread, add_execution, claim, daemon_settings, retire, row_for, run, settings_for, wait_until
from pod_sweeper.cli import status_text
from pod_sweeper.core.settings import DEFAULT_CLUSTER
from pod_sweeper.store import db, queries
from pod_sweeper.store.sweep import outbox
from pod_sweeper.store.sweep.cursor import START

pytestmark = pytest.mark.versions


def armed(conn: psycopg.Connection[Any]) -> bool:
    return bool(conn.execute("SELECT armed FROM pod_sweeper.wakeup").fetchone()["armed"])  # type: ignore[index]


def first_notification_after(db_url: str, action: Any) -> str:
    """Run ``action`` (which commits), then send a sentinel; the payload of the first NOTIFY heard."""
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute("LISTEN pod_sweeper")
        action()
        with psycopg.connect(db_url, autocommit=True) as other:
            other.execute("SELECT pg_notify('pod_sweeper', 'sentinel')")
        for notify in listener.notifies(timeout=10):
            return notify.payload
    raise AssertionError("not even the sentinel NOTIFY arrived")


async def _claim(db_url: str, *, disarm: bool = True) -> list[int]:
    async with db.connection(settings_for(db_url)) as conn:
        result = await claim(conn, disarm=disarm)
        return [c.id for c in result.to_send]


async def _arm(db_url: str) -> bool:
    async with db.connection(settings_for(db_url)) as conn:
        return await outbox.arm(conn, "t", cluster=DEFAULT_CLUSTER)


def test_armed_until_a_sweeper_first_claims_then_quiet(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    for sid in "abc":
        add_execution(execs, kube, sid)
    assert armed(execs)  # no sweeper has run: every retire notifies, as before 0007
    assert first_notification_after(db_url, lambda: retire(execs, "a")) == ""
    run(_claim(db_url))  # a sweeper claiming: it will claim again, so nobody needs a NOTIFY
    assert not armed(execs)
    assert first_notification_after(db_url, lambda: retire(execs, "b")) == "sentinel"
    assert run(_arm(db_url)) is True
    assert armed(execs)
    assert first_notification_after(db_url, lambda: retire(execs, "c")) == ""


def test_the_claim_after_arming_leaves_the_flag_set(execs: psycopg.Connection[Any], db_url: str) -> None:
    run(_claim(db_url))
    assert run(_arm(db_url)) is True
    run(_claim(db_url, disarm=False))
    assert armed(execs)
    execs.execute("SELECT 1")
    run(_claim(db_url))
    assert not armed(execs)


def test_arming_waits_out_an_open_retire_and_the_next_claim_sees_it(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    add_execution(execs, kube, "a")
    run(_claim(db_url))  # cleared: the retire below reads the flag clear and will not notify
    with psycopg.connect(db_url) as writer:  # a transaction, as the host application's retire
        retire(writer, "a")
        # The writer's enqueue ran and holds the shared lock until it commits: a sweeper must not
        # arm and sleep now, because its last claim cannot see this row yet.
        assert run(_arm(db_url)) is False
        assert not armed(execs)
        assert run(_claim(db_url, disarm=False)) == []  # not committed: invisible
        writer.commit()
    assert run(_arm(db_url)) is True
    claimed = run(_claim(db_url, disarm=False))  # the claim after arming finds the unannounced row
    row = row_for(execs, "a")
    assert row is not None and claimed == [row["id"]]


def test_repeatable_read_retires_always_notify(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    # Their snapshot may predate an arming, so the flag they read cannot be trusted: they notify.
    add_execution(execs, kube, "a")
    run(_claim(db_url))
    assert not armed(execs)

    def retire_rr() -> None:
        with psycopg.connect(db_url) as writer:
            writer.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            retire(writer, "a")

    assert first_notification_after(db_url, retire_rr) == ""


def test_a_missing_flag_row_reads_as_armed(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    add_execution(execs, kube, "a")
    execs.execute("DELETE FROM pod_sweeper.wakeup")
    assert first_notification_after(db_url, lambda: retire(execs, "a")) == ""
    assert run(_arm(db_url)) is False  # nothing to arm: the sweeper keeps polling at its short pace


def test_an_idle_daemon_arms_the_flag_and_a_retire_wakes_it(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    add_execution(execs, kube, "a")
    run(_claim(db_url))  # start cleared, as a crashed replica would leave it
    with DaemonThread(daemon_settings(db_url, kube)):
        wait_until(lambda: armed(execs), timeout=5, what="the idle daemon to arm the wakeup flag")
        started = time.monotonic()
        retire(execs, "a")
        row = wait_until(lambda: (r := row_for(execs, "a")) and r["status"] == "done" and r, timeout=2)
        assert time.monotonic() - started < 2 and row["outcome"] == "deleted"
        # back to sleep: armed again
        wait_until(lambda: armed(execs), timeout=5, what="the daemon to arm again once drained")


def test_a_retire_left_open_keeps_the_daemon_polling_not_asleep(
    execs: psycopg.Connection[Any], db_url: str, kube: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A retire whose enqueue read the flag clear (no NOTIFY) and whose transaction is still open when
    # the daemon runs dry must not leave the daemon asleep: it cannot arm, so it polls at a short
    # pace and takes the row soon after the commit, not after the 30 s poll interval.
    add_execution(execs, kube, "a")
    add_execution(execs, kube, "b")
    monkeypatch.setattr(outbox, "DISARM_AFTER_SECONDS", 0.0)  # its claim clears the flag it just armed
    with DaemonThread(daemon_settings(db_url, kube)) as daemon:
        deferred = lambda: daemon.daemon.metrics.registry.get_sample_value(  # noqa: E731
            "pod_sweeper_wakeup_arm_deferred_total"
        )
        wait_until(lambda: armed(execs), timeout=5, what="the idle daemon to arm the wakeup flag")
        with psycopg.connect(db_url) as first, psycopg.connect(db_url) as second:
            retire(first, "a")  # armed: will notify at commit; holds the shared lock meanwhile
            execs.execute("SELECT pg_notify('pod_sweeper', '')")  # wake the daemon: it claims, clearing the flag
            wait_until(lambda: deferred(), timeout=5, what="the daemon to find it cannot arm")
            assert not armed(execs)
            retire(second, "b")  # reads the flag clear: sends nothing
            first.rollback()
            seen = deferred()
            wait_until(lambda: deferred() > seen, timeout=5, what="the daemon to keep polling (second is open)")
            started = time.monotonic()
            second.commit()
        row = wait_until(lambda: (r := row_for(execs, "b")) and r["status"] == "done" and r, timeout=2)
        assert time.monotonic() - started < 2 and row["outcome"] == "deleted"
        assert row_for(execs, "a") is None  # rolled back: never enqueued


def test_a_poll_only_daemon_leaves_the_flag_to_the_listening_ones(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    # It cannot hear a NOTIFY: were it to clear the flag, replicas that listen would stop being woken.
    add_execution(execs, kube, "a")
    with DaemonThread(daemon_settings(db_url, kube, listen=False, poll_interval=0.2)):
        retire(execs, "a")
        wait_until(lambda: (r := row_for(execs, "a")) and r["status"] == "done", timeout=5)
        assert armed(execs)


def test_status_shows_the_flag(execs: psycopg.Connection[Any], db_url: str) -> None:
    from pod_sweeper.store.reads import status

    async def text() -> str:
        async with db.connection(settings_for(db_url)) as conn:
            return status_text.render_text(await status.read_status(conn))

    assert "wakeup flag: armed" in run(text())
    run(_claim(db_url))
    assert "wakeup flag: clear" in run(text()) and "by t" in run(text())
    execs.execute("DELETE FROM pod_sweeper.wakeup")
    assert "row missing" in run(text())


def test_the_flag_row_is_written_at_most_twice_in_the_disarm_interval(
    execs: psycopg.Connection[Any], db_url: str
) -> None:
    """Every write of the flag's one row is a version that each retire and claim reads past while the
    xmin horizon is held (docs/design.md, "A held xmin horizon"): arming a flag already armed writes
    nothing, and the daemon's claims leave a flag armed less than DISARM_AFTER_SECONDS ago as it is."""
    run(_claim(db_url))
    assert run(_arm(db_url)) is True
    written = execs.execute("SELECT xmin::text AS v, changed_at FROM pod_sweeper.wakeup").fetchone()
    assert run(_arm(db_url)) is True  # armed already: still armed, and not written again
    assert execs.execute("SELECT xmin::text AS v, changed_at FROM pod_sweeper.wakeup").fetchone() == written
    params = {"batch": 10, "owner": "t", "lease_seconds": 30, "disarm": True, "cluster": DEFAULT_CLUSTER,
              "guard": None, "floor": START, "disarm_after": outbox.DISARM_AFTER_SECONDS}  # fmt: skip
    execs.execute(queries.load("claim"), params).fetchall()
    assert armed(execs)  # armed a moment ago: the daemon's claim leaves it
    execs.execute(queries.load("claim"), {**params, "disarm_after": 0.0}).fetchall()
    assert not armed(execs)
