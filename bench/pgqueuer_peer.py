"""The peer we measure against: the same sweeper built on pgqueuer (psycopg driver).

Each job carries one retired pod (sandbox id, generation, namespace, name, UID) as JSON. The
entrypoint does what pod-sweeper does for a row: the re-check against the executions table (one
query per job: pgqueuer hands an entrypoint one job), then the same DELETE under the UID precondition
through the same client (``PodDeleter.resolve``) on a thread pool of the same size. pgqueuer's own
queue, claim (``FOR UPDATE SKIP LOCKED``), NOTIFY and status log do the rest. It runs in drain mode:
it returns once the queue is empty.

Used by ``bench/suite.py`` only; pgqueuer is in the ``dev`` extra.
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

from pod_sweeper.kube import PodDeleter


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


async def drain(url: str, deleter: PodDeleter, n: int, *, concurrency: int, batch_size: int) -> float:
    """Rows per second from the consumer's start until the queue is empty."""
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(concurrency))
    done = 0
    async with (
        await psycopg.AsyncConnection.connect(url, autocommit=True) as conn,
        AsyncConnectionPool(url, min_size=concurrency, max_size=concurrency, open=False) as pool,
    ):
        await pool.wait()

        def consumer() -> PgQueuer:
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
                    await asyncio.to_thread(deleter.resolve, pod["ns"], pod["name"], pod["uid"], timeout=5)
                done += 1

            return pgq

        started = time.monotonic()
        # Drain mode stops at the first dequeue that finds nothing to take, which on a large backlog
        # can happen with jobs left (about 14,000 of 20,000 in one full run): start it again, the
        # clock running, until every job is done or a round makes no progress.
        while done < n:
            before = done
            # A short dequeue timeout: in drain mode pgqueuer only sees the queue empty after one.
            await consumer().qm.run(
                mode=QueueExecutionMode.drain,
                batch_size=batch_size,
                dequeue_timeout=timedelta(seconds=0.2),
            )
            if done == before:
                break
        elapsed = time.monotonic() - started
    if done < n:
        raise RuntimeError(f"the pgqueuer peer finished {done} of {n} jobs")
    return n / elapsed
