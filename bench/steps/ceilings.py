"""The drain against this machine's limits: the client's ceiling (the same DELETEs, no database), the SQL's
(the claim and the record alone, no API calls), the daemon's drain beside both, the pgqueuer peer on the
same backlog, and a slow API server."""

from __future__ import annotations

import asyncio
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import urllib3
from rig import NS, Rig

from pod_sweeper.core.backoff import Backoff
from pod_sweeper.core.settings import DEFAULT_CLUSTER
from pod_sweeper.core.states import Result
from pod_sweeper.kube.api import KubeClient
from pod_sweeper.kube.config import load_configuration
from pod_sweeper.store import db
from pod_sweeper.store.rows import Verdict
from pod_sweeper.store.sweep import outbox
from pod_sweeper.store.sweep.recheck import load_attachments
from pod_sweeper.tasks.rules import verdicts

SLOW_API_DELAY = 0.05  # seconds added to every DELETE in the slow-API step
SLOW_API_CONCURRENCY = 64


def client_ceiling(rig: Rig, n: int) -> None:
    """The same DELETE calls through the same client, no database; and the fake server's own rate."""
    rig.client_calls(n)
    # The fake server alone: raw keep-alive requests, no client model layer (404s: nothing to delete).
    http = urllib3.PoolManager(maxsize=16, headers={"Authorization": "Bearer fake-token"})
    started = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(
            pool.map(
                lambda i: http.request("DELETE", f"{rig.kube.url}/api/v1/namespaces/{NS}/pods/x{i}").status,
                range(n),
            )
        )
    rig.results["fake_server_rows_per_s"] = round(n / (time.monotonic() - started))


def sql_ceiling(rig: Rig, n: int) -> None:
    """The same backlog through the claim and record SQL alone, no API calls."""
    url = rig.fresh_db()
    rig.backlog(url, n)

    policy = verdicts.Policy(10, Backoff(1.0, 1.0))

    async def run() -> float:
        async with db.connection(rig.settings(url), prepare=True) as conn:  # as the daemon's pool
            attachments = await load_attachments(conn)
            started = time.monotonic()
            total = 0
            while total < n:
                result = await outbox.claim(
                    conn,
                    cluster=DEFAULT_CLUSTER,
                    owner="bench",
                    batch=100,
                    lease_seconds=60,
                    attachments=attachments,
                    disarm=True,
                    at_claim=lambda c, checked: verdicts.at_claim(c, checked, policy),
                )
                await outbox.record_results(
                    conn,
                    [Verdict(c.id, c.epoch, Result.DELETED, http_status=200) for c in result.to_send],
                    "bench",
                    cluster=DEFAULT_CLUSTER,
                )
                total += len(result.to_send)
            return n / (time.monotonic() - started)

    rig.results["sql_ceiling_rows_per_s"] = round(asyncio.run(run()))


def drain(rig: Rig, n: int) -> None:
    url = rig.fresh_db()
    rig.backlog(url, n)
    rate = rig.drain_with_daemon(url, n, concurrency=16, batch_size=100)
    rig.client_calls(3_000 if rig.quick else 20_000)  # the ceiling again, after the drain
    rig.results["drain_rows_per_s"] = round(rate)
    rig.results["drain_cpu_ms_per_row"] = round(rig.cpu_ms_per_row, 3)
    rig.results["drain_vs_client_ceiling"] = round(rate / rig.results["client_ceiling_rows_per_s"], 3)
    rig.results["drain_vs_sql_ceiling"] = round(rate / rig.results["sql_ceiling_rows_per_s"], 3)


def pgqueuer_peer(rig: Rig, n: int) -> None:
    """The same backlog through the pgqueuer peer (bench/pgqueuer_peer.py)."""
    try:
        import pgqueuer_peer
    except ImportError:
        print("  pgqueuer is not installed (pip install -e '.[dev]'): no peer figure", file=sys.stderr)
        return
    url = rig.fresh_db()
    rig.backlog(url, n)
    pods = [(f"s{i}", 1, NS, name, uid) for i, (name, uid) in enumerate(rig.pods)]
    asyncio.run(pgqueuer_peer.install(url))
    asyncio.run(pgqueuer_peer.enqueue(url, pods))
    kube_client = KubeClient(load_configuration(rig.kubeconfig, None, pool_size=16))
    try:
        # batch_size 500: the best of 20 (37 rows/s), 100 (147/s) and 500 (261/s) on 2,000 rows here.
        rate = asyncio.run(pgqueuer_peer.drain(url, kube_client, n, concurrency=16, batch_size=500))
    finally:
        kube_client.close()
    rig.results["pgqueuer_rows_per_s"] = round(rate)
    if "drain_rows_per_s" in rig.results:
        rig.results["drain_vs_pgqueuer"] = round(rig.results["drain_rows_per_s"] / rate, 3)


def slow_api(rig: Rig, n: int) -> None:
    url = rig.fresh_db()
    rig.backlog(url, n)
    rig.kube.inject("delay", method="DELETE", seconds=SLOW_API_DELAY, times=None)
    rate = rig.drain_with_daemon(url, n, concurrency=SLOW_API_CONCURRENCY, batch_size=100)
    rig.kube.clear_faults()
    rig.results["slow_api_rows_per_s"] = round(rate)
    # 64 requests in flight of 50 ms each bound it at 1,280 calls/s, and so does the client's own
    # CPU where one process cannot make that many: the figure over the tighter of the two.
    bound = SLOW_API_CONCURRENCY / SLOW_API_DELAY
    if ceiling := rig.results.get("client_ceiling_rows_per_s"):
        rig.results["slow_api_vs_client_ceiling"] = round(rate / ceiling, 3)
        bound = min(bound, ceiling)
    rig.results["slow_api_vs_bound"] = round(rate / bound, 3)
