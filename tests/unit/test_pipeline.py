"""The pipeline alone, without a database or a server: what each task may do with the rows held, and
the rule that each verdict is written once (the recorder's task and the shutdown drain both write)."""

from __future__ import annotations

import asyncio
from uuid import UUID

import pytest

from pod_sweeper.core.states import Result
from pod_sweeper.store.rows import Claim, Verdict
from pod_sweeper.tasks.sweep.pipeline import Pipeline
from unit.sweep_kit import held


def claims(n: int, start: int = 1) -> list[Claim]:
    return [Claim(i, 1, 1, f"s{i}", 1, "ns", f"p{i}", UUID(int=i), 1, "retired") for i in range(start, start + n)]


def deleted(claim: Claim) -> Verdict:
    return Verdict(claim.id, claim.epoch, Result.DELETED, http_status=200)


def test_rows_held_are_taken_in_order_and_more_work_never_waits() -> None:
    async def body() -> None:
        pipeline = Pipeline(capacity=5)
        pipeline.add(claims(3), lease_deadline=100.0)
        assert (pipeline.free, pipeline.queued, held(pipeline)) == (2, 3, 3)
        first = await pipeline.next_work()
        assert first.claim.id == 1 and first.lease_deadline == 100.0
        assert [w.claim.id for w in pipeline.more_work(5)] == [2, 3]  # what there is, at once
        assert pipeline.more_work(5) == []
        assert held(pipeline) == 3  # taken is not let go: the rows are still at the API

    asyncio.run(body())


def test_a_batch_leaves_only_once_written_and_a_failed_write_keeps_it() -> None:
    async def body() -> None:
        pipeline = Pipeline(capacity=10)
        rows = claims(5)
        pipeline.add(rows, 0.0)
        for claim in rows:
            pipeline.conclude(deleted(claim))
        assert pipeline.awaiting_answers() == []
        written: list[list[int]] = []
        database_up = False

        async def write(batch: list[Verdict]) -> None:
            if not database_up:
                assert held(pipeline) == 5  # nothing let go before the write returns
                raise OSError("database gone")
            written.append([v.id for v in batch])

        with pytest.raises(OSError):
            await pipeline.write_results(write, batch=2)
        assert (pipeline.unwritten, held(pipeline)) == (5, 5)  # kept for the retry
        database_up = True
        await pipeline.write_results(write, batch=2)
        assert written == [[1, 2], [3, 4], [5]]
        assert (pipeline.unwritten, held(pipeline), pipeline.free) == (0, 0, 10)

    asyncio.run(body())


def test_two_writers_at_once_write_each_verdict_once() -> None:
    async def body() -> None:
        pipeline = Pipeline(capacity=100)
        held = claims(50)
        pipeline.add(held, 0.0)
        for claim in held:
            pipeline.conclude(deleted(claim))
        written: list[int] = []

        async def write(batch: list[Verdict]) -> None:
            await asyncio.sleep(0)  # let the other writer try to interleave
            written.extend(v.id for v in batch)

        await asyncio.gather(pipeline.write_results(write, 7), pipeline.write_results(write, 7))
        assert sorted(written) == list(range(1, 51))  # each once

    asyncio.run(body())


def test_the_drain_takes_back_what_no_worker_took_and_waits_for_the_rest() -> None:
    async def body() -> None:
        pipeline = Pipeline(capacity=3)
        pipeline.add(claims(3), 0.0)
        at_api = await pipeline.next_work()
        waiting_for_room = asyncio.create_task(pipeline.wait_for_room())
        await asyncio.sleep(0)
        assert not waiting_for_room.done()
        unstarted = pipeline.stop_claiming()
        assert [c.id for c in unstarted] == [2, 3]
        await asyncio.wait_for(waiting_for_room, 1)  # the claimer is let out
        assert [c.id for c in pipeline.awaiting_answers()] == [1, 2, 3]
        settled = asyncio.create_task(pipeline.wait_settled(5))
        await asyncio.sleep(0)
        pipeline.conclude(deleted(at_api.claim))
        await asyncio.wait_for(settled, 1)  # woken by the verdict, not by its timeout
        assert [c.id for c in pipeline.awaiting_answers()] == [2, 3]

    asyncio.run(body())


def test_a_row_claimed_again_while_its_older_claims_verdict_waits_stays_in_hand() -> None:
    """A lease that ran out behind a stalled statement, and the same replica claims the row again (a newer
    epoch) while the older claim's verdict still waits to be written: writing that verdict lets the older
    claim go, never the newer, which the drain still waits for and hands back (issue 53's simulator, seed 2)."""

    async def body() -> None:
        pipeline = Pipeline(capacity=5)
        (old,) = claims(1)
        pipeline.add([old], 0.0)
        await pipeline.next_work()
        pipeline.conclude(deleted(old))
        new = Claim(old.id, old.epoch + 1, 1, old.sandbox_id, 1, "ns", old.pod_name, old.pod_uid, 2, "retired")
        pipeline.add([new], 10.0)
        assert held(pipeline) == 2 and pipeline.awaiting_answers() == [new]

        async def write(batch: list[Verdict]) -> None:
            assert [(v.id, v.epoch) for v in batch] == [(old.id, old.epoch)]

        await pipeline.write_results(write, batch=10)
        assert held(pipeline) == 1 and pipeline.awaiting_answers() == [new]
        assert pipeline.stop_claiming() == [new]  # still queued: the drain hands it back

    asyncio.run(body())
