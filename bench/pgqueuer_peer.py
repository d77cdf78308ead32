"""The peer we measure against: the same sweeper built on pgqueuer (psycopg driver).

Each job carries one retired pod (sandbox id, generation, namespace, name, UID) as JSON. The
entrypoint does what pod-sweeper does for a row: the re-check against the executions table (one
query per job: pgqueuer hands an entrypoint one job), then the same DELETE under the UID precondition
through the same client (``KubeClient.delete_pod``) on a thread pool of the same size. pgqueuer's own
queue, claim (``FOR UPDATE SKIP LOCKED``), NOTIFY and status log do the rest. It runs in continuous
mode and stops itself when its last job is done (pgqueuer's drain mode stopped early on large
backlogs).

Used by the ``pgqueuer peer`` step (``bench/steps/ceilings.py``) only; pgqueuer is in the ``dev`` extra.
"""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import psycopg
from pgqueuer import Job, PgQueuer, Queries
from pgqueuer.db import PsycopgDriver
from pgqueuer.domain.types import QueueExecutionMode
from psycopg_pool import AsyncConnectionPool

from pod_sweeper.kube.api import KubeClient


async def install(url: str) -> None:
    """pgqueuer's schema, in the benchmark's database."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await Queries.from_psycopg_connection(conn).install()


async def enqueue(url: str, pods: list[tuple[str, int, str, str, str]]) -> None:
    """One job per retired pod (not timed: it stands for the trigger's inserts)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        queries = Queries.from_psycopg_connection(conn)
        for start in range(0, len(pods), 1000):
            chunk = pods[start : start + 1000]
            payloads: list[bytes | None] = [
                json.dumps({"sid": s, "gen": g, "ns": ns, "name": n, "uid": u}).encode() for s, g, ns, n, u in chunk
            ]
            await queries.enqueue(["delete_pod"] * len(chunk), payloads, [0] * len(chunk))


async def drain(url: str, kube_client: KubeClient, n: int, *, concurrency: int, batch_size: int) -> float:
    """Rows per second from the consumer's start until the queue is empty."""
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(concurrency))
    done = 0
    async with (
        await psycopg.AsyncConnection.connect(url, autocommit=True) as conn,
        AsyncConnectionPool(url, min_size=concurrency, max_size=concurrency, open=False) as pool,
    ):
        await pool.wait()

        pgq = PgQueuer(PsycopgDriver(conn))

        # No per-entrypoint concurrency_limit: with one, pgqueuer held each batch until its status
        # log flushed (about 100 rows per 16 s here); the thread pool bounds the DELETEs in flight.
        @pgq.entrypoint("delete_pod")
        async def delete_pod(job: Job) -> None:
            nonlocal done
            pod: dict[str, Any] = json.loads(job.payload or b"{}")
            async with pool.connection() as check:
                cur = await check.execute(
                    "SELECT 1 FROM executions WHERE sandbox_id = %s AND generation = %s AND active",
                    (pod["sid"], pod["gen"]),
                )
                active = await cur.fetchone() is not None
            if not active:
                await asyncio.to_thread(kube_client.delete_pod, pod["ns"], pod["name"], pod["uid"], timeout=5)
            done += 1
            if done >= n:
                pgq.qm.shutdown.set()

        async def stall_guard() -> None:
            # A stuck peer must not hang the suite: give up after 60 s without a finished job.
            seen, since = -1, time.monotonic()
            while not pgq.qm.shutdown.is_set():
                if done != seen:
                    seen, since = done, time.monotonic()
                elif time.monotonic() - since > 60:
                    pgq.qm.shutdown.set()
                await asyncio.sleep(1)

        started = time.monotonic()
        guard = asyncio.create_task(stall_guard())
        # Continuous mode, stopped by the last job: drain mode stops at the first dequeue that finds
        # nothing to take, which on a large backlog happened with thousands of jobs left (13,744 and
        # 12,860 of 20,000 in two full runs, the second even after restarting it).
        # max_concurrent_tasks caps the jobs picked and waiting: without it pgqueuer picked the whole
        # backlog at once, and on 20,000 jobs the tasks waiting for the 16 connections stalled it.
        await pgq.qm.run(
            mode=QueueExecutionMode.continuous,
            batch_size=batch_size,
            max_concurrent_tasks=2 * batch_size,
            dequeue_timeout=timedelta(seconds=0.2),
        )
        guard.cancel()
        elapsed = time.monotonic() - started
    if done < n:
        raise RuntimeError(f"the pgqueuer peer finished {done} of {n} jobs")
    return n / elapsed
