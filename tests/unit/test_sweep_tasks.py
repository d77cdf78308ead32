"""The sweep pipeline's tasks alone, without PostgreSQL: the claimer's batches, the sender's chunks and
gates, the recorder's batches, retries and write-once rule, and the drain's hand-back at shutdown, on the
in-memory store (held to the real one by tests/integration/test_store_contract.py) and a fake clock."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import pytest

from pod_sweeper.core.states import Outcome, Result, Status
from pod_sweeper.kube.answer import Answer
from pod_sweeper.store.rows import Claim, Verdict
from pod_sweeper.tasks.rules import verdicts
from pod_sweeper.tasks.sweep import recorder as recorder_module
from pod_sweeper.tasks.sweep.sender import LEASE_MARGIN_SECONDS, MAX_CHUNK, MIN_REQUEST_SECONDS
from unit.sweep_kit import Rig, ScriptedKube, held, rig, running, until

P = ParamSpec("P")
T = TypeVar("T")


def go(coro: Any) -> Any:
    return asyncio.run(coro)


def writes_of(r: Rig) -> list[int]:
    """The size of each write of verdicts the store was given."""
    return [len(ids) for ids in r.store.writes]


# --- the claimer -------------------------------------------------------------------------------------


def test_the_claimer_takes_a_whole_batch_and_then_waits_for_room() -> None:
    """With 25 rows due, ``batch_size`` 10 and ``concurrency`` 2 (room for 12), it takes 10, and no more
    while more than ``concurrency`` wait in the queue and a batch does not fit; rows let go make room."""
    r = rig(batch_size=10, concurrency=2)
    r.retire(25)
    pipeline, claimer = r.sweeper.pipeline, r.sweeper.claimer

    async def scenario() -> None:
        async def body() -> None:
            await until(lambda: held(pipeline) == 10, what="the first claim")
            for _ in range(50):  # let it turn: it must not claim the 2 rows of room left
                await asyncio.sleep(0)
            assert held(pipeline) == 10 and len(r.store.in_status(Status.CLAIMED)) == 10
            # Workers take 9 and their verdicts are written: 1 queued, room for 11, a batch fits.
            taken = [await pipeline.next_work() for _ in range(9)]
            for work in taken:
                pipeline.conclude(Verdict(work.claim.id, work.claim.epoch, Result.DELETED, http_status=200))
            await r.sweeper.recorder.flush()
            await until(lambda: held(pipeline) == 11, what="the second claim")
            assert {row.attempts for row in r.store.in_status(Status.CLAIMED)} == {1}

        await running(claimer.run(), body)

    go(scenario())
    assert r.count("pod_sweeper_claimed_rows_total") == 20


def test_each_claimed_row_has_its_lease_deadline_on_the_claimers_clock() -> None:
    r = rig(lease_seconds=30)
    r.store.retire("s")
    pipeline = r.sweeper.pipeline

    async def scenario() -> float:
        started = r.clock()
        await r.claim(queued=1)
        work = pipeline.more_work(1)[0]
        return work.lease_deadline - started

    assert go(scenario()) == 30
    (row,) = r.store.rows.values()
    assert row.next_attempt_at == r.clock() + 30  # the store's lease, on the same clock


def test_what_the_claim_settles_is_recorded_in_the_claim_and_never_reaches_a_worker() -> None:
    r = rig(max_attempts=1)
    r.store.retire("active-again")
    r.store.activate("active-again")
    crashed = r.store.retire("crashed-its-daemon")
    crashed.status, crashed.attempts, crashed.claimed_by = Status.CLAIMED, 1, "a-replica-that-died"
    r.store.retire("to-send")
    pipeline = r.sweeper.pipeline

    async def scenario() -> list[Claim]:
        await r.claim(queued=1)
        return [work.claim for work in pipeline.more_work(3)]

    (sent,) = go(scenario())
    assert sent.sandbox_id == "to-send"
    by_sandbox = {row.sandbox_id: row for row in r.store.rows.values()}
    assert by_sandbox["active-again"].outcome is Outcome.SKIPPED_ACTIVE
    assert by_sandbox["crashed-its-daemon"].status is Status.DEAD  # its lease expired once more than its attempts
    assert "a-replica-that-died" in (by_sandbox["crashed-its-daemon"].last_error or "")
    assert r.store.writes == []  # recorded by the claim itself, not by the recorder


def test_a_failed_claim_is_retried_with_backoff_and_counted() -> None:
    r = rig()
    r.store.retire("s")
    r.store.fail("claim", times=3)
    go(r.claim(queued=1))
    assert r.count("pod_sweeper_db_errors_total") == 3


# --- the sender --------------------------------------------------------------------------------------


class CountingThreads(ThreadPoolExecutor):
    """The sender's threads, counting the rows of each chunk handed to them."""

    def __init__(self, workers: int) -> None:
        super().__init__(max_workers=workers, thread_name_prefix="pod-delete")
        self.sizes: list[int] = []

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        chunk = args[0]
        assert isinstance(chunk, list)
        self.sizes.append(len(chunk))
        return super().submit(fn, *args, **kwargs)


def chunk_sizes(r: Rig) -> list[int]:
    """The size of each chunk the sender hands to its threads, in order."""
    r.sweeper.sender.threads.shutdown()  # never used yet: no thread to wait for
    counting = CountingThreads(r.sweeper.settings.concurrency)
    r.sweeper.sender.threads = counting
    return counting.sizes


def sweep_until_done(r: Rig, n: int) -> None:
    """The whole sweeper on the memory store until ``n`` rows are done."""

    async def scenario() -> None:
        async def body() -> None:
            await until(lambda: len(r.store.in_status(Status.DONE)) == n, what=f"{n} rows done")

        await running(r.sweeper.run(), body)
        r.sweeper.sender.close()

    go(scenario())


def test_a_deep_queue_goes_to_the_threads_in_chunks_and_a_single_row_alone() -> None:
    r = rig(concurrency=2, batch_size=200)
    sizes = chunk_sizes(r)
    r.retire(200)
    sweep_until_done(r, 200)
    assert max(sizes) == MAX_CHUNK and sum(sizes) == 200
    assert sorted(r.kube.calls) == sorted(f"pod-s{i}" for i in range(200))  # each sent once

    alone = rig(concurrency=2)
    alone_sizes = chunk_sizes(alone)
    alone.store.retire("one")
    sweep_until_done(alone, 1)
    assert alone_sizes == [1]


def test_a_row_no_request_may_be_sent_for_ends_dead_unsent() -> None:
    r = rig()
    r.store.retire("bad", name="Not_A_Pod_Name")
    r.store.retire("good")

    async def scenario() -> None:
        async def body() -> None:
            await until(lambda: len(r.store.in_status(Status.PENDING)) == 0 and not r.store.in_status(Status.CLAIMED))

        await running(r.sweeper.run(), body)
        r.sweeper.sender.close()

    go(scenario())
    by_sandbox = {row.sandbox_id: row for row in r.store.rows.values()}
    assert by_sandbox["bad"].status is Status.DEAD and by_sandbox["good"].outcome is Outcome.DELETED
    assert r.kube.calls == ["pod-good"]
    assert r.count("pod_sweeper_unsendable_rows_total", why="invalid_name") == 1


def test_a_row_whose_lease_ran_short_in_the_queue_goes_back_unsent_and_uncharged() -> None:
    r = rig(lease_seconds=30)
    r.store.retire("s")
    pipeline, sender = r.sweeper.pipeline, r.sweeper.sender

    async def scenario() -> None:
        await r.claim(queued=1)
        # It waited in the queue until less than a request's worth of its lease is left.
        r.clock.advance(30 - LEASE_MARGIN_SECONDS - MIN_REQUEST_SECONDS + 0.5)
        await running(sender.worker(), lambda: until(lambda: pipeline.unwritten == 1, what="the verdict"))
        await r.sweeper.recorder.flush()
        sender.close()

    go(scenario())
    (row,) = r.store.rows.values()
    assert r.kube.calls == [] and (row.status, row.attempts) == (Status.PENDING, 0)


def sweep_and_record(r: Rig, n: int) -> None:
    """``n`` rows retired, claimed, sent by one worker until each has its verdict, and recorded."""
    r.retire(n)
    pipeline, sender = r.sweeper.pipeline, r.sweeper.sender

    async def scenario() -> None:
        await r.claim(queued=n)
        await running(sender.worker(), lambda: until(lambda: pipeline.unwritten == n, what=f"{n} verdicts"))
        await r.sweeper.recorder.flush()
        sender.close()

    go(scenario())


@pytest.mark.parametrize(
    "refused",
    [Answer.of(401, "Unauthorized", "401 Unauthorized"), Answer.unsent(RuntimeError("invalid_grant"))],
    ids=["401", "the credential hook failed"],
)
def test_a_401_stops_the_rest_of_its_chunk_and_every_row_goes_back_uncharged(refused: Answer) -> None:
    kube = ScriptedKube(answer=lambda name: refused)
    r = rig(kube, concurrency=1, batch_size=8)
    sweep_and_record(r, 8)
    assert r.kube.calls == ["pod-s0"]  # one refusal, and the chunk's other seven never went out
    assert {(row.status, row.attempts) for row in r.store.rows.values()} == {(Status.PENDING, 0)}
    assert r.sweeper.status.refusing is not None
    assert r.count("pod_sweeper_kube_responses_total", code=refused.label) == 1


# --- the recorder ------------------------------------------------------------------------------------


def claimed(r: Rig, n: int) -> list[Claim]:
    """``n`` rows claimed as the claimer claims them."""
    for i in range(n):
        r.store.retire(f"s{i}")

    async def claim() -> list[Claim]:
        async with r.store.session() as session:
            batch = await session.claim(
                batch=n, lease_seconds=30, disarm=False, at_claim=lambda c, checked: None, guard=None
            )
        return batch.to_send

    taken: list[Claim] = go(claim())
    r.sweeper.pipeline.add(taken, r.clock() + 30)
    r.sweeper.pipeline.more_work(n)  # the workers took them
    return taken


def test_the_recorder_writes_in_batches_of_its_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recorder_module, "RECORD_BATCH", 7)
    r = rig()
    for claim in claimed(r, 17):
        r.sweeper.pipeline.conclude(Verdict(claim.id, claim.epoch, Result.DELETED, http_status=200))
    go(r.sweeper.recorder.flush())
    assert writes_of(r) == [7, 7, 3] and held(r.sweeper.pipeline) == 0
    assert len(r.store.in_status(Status.DONE)) == 17


def test_a_failed_write_is_retried_and_each_verdict_is_written_once() -> None:
    r = rig()
    for claim in claimed(r, 5):
        r.sweeper.pipeline.conclude(verdicts.handed_back(claim, delay=60))
    r.store.fail("record_results", times=2)

    async def scenario() -> None:
        await running(r.sweeper.recorder.run(), lambda: until(lambda: held(r.sweeper.pipeline) == 0, what="the write"))

    go(scenario())
    assert r.count("pod_sweeper_db_errors_total") == 2
    assert writes_of(r) == [5]  # the failed attempts wrote nothing; the one that did wrote each row once
    assert {(row.status, row.attempts, row.next_attempt_at) for row in r.store.rows.values()} == {
        (Status.PENDING, 0, r.clock() + 60)
    }


def test_two_writers_at_once_write_each_verdict_once() -> None:
    """The recorder's task and the shutdown drain both flush; the pipeline lets one write at a time."""
    r = rig()
    for claim in claimed(r, 10):
        r.sweeper.pipeline.conclude(Verdict(claim.id, claim.epoch, Result.DELETED, http_status=200))
    writing = asyncio.Event()
    r.store.record_waits = writing  # the first writer is inside its write when the second comes

    async def scenario() -> None:
        first = asyncio.ensure_future(r.sweeper.recorder.flush())
        second = asyncio.ensure_future(r.sweeper.recorder.flush())
        await asyncio.sleep(0)
        writing.set()
        await asyncio.gather(first, second)

    go(scenario())
    assert writes_of(r) == [10]
    assert r.count("pod_sweeper_results_fenced_total") == 0


def test_a_replica_holding_more_than_it_can_send_soon_hands_the_wakeups_on_and_claims_no_more() -> None:
    """One retire wakes one replica (migration 0018): a replica whose rows wait behind its own limits
    takes its name off the wakeup flag, once, so that retires wake the others, and claims nothing
    until rows are let go; then it claims what waited."""
    kube = ScriptedKube(hold=frozenset(f"pod-s{i}" for i in range(4)))  # not answered until released
    r = rig(kube, listen=True, concurrency=2, batch_size=4)  # saturated past 2 rows without an answer
    assert r.sweeper.claimer.saturation == 2
    r.retire(4)

    async def scenario() -> None:
        run = asyncio.ensure_future(r.sweeper.run())
        try:
            await until(lambda: r.store.handed_on == 1, what="the hand-on")
            claims = r.store.claims
            late = r.store.retire("late")
            r.sweeper.notify("notify")  # as a NOTIFY would: a claimer free to claim takes the row at once
            for _ in range(50):  # turns of the event loop, no time: the memory store's claim needs a few
                await asyncio.sleep(0)
            assert r.store.claims == claims  # no claim ran while it was saturated
            assert late.status is Status.PENDING and r.store.handed_on == 1  # handed on once
            kube.release.set()
            await until(lambda: len(r.store.in_status(Status.DONE)) == 5, what="every row, the late one too")
        finally:
            kube.release.set()
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)

    go(scenario())
    assert r.count("pod_sweeper_wakeups_handed_on_total") == 1


def test_a_gathering_replica_claims_again_after_its_pause_without_sleeping_and_its_stop_ends_the_pause() -> None:
    """POD_SWEEPER_GATHER_SECONDS: a turn that took rows is followed by the pause, awake (not asleep, the
    flag not armed) and deaf to NOTIFYs, then by a claim that clears the wakeup flag; each of those turns
    still reads the next due time (on PostgreSQL that read moves the claim cursor's floor); the stop ends
    the pause at once rather than waiting it out."""
    r = rig(listen=True, gather_seconds=1.0)
    r.retire(1)

    async def scenario() -> None:
        run = asyncio.ensure_future(r.sweeper.run())
        try:
            await until(lambda: len(r.store.in_status(Status.DONE)) == 1, what="the first row swept")
            claims, looks = r.store.claims, r.store.looks
            r.store.armed = True  # armed meanwhile (by another replica): the gathering claim clears it
            r.store.retire("late")
            r.sweeper.notify("notify")  # passed over: the claim waits for the pause's end
            for _ in range(50):  # turns of the event loop, no time
                await asyncio.sleep(0)
            assert r.store.claims == claims and not r.sweeper.status.asleep
            await until(lambda: len(r.store.in_status(Status.DONE)) == 2, what="the late row, after the pause")
            assert r.store.claims == claims + 1 and not r.store.armed  # and in the next pause now
            assert r.store.looks == looks + 1
            started = time.monotonic()
            await asyncio.wait_for(r.sweeper.drain(started + 5), 5)
            assert time.monotonic() - started < 0.5  # the stop ended the pause: not waited out
            await asyncio.wait_for(run, 5)
        finally:
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)

    go(scenario())


# --- the drain at shutdown -----------------------------------------------------------------------------


def test_the_drain_hands_back_what_was_not_answered_by_its_deadline_uncharged_and_once() -> None:
    kube = ScriptedKube(hold=frozenset(f"pod-s{i}" for i in range(20)))  # no request is answered in time
    r = rig(kube, concurrency=2, batch_size=20)
    r.retire(20)

    async def scenario() -> None:
        run = asyncio.ensure_future(r.sweeper.run())
        try:
            # Both workers are stuck in a request, each with its chunk behind it; the rest wait queued.
            await until(lambda: len(kube.calls) == 2, what="two requests in flight")
            await r.sweeper.drain(time.monotonic() + 0.3)
            await asyncio.wait_for(run, 5)  # the drain ends the sweeper's tasks
        finally:
            kube.release.set()
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)

    try:
        go(scenario())
    finally:
        kube.release.set()
    rows = r.store.rows.values()
    assert {(row.status, row.attempts) for row in rows} == {(Status.PENDING, 0)}  # all back, uncharged
    written = [i for ids in r.store.writes for i in ids]
    assert sorted(written) == sorted(row.id for row in rows)  # each once
    assert len(kube.calls) == 2  # nothing else was sent after the stop


def test_a_claim_answered_after_the_stop_began_is_handed_back_not_lost() -> None:
    """The stop lands while a claim's rows are taken but its answer is on its way: the drain lets the
    claim come back and hands its rows back uncharged, sending nothing (cancelled, the claim's rows
    would stay claimed and charged until their lease ended)."""
    r = rig(concurrency=2, batch_size=8)
    r.retire(5)
    answers = r.store.claim_returns = asyncio.Event()

    async def scenario() -> None:
        run = asyncio.ensure_future(r.sweeper.run())
        try:
            await until(lambda: len(r.store.in_status(Status.CLAIMED)) == 5, what="the claim taken")
            drain = asyncio.ensure_future(r.sweeper.drain(time.monotonic() + 5))
            await until(lambda: r.sweeper.stop.stopping, what="the stop")
            answers.set()
            await asyncio.wait_for(drain, 5)
            await asyncio.wait_for(run, 5)
        finally:
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)

    go(scenario())
    assert {(row.status, row.attempts) for row in r.store.rows.values()} == {(Status.PENDING, 0)}
    assert r.kube.calls == []


def test_a_claim_never_answered_does_not_hold_the_stop_past_its_deadline() -> None:
    r = rig()
    r.retire(3)
    r.store.claim_returns = asyncio.Event()  # never set: the database stopped answering mid-claim

    async def scenario() -> float:
        run = asyncio.ensure_future(r.sweeper.run())
        try:
            await until(lambda: len(r.store.in_status(Status.CLAIMED)) == 3, what="the claim taken")
            started = time.monotonic()
            await r.sweeper.drain(started + 0.2)
            await asyncio.wait_for(run, 5)
            return time.monotonic() - started
        finally:
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)

    took = go(scenario())
    assert took < 1.0, took  # the deadline, then the cancelled claim goes at once
    assert r.kube.calls == []
    # Its rows wait out their lease, as after a crash: nothing here can know whether the claim committed.
    assert len(r.store.in_status(Status.CLAIMED)) == 3


def test_the_whole_pipeline_on_the_memory_store_ends_every_row_once() -> None:
    """Claimer, workers and recorder together: a mix of answers, each row's verdict written once."""

    def answer(name: str) -> Answer:
        number = int(name.removeprefix("pod-s"))
        if number % 5 == 0:
            return Answer.of(404, "NotFound", "404 NotFound")
        if number % 7 == 0:
            return Answer.of(422, "Invalid", "422 Invalid")
        return Answer.of(200)

    r = rig(ScriptedKube(answer=answer), concurrency=4, batch_size=16)
    for i in range(1, 101):
        r.store.retire(f"s{i}")

    async def scenario() -> None:
        async def body() -> None:
            await until(lambda: not r.store.in_status(Status.PENDING) and not r.store.in_status(Status.CLAIMED))

        await running(r.sweeper.run(), body)
        r.sweeper.sender.close()

    go(scenario())
    ends = {row.sandbox_id: (row.status, row.outcome) for row in r.store.rows.values()}
    assert ends["s5"] == (Status.DONE, Outcome.ABSENT) and ends["s7"] == (Status.DEAD, None)
    assert ends["s1"] == (Status.DONE, Outcome.DELETED)
    written = [i for ids in r.store.writes for i in ids]
    assert sorted(written) == list(range(1, 101))
    assert len(r.kube.calls) == 100


def test_the_fake_clock_stands_still_until_moved() -> None:
    r = rig()
    before = r.clock()
    assert r.clock() == before
    r.clock.advance(5)
    assert r.clock() == before + 5
    with pytest.raises(ValueError):
        r.clock.advance(-1)


def test_the_memory_store_loads_no_database_library() -> None:
    """The in-memory store stands on store.rows and store.interface alone: imported in a fresh
    interpreter, it brings in neither psycopg nor its pool (the pipeline's tasks it drives may)."""
    program = "import sys, harness.memstore; print(sorted(m for m in sys.modules if m.startswith('psycopg')))"
    tests = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(tests)}
    ran = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, check=True)
    assert ran.stdout.strip() == "[]", ran.stdout


def test_a_probe_the_credential_hook_kept_off_the_wire_holds_the_outage_gate_and_charges_nothing() -> None:
    """A DELETE with no answer sends the outage watch to probe; a probe that cannot be sent (its
    credential hook failed) says nothing of the server, and nothing can go out: the gate closes and the
    row goes back uncharged, as in an outage."""

    @dataclass
    class NoCredentialForTheProbe(ScriptedKube):
        def probe(self, *, timeout: float) -> Answer:
            return Answer.unsent(ConnectionRefusedError("the token endpoint"))

    r = rig(NoCredentialForTheProbe(answer=lambda name: Answer.none("timed out")), concurrency=1, batch_size=1)
    sweep_and_record(r, 1)
    assert {(row.status, row.attempts) for row in r.store.rows.values()} == {(Status.PENDING, 0)}
    assert not r.sweeper.sender.outage.open
