"""Wake latency on the fake API server: single retires under an idle daemon, commit to DELETE."""

from __future__ import annotations

from rig import Rig

from steps.cost import GATHER_SECONDS


def wake_latency(rig: Rig, n: int) -> None:
    """An idle daemon, single retires with random 10-30 ms gaps: commit to the DELETE's arrival."""
    url = rig.fresh_db()
    rig.backlog(url, n, retire=False)

    def arrived() -> dict[str, float]:
        return {r["path"].rsplit("/", 1)[1]: r["at"] for r in rig.kube.deletes()}

    latencies = rig.single_retires(url, {f"s{i}": f"p{i}" for i in range(n)}, arrived)
    rig.results.update(rig.percentiles("wake", latencies))
    # The same retires with gathering on (POD_SWEEPER_GATHER_SECONDS, off by default): the latency it
    # trades for the primary's CPU and transactions (step cost's gathering window).
    url = rig.fresh_db()
    rig.backlog(url, n, retire=False)
    latencies = rig.single_retires(url, {f"s{i}": f"p{i}" for i in range(n)}, arrived, gather_seconds=GATHER_SECONDS)
    rig.results.update(rig.percentiles("wake_gather", latencies))
