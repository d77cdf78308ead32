"""The stop's order, written once (tasks/sweep/stop.py), held: the phases are docs/design.md's, in its
order; none can be skipped, repeated or undone; a real drain reaches each of the sweeper's in that order
and the runner the ones around it; and the tasks obey it (no claim begins once claims are stopped)."""

from __future__ import annotations

import ast
import asyncio
import inspect
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pod_sweeper.core.states import Status
from pod_sweeper.tasks.process.runner import Daemon
from pod_sweeper.tasks.sweep.stop import Phase, StopOrder, StopOutOfOrder
from pod_sweeper.tasks.sweep.sweeper import Sweeper
from unit.sweep_kit import ScriptedKube, rig, running, until

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def designs_phases() -> list[str]:
    """The first column of docs/design.md's "The stop, in order" table, top to bottom."""
    text = (ROOT / "docs" / "design.md").read_text()
    section = text.split("### The stop, in order", 1)[1].split("\n#", 1)[0]
    rows = [line.strip().strip("|").split("|") for line in section.splitlines() if line.startswith("| `")]
    return [cells[0].strip().strip("`") for cells in rows]


def test_the_phases_are_the_designs_in_its_order() -> None:
    assert designs_phases() == [phase.name.lower() for phase in Phase]
    assert [int(phase) for phase in Phase] == list(range(len(Phase)))


def test_a_phase_cannot_be_skipped_repeated_or_undone() -> None:
    stop = StopOrder()
    assert stop.phase is Phase.RUNNING and not stop.stopping
    for phase in list(Phase)[1:]:
        for wrong in Phase:
            if wrong is not phase:
                with pytest.raises(StopOutOfOrder):
                    stop.reach(wrong)
        stop.reach(phase)
        assert stop.phase is phase and stop.reached(phase)
        assert stop.stopping is (phase >= Phase.CLAIMS_STOPPED)


def test_a_drain_reaches_the_sweepers_phases_in_order_whatever_is_in_flight() -> None:
    """Rows queued, a claim's worth at the API (one DELETE answered only after the stop began): the
    drain goes through every phase from ``CLAIMS_STOPPED`` to ``TASKS_ENDED``, in order, and leaves no
    row claimed; the runner's last phase may follow it."""
    kube = ScriptedKube(hold=frozenset({"pod-s0"}))
    r = rig(kube, concurrency=1, batch_size=4)
    r.retire(6)
    stop, seen = r.sweeper.stop, []

    async def watch(phase: Phase) -> None:
        await stop.wait(phase)
        seen.append(phase)

    async def scenario() -> None:
        watchers = [asyncio.ensure_future(watch(phase)) for phase in list(Phase)[1:]]
        run = asyncio.ensure_future(r.sweeper.run())
        await until(lambda: kube.calls == ["pod-s0"], what="a DELETE at the API")
        stop.reach(Phase.NOT_READY)  # as the runner does before the drain
        drain = asyncio.ensure_future(r.sweeper.drain(time.monotonic() + 5))
        await until(lambda: stop.stopping, what="claims stopped")
        kube.release.set()
        await asyncio.wait_for(drain, 5)
        await asyncio.wait_for(run, 5)
        assert stop.phase is Phase.TASKS_ENDED
        stop.reach(Phase.LEFT)  # the runner's, once the replica's row says it stopped
        await asyncio.wait_for(asyncio.gather(*watchers), 1)

    asyncio.run(scenario())
    assert seen == list(Phase)[1:]
    assert r.store.in_status(Status.CLAIMED) == []


def test_a_sweeper_stopped_on_its_own_begins_the_stop_itself_and_only_once() -> None:
    """The simulator and the unit tests drain a sweeper no runner made not ready: the drain begins the
    stop; a second drain of the same stop is out of order."""
    r = rig()

    async def stopped() -> None:
        await r.sweeper.first_claim()
        await r.sweeper.drain(time.monotonic() + 1)

    async def scenario() -> None:
        await running(r.sweeper.run(), stopped)
        assert r.sweeper.stop.phase is Phase.TASKS_ENDED
        with pytest.raises(StopOutOfOrder):
            await r.sweeper.drain(time.monotonic() + 1)

    asyncio.run(scenario())


def test_no_claim_begins_once_claims_are_stopped() -> None:
    r = rig()
    r.retire(3)
    r.sweeper.stop.reach(Phase.NOT_READY)
    r.sweeper.stop.reach(Phase.CLAIMS_STOPPED)
    asyncio.run(asyncio.wait_for(r.sweeper.claimer.run(), 5))
    assert len(r.store.in_status(Status.PENDING)) == 3 and r.store.in_status(Status.CLAIMED) == []


def reached_in(function: Callable[..., object]) -> list[str]:
    """The phases a function's code reaches, in the order written (``stop.reach(Phase.X)``)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    return [
        node.args[0].attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "reach"
        and node.args
        and isinstance(node.args[0], ast.Attribute)
    ]


def test_the_order_is_reached_in_two_places_only_the_runner_around_the_sweepers_drain() -> None:
    runner = reached_in(Daemon._shutdown_when_asked)
    drain = reached_in(Sweeper.drain)
    assert runner == ["NOT_READY", "LEFT"]
    assert [*runner[:1], *drain, *runner[1:]] == [phase.name for phase in list(Phase)[1:]]


def test_a_sweeper_stopped_before_it_ran_still_goes_through_every_phase() -> None:
    """A stop that comes before ``run()`` made the tasks (nothing claimed, nothing in flight) ends the
    drain in its last phase rather than in asyncio's refusal of an empty set of tasks to wait for."""
    r = rig()
    asyncio.run(r.sweeper.drain(time.monotonic() + 1))
    assert r.sweeper.stop.phase is Phase.TASKS_ENDED
