"""What every benchmark step stands on: the throwaway PostgreSQL, the fake API server in its own process
(``RemoteFake``) and ``Rig``, which makes fresh databases and backlogs, runs the daemon over them and
measures it (a drain's rate and CPU, single retires' latency), and holds the figures the steps write."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import urllib3
from kubernetes import client

from harness.kubeapiserver import KubeApiServer
from harness.kubecluster import KubeCluster
from harness.postgres import ThrowawayCluster
from pod_sweeper.core.settings import Settings
from pod_sweeper.demo.reference import executions_ddl
from pod_sweeper.kube.api import KubeClient
from pod_sweeper.kube.config import load_configuration
from pod_sweeper.store import db
from pod_sweeper.store.admin import attach
from pod_sweeper.store.schema import migrations
from pod_sweeper.tasks.process.runner import Daemon

NS = "sandboxes"
ROOT = Path(__file__).resolve().parents[1]


class RemoteFake:
    """The fake API server in a process of its own, driven through its /_fake/ control API."""

    def __init__(self, kubeconfig: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "harness.fakekube", "--kubeconfig", str(kubeconfig)],
            cwd=ROOT / "tests",  # where the harness package is (tests/harness)
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        self._http = urllib3.PoolManager(maxsize=2)

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        response = self._http.request(method, f"{self.url}{path}", json=body)
        return json.loads(response.data) if response.data else {}

    def create_pods(self, names: list[str]) -> list[str]:
        uids: list[str] = []
        for start in range(0, len(names), 5000):
            uids += self._call("POST", "/_fake/pods", {"namespace": NS, "names": names[start : start + 5000]})["uids"]
        return uids

    def reset(self) -> None:
        self._call("POST", "/_fake/reset")

    def deletes(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/_fake/deletes")["deletes"])

    def inject(self, action: str, **kwargs: Any) -> None:
        self._call("POST", "/_fake/faults", {"action": action, **kwargs})

    def clear_faults(self) -> None:
        self._call("DELETE", "/_fake/faults")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


class DaemonThread:
    """The daemon in a thread of its own (its own event loop), as long as the block runs: started on
    entry (``ready()`` waits for its readiness), asked to stop and joined on exit."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._started = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.daemon: Daemon | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> int:
        self._loop = asyncio.get_running_loop()
        self.daemon = Daemon(self._settings, handle_signals=False)
        self._started.set()
        return await self.daemon.run()

    def __enter__(self) -> DaemonThread:
        self._thread.start()
        self._started.wait(30)
        return self

    def ready(self) -> Daemon:
        """Until the daemon is ready (its first claim made); the daemon."""
        assert self.daemon is not None
        while not self.daemon.ready:
            time.sleep(0.01)
        return self.daemon

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self.daemon is not None:
            self._loop.call_soon_threadsafe(self.daemon.stop_requested.set)
        self._thread.join(30)


class Rig:
    """The steps' shared ground, and the figures they write (``results``)."""

    def __init__(self, cluster: ThrowawayCluster, kube: RemoteFake, kubeconfig: Path, quick: bool) -> None:
        self.cluster, self.kube, self.kubeconfig, self.quick = cluster, kube, kubeconfig, quick
        self.results: dict[str, Any] = {}
        self.cpu_ms_per_row = 0.0  # of the last drain_with_daemon
        self._ceilings: list[float] = []
        self._n = 0

    def drop_databases(self) -> None:
        """Drop the databases earlier steps made: their dead rows would otherwise draw autovacuum onto
        the two cores while the next step measures (the trigger step leaves hundreds of thousands)."""
        with psycopg.connect(self.cluster.url(), autocommit=True) as conn:
            for i in range(1, self._n + 1):
                conn.execute(f'DROP DATABASE IF EXISTS "bench_{i}" WITH (FORCE)')

    def fresh_db(self, *, swept: bool = True) -> str:
        """A new database with the reference executions table, migrated and attached (``swept``), or
        the host's table alone (the host's own workload, step ``cost``)."""
        self._n += 1
        name = f"bench_{self._n}"
        with psycopg.connect(self.cluster.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        url = self.cluster.url(name)
        if swept:
            asyncio.run(self._prepare(url))
        else:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(executions_ddl())
        return url

    async def _prepare(self, url: str) -> None:
        async with db.connection(self.settings(url)) as conn:
            await migrations.migrate(conn)
            await conn.execute(executions_ddl())
            await attach.attach(conn, attach.parse_table("public.executions"), attach.parse_mapping([]))

    def settings(self, url: str, **overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "database_url": url,
            "kubeconfig": self.kubeconfig,
            "http_port": 0,
            "rate_limit_qps": 0,
            "max_deletes_per_minute": 0,
            "breaker_surge_factor": 0,
            "breaker_transaction_rows": 0,
            "log_level": "WARNING",
            "poll_interval": 30,
        }
        values.update(overrides)
        return Settings(**values)

    def backlog(self, url: str, n: int, *, retire: bool = True) -> None:
        """``n`` executions with real pods on the fake server; retired at once when ``retire``."""
        self.kube.reset()
        names = [f"p{i}" for i in range(n)]
        self.record(url, list(zip(names, self.kube.create_pods(names), strict=True)), retire=retire)

    def done(self, url: str) -> int:
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT count(*) FROM pod_sweeper.outbox WHERE status = 'done'").fetchone()
        return int(row[0]) if row else 0

    def drain_with_daemon(self, url: str, n: int, **overrides: Any) -> float:
        """Rows per second from the daemon's start to the last record. The process's CPU time over the
        same span, per row, goes in ``self.cpu_ms_per_row``: the daemon's own cost (the API server runs
        in another process; the sampling below is one indexed query every 20 ms)."""
        # One connection for the sampling, and a probe the claim's partial index answers: a new
        # connection and a count over the whole table every 20 ms cost the daemon CPU it is measured on.
        with psycopg.connect(url, autocommit=True) as probe:
            started, cpu_started = time.monotonic(), time.process_time()
            with DaemonThread(self.settings(url, **overrides)):
                while probe.execute(
                    "SELECT EXISTS (SELECT 1 FROM pod_sweeper.outbox WHERE status IN ('pending', 'claimed'))"
                ).fetchone() != (False,):
                    time.sleep(0.02)  # the benchmark's own sampling interval
                elapsed, cpu = time.monotonic() - started, time.process_time() - cpu_started
                self.cpu_ms_per_row = 1000 * cpu / n
                if (done := self.done(url)) != n:
                    print(f"  warning: {n - done} of {n} rows did not end done", file=sys.stderr)
        return n / elapsed

    def client_calls(self, n: int) -> float:
        """``n`` DELETEs through the same client (``KubeClient``, 16 threads), no database: calls/s."""
        self.backlog(self.fresh_db(), n, retire=False)
        kube_client = KubeClient(load_configuration(self.kubeconfig, None, pool_size=16))
        pods = self.pods
        started = time.monotonic()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda p: kube_client.delete_pod(NS, p[0], p[1], timeout=5), pods))
        rate = n / (time.monotonic() - started)
        self._ceilings.append(rate)
        # On a shared machine one measurement can land in a busy second: the ceiling is the mean of
        # the measurements taken around the drain (one before it, one after).
        self.results["client_ceiling_rows_per_s"] = round(statistics.mean(self._ceilings))
        self.results["client_ceiling_samples"] = [round(c) for c in self._ceilings]
        return rate

    def single_retires(
        self, url: str, pods: dict[str, str], arrived: Callable[[], dict[str, float]], **overrides: Any
    ) -> list[float]:
        """An idle daemon; each sandbox of ``pods`` (sandbox id -> pod name) retired alone, 10-30 ms
        apart; the milliseconds from each commit to the time ``arrived()`` gives its pod, sorted."""
        rng = random.Random(5)
        committed: dict[str, float] = {}
        with DaemonThread(self.settings(url, **overrides)) as running, psycopg.connect(url, autocommit=True) as conn:
            running.ready()
            for sandbox, pod in pods.items():
                conn.execute("UPDATE executions SET active = false WHERE sandbox_id = %s", (sandbox,))
                committed[pod] = time.monotonic()
                time.sleep(rng.uniform(0.010, 0.030))
            deadline = time.monotonic() + 30
            while len(arrived()) < len(pods) and time.monotonic() < deadline:
                time.sleep(0.05)
            at = arrived()
        return sorted((at[k] - t) * 1000 for k, t in committed.items() if k in at)

    @staticmethod
    def percentiles(prefix: str, latencies: list[float]) -> dict[str, float]:
        return {
            f"{prefix}_p50_ms": round(statistics.median(latencies), 2),
            f"{prefix}_p99_ms": round(latencies[int(len(latencies) * 0.99) - 1], 2),
            f"{prefix}_max_ms": round(latencies[-1], 2),
        }

    def record(self, url: str, pods: list[tuple[str, str]], *, retire: bool) -> None:
        """An execution row for each (pod name, uid), sandbox ``s<i>`` for the i-th; all retired at
        once when ``retire``. ``self.pods`` keeps the list (the steps that follow read it)."""
        with psycopg.connect(url, autocommit=True) as conn:
            with (
                conn.cursor() as cur,
                cur.copy(
                    "COPY executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid) FROM STDIN"
                ) as copy,
            ):
                for i, (name, uid) in enumerate(pods):
                    copy.write_row((f"s{i}", 1, NS, name, uuid.UUID(uid)))
            if retire:
                conn.execute("UPDATE executions SET active = false")
        self.pods = pods

    def real_pods(
        self, kube_client: KubeClient, server: KubeApiServer, n: int, *, as_admin: KubeApiServer | None = None
    ) -> list[tuple[str, str]]:
        """``n`` pending pods on the real server, created 16 at a time: (name, uid). With ``as_admin``,
        created as that server's admin whatever ``kube_client`` is (an account that may not create pods)."""
        if as_admin is not None:
            admin = KubeClient(load_configuration(as_admin.admin_kubeconfig, None, pool_size=16))
            try:
                return self.real_pods(admin, server, n)
            finally:
                admin.close()
        core: Any = client.CoreV1Api(kube_client._api_client)
        batch = uuid.uuid4().hex[:6]

        def create(i: int) -> tuple[str, str]:
            name = f"p{batch}-{i}"
            spec = {"containers": [{"name": "c", "image": "pause"}], "nodeSelector": {"never": "true"}}
            body = {"metadata": {"name": name}, "spec": spec}
            return name, str(core.create_namespaced_pod(NS, body).metadata.uid)

        with ThreadPoolExecutor(16) as pool:
            return list(pool.map(create, range(n)))

    def retire_to_gone(self, cluster: KubeCluster, pods: list[dict[str, Any]], key: str, **overrides: Any) -> None:
        """``pods`` recorded in a fresh database and retired one at a time under an idle daemon: the
        percentiles, under ``key``, of the commit to each pod's DELETED event."""
        url = self.fresh_db()
        self.record(url, [(p["metadata"]["name"], p["metadata"]["uid"]) for p in pods], retire=False)
        names = {f"s{i}": p["metadata"]["name"] for i, p in enumerate(pods)}
        gone = self.single_retires(url, names, self.deletions(cluster), **overrides)
        self.results.update(self.percentiles(key, gone))

    @staticmethod
    def deletions(server: KubeApiServer) -> Callable[[], dict[str, float]]:
        """Follow the namespace's watch (as the server's admin); what it returns gives each DELETED pod's
        time of arrival. The stream ends with the server, or after ten minutes."""
        deleted: dict[str, float] = {}
        http = urllib3.PoolManager(
            ca_certs=str(server.ca),
            cert_file=str(server.folder / "admin.crt"),
            key_file=str(server.folder / "admin.key"),
        )
        watch = http.request(
            "GET", f"{server.url}/api/v1/namespaces/{NS}/pods?watch=true&timeoutSeconds=600", preload_content=False
        )

        def follow() -> None:
            buffer = b""
            with contextlib.suppress(urllib3.exceptions.HTTPError, OSError):
                for chunk in watch.stream(4096):
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        event = json.loads(line)
                        if event["type"] == "DELETED":
                            deleted[event["object"]["metadata"]["name"]] = time.monotonic()

        threading.Thread(target=follow, daemon=True).start()
        return lambda: dict(deleted)
