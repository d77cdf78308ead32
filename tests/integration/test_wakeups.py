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

from helpers import (
    DaemonThread,
    add_execution,
    claim,
    daemon_settings,
    retire,
    row_for,
    run,
    settings_for,
    sleeping,
    wait_until,
)
from pod_sweeper.cli import status_text
from pod_sweeper.core.settings import DEFAULT_CLUSTER
from pod_sweeper.store import db, queries
from pod_sweeper.store.rows import Arming
from pod_sweeper.store.sweep import channel, outbox
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


async def _claim(db_url: str, *, disarm: bool = True, batch: int = 100) -> list[int]:
    async with db.connection(settings_for(db_url)) as conn:
        result = await claim(conn, disarm=disarm, batch=batch)
        return [c.id for c in result.to_send]


def _clear(execs: psycopg.Connection[Any]) -> None:
    """The flag clear, as a sweeper's claim that filled its batch leaves it (it claims again at once)."""
    execs.execute("UPDATE pod_sweeper.wakeup SET armed = false, changed_by = 't'")


async def _arm(db_url: str, owner: str = "t", *, take_over: bool = False) -> Arming:
    async with db.connection(settings_for(db_url)) as conn:
        return await outbox.arm(conn, owner, cluster=DEFAULT_CLUSTER, take_over=take_over)


def test_armed_until_a_sweeper_first_claims_then_quiet(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    for sid in "abcde":
        add_execution(execs, kube, sid)
    assert armed(execs)  # no sweeper has run: every retire notifies, as before 0007
    assert first_notification_after(db_url, lambda: retire(execs, "a")) == ""
    run(_claim(db_url, batch=2))  # a claim that does not fill its batch leaves the flag armed
    assert armed(execs)
    retire(execs, "b")
    retire(execs, "c")
    run(_claim(db_url, batch=2))  # a full batch: it will claim again at once, so nobody needs a NOTIFY
    assert not armed(execs)
    assert first_notification_after(db_url, lambda: retire(execs, "d")) == "sentinel"
    assert run(_arm(db_url)) is Arming.ARMED
    assert armed(execs)
    # armed by "t": the retire wakes that replica, and the others pass over it (migration 0018)
    assert first_notification_after(db_url, lambda: retire(execs, "e")) == "wake:t"


def test_the_claim_after_arming_leaves_the_flag_set(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    for sid in "ab":
        add_execution(execs, kube, sid)
    _clear(execs)
    assert run(_arm(db_url)) is Arming.ARMED
    retire(execs, "a")
    run(_claim(db_url, disarm=False, batch=1))  # a full batch, but the claim right after arming
    assert armed(execs)
    retire(execs, "b")
    run(_claim(db_url, batch=1))
    assert not armed(execs)


def test_arming_waits_out_an_open_retire_and_the_next_claim_sees_it(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    add_execution(execs, kube, "a")
    _clear(execs)  # the retire below reads the flag clear and will not notify
    with psycopg.connect(db_url) as writer:  # a transaction, as the host application's retire
        retire(writer, "a")
        # The writer's enqueue ran and holds the shared lock until it commits: a sweeper must not
        # arm and sleep now, because its last claim cannot see this row yet.
        assert run(_arm(db_url)) is Arming.DEFERRED
        assert not armed(execs)
        assert run(_claim(db_url, disarm=False)) == []  # not committed: invisible
        writer.commit()
    assert run(_arm(db_url)) is Arming.ARMED
    claimed = run(_claim(db_url, disarm=False))  # the claim after arming finds the unannounced row
    row = row_for(execs, "a")
    assert row is not None and claimed == [row["id"]]


def test_repeatable_read_retires_always_notify(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    # Their snapshot may predate an arming, so the flag they read cannot be trusted: they notify.
    add_execution(execs, kube, "a")
    _clear(execs)

    def retire_rr() -> None:
        with psycopg.connect(db_url) as writer:
            writer.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            retire(writer, "a")

    assert first_notification_after(db_url, retire_rr) == ""


def test_a_missing_flag_row_reads_as_armed(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    add_execution(execs, kube, "a")
    execs.execute("DELETE FROM pod_sweeper.wakeup")
    assert first_notification_after(db_url, lambda: retire(execs, "a")) == ""
    assert run(_arm(db_url)) is Arming.DEFERRED  # nothing to arm: the sweeper keeps polling at its short pace


def test_the_channels_name_is_folded_into_the_retire_and_no_search_path_decides_it(db_url: str) -> None:
    # Migration 0021: pod_sweeper.channel carries no SET clause, so the planner inlines it into the
    # enqueue's pg_notify instead of calling it with a save and restore of settings on every retire (a
    # quarter of the trigger's CPU, bench/README.md); its operators are pg_catalog's by name, so a search
    # path that puts another schema's `||` and `=` first changes nothing.
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute(
            "SELECT proconfig FROM pg_proc WHERE oid = 'pod_sweeper.channel(text)'::regprocedure"
        ).fetchone() == (None,)
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                "EXPLAIN (VERBOSE, COSTS OFF) SELECT pod_sweeper.channel(cluster) FROM pod_sweeper.wakeup"
            )
        )
        assert "CASE" in plan and "channel" not in plan, plan
        conn.execute("CREATE SCHEMA lookalike")
        conn.execute("CREATE FUNCTION lookalike.glue(text, text) RETURNS text LANGUAGE sql AS $$ SELECT 'glued' $$")
        conn.execute("CREATE FUNCTION lookalike.same(text, text) RETURNS boolean LANGUAGE sql AS $$ SELECT true $$")
        conn.execute("CREATE OPERATOR lookalike.|| (LEFTARG = text, RIGHTARG = text, FUNCTION = lookalike.glue)")
        conn.execute("CREATE OPERATOR lookalike.= (LEFTARG = text, RIGHTARG = text, FUNCTION = lookalike.same)")
        conn.execute("SET search_path = lookalike, pg_catalog")
        assert conn.execute("SELECT 'a'::text || 'b'::text AS v").fetchone() == ("glued",)  # the lookalike is first
        names = conn.execute("SELECT pod_sweeper.channel('default') AS d, pod_sweeper.channel('east') AS e").fetchone()
        assert names == ("pod_sweeper", "pod_sweeper/east")


def test_an_idle_daemon_arms_the_flag_and_a_retire_wakes_it(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    add_execution(execs, kube, "a")
    _clear(execs)  # start cleared, as a crashed replica would leave it
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
    for sid in "abc":
        add_execution(execs, kube, sid)
    monkeypatch.setattr(outbox, "DISARM_AFTER_SECONDS", 0.0)  # a full claim clears the flag it just armed
    with DaemonThread(daemon_settings(db_url, kube, batch_size=1)) as daemon:
        deferred = lambda: daemon.daemon.metrics.registry.get_sample_value(  # noqa: E731
            "pod_sweeper_wakeup_arm_deferred_total"
        )
        wait_until(lambda: armed(execs), timeout=5, what="the idle daemon to arm the wakeup flag")
        with psycopg.connect(db_url) as first, psycopg.connect(db_url) as second:
            retire(first, "a")  # armed: will notify at commit; holds the shared lock meanwhile
            retire(execs, "c")  # wakes the daemon: its claim of it fills the batch, clearing the flag
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
    _clear(execs)
    assert "wakeup flag: clear" in run(text()) and "by t" in run(text())
    execs.execute("DELETE FROM pod_sweeper.wakeup")
    assert "row missing" in run(text())


def test_the_flag_row_is_written_at_most_twice_in_the_disarm_interval(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    """Every write of the flag's one row is a version that each retire and claim reads past while the
    xmin horizon is pinned (docs/design.md, "A pinned xmin horizon"): arming a flag already armed writes
    nothing, and the daemon's claims leave a flag armed less than DISARM_AFTER_SECONDS ago as it is, and
    one that does not fill its batch too."""
    _clear(execs)
    assert run(_arm(db_url)) is Arming.ARMED
    written = execs.execute("SELECT xmin::text AS v, changed_at FROM pod_sweeper.wakeup").fetchone()
    assert run(_arm(db_url)) is Arming.ALREADY  # armed already: still armed, and not written again
    assert run(_arm(db_url, "another")) is Arming.ALREADY  # nor for another replica, unless it takes over
    assert execs.execute("SELECT xmin::text AS v, changed_at FROM pod_sweeper.wakeup").fetchone() == written
    for sid in "abc":
        add_execution(execs, kube, sid)
        retire(execs, sid)
    params = {"batch": 1, "owner": "t", "lease_seconds": 30, "disarm": True, "cluster": DEFAULT_CLUSTER,
              "guard": None, "floor": START, "disarm_after": outbox.DISARM_AFTER_SECONDS,
              "transaction_rows": 0, "gathering": False}  # fmt: skip
    execs.execute(queries.load("claim"), params).fetchall()
    assert armed(execs)  # armed a moment ago: the daemon's claim leaves it
    execs.execute(queries.load("claim"), {**params, "disarm_after": 0.0, "batch": 10}).fetchall()
    assert armed(execs)  # two rows of ten: the claimer arms again in the same transaction, so it is left
    execs.execute("UPDATE pod_sweeper.outbox SET status = 'pending', next_attempt_at = now()")
    execs.execute(queries.load("claim"), {**params, "disarm_after": 0.0}).fetchall()
    assert not armed(execs)


def flag_names(conn: psycopg.Connection[Any]) -> str | None:
    row = conn.execute("SELECT changed_by FROM pod_sweeper.wakeup WHERE armed").fetchone()
    return None if row is None else row["changed_by"]  # type: ignore[call-overload,no-any-return]


def notify_wakeups(thread: DaemonThread) -> float:
    value = thread.daemon.metrics.registry.get_sample_value("pod_sweeper_wakeups_total", {"source": "notify"})
    return float(value or 0.0)


def test_a_retire_wakes_the_one_replica_the_flag_names_and_not_the_others(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    """Migration 0018: two replicas asleep, one retire: one NOTIFY, for the replica that armed the flag;
    the other passes over it and claims nothing (which payload wakes whom: tests/unit/test_wakes.py)."""
    for sid in "abcd":
        add_execution(execs, kube, sid)
    with (
        DaemonThread(daemon_settings(db_url, kube, replica_id="first")) as first,
        DaemonThread(daemon_settings(db_url, kube, replica_id="second")) as second,
    ):
        wait_until(lambda: flag_names(execs) in ("first", "second"), what="a replica to arm the flag")
        # Both asleep with no wakeup waiting: a catch-up claim still to come would find the retires below
        # and take the flag over, as a poll that finds rows nobody claimed does (by design).
        wait_until(lambda: sleeping(first) and sleeping(second), what="both replicas asleep")
        named, other = (first, second) if flag_names(execs) == "first" else (second, first)
        woken, passed_over = notify_wakeups(named), notify_wakeups(other)
        for sid in "abcd":
            retire(execs, sid)
            wait_until(lambda s=sid: (r := row_for(execs, s)) and r["status"] == "done", timeout=5)  # type: ignore[misc]
        assert notify_wakeups(named) > woken
        assert notify_wakeups(other) == passed_over
        # every row was claimed by the replica woken for it
        owners = {r["replica"] for r in execs.execute("SELECT replica FROM pod_sweeper.attempts").fetchall()}
        assert owners == {named.settings.replica_id}


def test_a_replica_that_finds_unclaimed_rows_on_its_poll_takes_the_flag_over(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    """The flag names a replica that is gone (it crashed while the flag named it): its wakeups go
    unheard. The next replica's poll finds the row, arms the flag in its own name, and from then on a
    retire wakes it by NOTIFY."""
    for sid in "ab":
        add_execution(execs, kube, sid)
    execs.execute("UPDATE pod_sweeper.wakeup SET armed = true, changed_by = 'crashed', changed_at = now()")
    with DaemonThread(daemon_settings(db_url, kube, replica_id="survivor", poll_interval=1.0)) as survivor:
        assert flag_names(execs) == "crashed"  # armed already, and naming another: left as it is
        retire(execs, "a")  # wakes 'crashed', which is not there: found by the survivor's poll
        wait_until(lambda: (r := row_for(execs, "a")) and r["status"] == "done", timeout=5)
        wait_until(lambda: flag_names(execs) == "survivor", what="the survivor to take the flag over")
        woken = notify_wakeups(survivor)
        started = time.monotonic()
        retire(execs, "b")
        wait_until(lambda: (r := row_for(execs, "b")) and r["status"] == "done", timeout=5)
        assert notify_wakeups(survivor) > woken and time.monotonic() - started < 0.9  # a NOTIFY, not the poll


def test_a_replica_that_stops_takes_its_name_off_the_flag(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    with DaemonThread(daemon_settings(db_url, kube, replica_id="leaving")):
        wait_until(lambda: flag_names(execs) == "leaving", what="the replica to arm the flag")
    assert armed(execs) and flag_names(execs) is None  # retires wake every replica until one arms it
    assert run(_arm(db_url, "next")) is Arming.ARMED  # named again by the next one to arm it
    assert flag_names(execs) == "next"


def test_a_flag_to_be_named_while_a_retire_holds_the_lock_is_deferred_not_taken_as_armed(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    """The race of migration 0007, with names: a retire that read the flag naming a replica that has
    since handed it on (or is gone) will wake nobody at its commit. A sweeper that would name itself
    now must not take the flag as armed (it would sleep a whole poll): it looks again soon, and arms it
    once the retire has committed; then claims once more, and finds the retire."""
    add_execution(execs, kube, "a")
    execs.execute("UPDATE pod_sweeper.wakeup SET armed = true, changed_by = 'gone'")
    with psycopg.connect(db_url) as writer:
        retire(writer, "a")  # read the flag naming 'gone': its NOTIFY will say wake:gone
        execs.execute("UPDATE pod_sweeper.wakeup SET changed_by = NULL")  # 'gone' handed it on
        assert run(_arm(db_url)) is Arming.DEFERRED  # names nobody: to be named, but the lock is busy
        execs.execute("UPDATE pod_sweeper.wakeup SET changed_by = 'gone'")
        assert run(_arm(db_url, take_over=True)) is Arming.DEFERRED  # a take-over, likewise
        assert run(_arm(db_url)) is Arming.ALREADY  # no take-over: armed, in another's name, as it is
        writer.commit()
    assert run(_arm(db_url, take_over=True)) is Arming.ARMED and flag_names(execs) == "t"
    claimed = run(_claim(db_url, disarm=False))  # the claim after arming finds the retire
    row = row_for(execs, "a")
    assert row is not None and claimed == [row["id"]]


def notifications_until_sentinel(db_url: str, listener: psycopg.Connection[Any]) -> list[str]:
    """The payloads ``listener`` has heard since it last read, up to a sentinel sent now from another
    session (notifications arrive in commit order: everything before the sentinel has arrived with it),
    but the listeners' own pings."""
    with psycopg.connect(db_url, autocommit=True) as other:
        other.execute("SELECT pg_notify('pod_sweeper', 'sentinel')")
    heard: list[str] = []
    for notify in listener.notifies(timeout=10):
        if notify.payload == "sentinel":
            return heard
        if not notify.payload.startswith(channel.PING_PREFIX):
            heard.append(notify.payload)
    raise AssertionError("the sentinel NOTIFY did not arrive")


def test_a_gathering_replica_takes_a_stream_of_retires_that_notify_nobody(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    """POD_SWEEPER_GATHER_SECONDS: a replica that claimed rows stays awake and claims again after the
    pause, and that claim, taking a row, clears the wakeup flag however recently it was armed; the
    retires that follow send no NOTIFY (none for any listener to read) and are all swept, and once a
    pause brings nothing the replica arms the flag and sleeps. The first retire of a quiet spell is
    claimed as its NOTIFY arrives, not after a pause."""
    stream = [f"s{i}" for i in range(20)]
    for sid in ["first", "second", *stream]:
        add_execution(execs, kube, sid)
    settings = daemon_settings(db_url, kube, gather_seconds=1.0)
    with DaemonThread(settings) as daemon, psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute("LISTEN pod_sweeper")
        wait_until(lambda: sleeping(daemon) and armed(execs), what="the idle daemon asleep, the flag armed")
        retire(execs, "first")
        claimed = lambda sid: (r := row_for(execs, sid)) is not None and r["status"] != "pending"  # noqa: E731
        wait_until(lambda: claimed("first"), timeout=0.9, what="the first retire claimed within the pause")
        retire(execs, "second")  # the flag is still armed: it notifies, and waits for the pause's end
        wait_until(lambda: not armed(execs), timeout=5, what="the gathering claim to clear the flag")
        assert claimed("second")
        assert len(notifications_until_sentinel(db_url, listener)) == 2  # the first's and the second's
        for sid in stream:
            retire(execs, sid)  # each in a transaction of its own, well inside the next pause
        done = lambda: all((r := row_for(execs, sid)) and r["status"] == "done" for sid in stream)  # noqa: E731
        wait_until(done, timeout=10, what="the stream swept")
        assert notifications_until_sentinel(db_url, listener) == []
        wait_until(lambda: armed(execs) and sleeping(daemon), timeout=5, what="armed and asleep once the stream ended")
