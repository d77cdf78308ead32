"""pod-sweeper's benchmarks: figures side by side with this machine's limits, as ratios.

Starts its own throwaway PostgreSQL and fake API server, runs every benchmark, prints a table and
(with --json FILE) writes the figures under the keys bench/README.md names. Benchmarks print numbers;
they never fail.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
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

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/pgqueuer_peer.py

from pod_sweeper.core.backoff import Backoff
from pod_sweeper.core.settings import DEFAULT_CLUSTER, Settings
from pod_sweeper.core.states import Result
from pod_sweeper.kube.api import KubeClient
from pod_sweeper.kube.config import load_configuration
from pod_sweeper.store import attach, db, migrations, outbox
from pod_sweeper.store.outbox import Verdict
from pod_sweeper.store.recheck import load_attachments
from pod_sweeper.tasks.process.runner import Daemon
from pod_sweeper.tasks.rules import answers
from pod_sweeper.testing.kubeapiserver import KubeApiServer, KubeApiServerError
from pod_sweeper.testing.kubeapiserver import find_bindir as find_kube_bindir
from pod_sweeper.testing.kubecluster import KubeCluster
from pod_sweeper.testing.kubenode import RealNode, missing_requirements
from pod_sweeper.testing.postgres import ThrowawayCluster, find_bindir
from pod_sweeper.testing.reference import executions_ddl

NS = "sandboxes"
ROOT = Path(__file__).resolve().parents[1]


RETIRE_ROWS = 100_000
SLOW_API_DELAY = 0.05  # seconds added to every DELETE in the slow-API step
SLOW_API_CONCURRENCY = 64


def seed_retire_tables(url: str) -> None:
    """``RETIRE_ROWS`` active executions with pod UIDs, and ``plain``: a copy of the table without the trigger."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid)"
            " SELECT 's' || g, 1, 'ns', 'p' || g, gen_random_uuid() FROM generate_series(1, %s) g",
            (RETIRE_ROWS,),
        )
        conn.execute("CREATE TABLE plain (LIKE executions INCLUDING ALL)")
        conn.execute("INSERT INTO plain SELECT * FROM executions")
        conn.execute("VACUUM ANALYZE")


def retire_tps(url: str, table: str, seconds: int) -> float:
    """pgbench, 8 writers for ``seconds``, one retire per transaction on ``table``: transactions/s.
    Each retire names a fresh UID, so with the trigger every transaction enqueues one row."""
    script = Path(tempfile.mkdtemp()) / "retire.sql"
    script.write_text(
        f"\\set id random(1, {RETIRE_ROWS})\n"
        f"UPDATE {table} SET active = false, pod_uid = gen_random_uuid() "
        "WHERE sandbox_id = 's' || :id AND generation = 1;\n"
    )
    out = subprocess.run(
        [str(find_bindir() / "pgbench"), "-n", "-c", "8", "-j", "2", "-T", str(seconds), "-f", str(script), url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return next(float(line.split("=")[1].split()[0]) for line in out.splitlines() if line.startswith("tps"))


class RemoteFake:
    """The fake API server in a process of its own, driven through its /_fake/ control API."""

    def __init__(self, kubeconfig: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pod_sweeper.testing.fakekube", "--kubeconfig", str(kubeconfig)],
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


class Bench:
    def __init__(self, cluster: ThrowawayCluster, kube: RemoteFake, kubeconfig: Path, quick: bool) -> None:
        self.cluster, self.kube, self.kubeconfig, self.quick = cluster, kube, kubeconfig, quick
        self.results: dict[str, Any] = {}
        self.cpu_ms_per_row = 0.0  # of the last drain_with_daemon
        self._ceilings: list[float] = []
        self._n = 0

    # --- fixtures -------------------------------------------------------------------------------------

    def drop_databases(self) -> None:
        """Drop the databases earlier steps made: their dead rows would otherwise draw autovacuum onto
        the two cores while the next step measures (the trigger step leaves hundreds of thousands)."""
        with psycopg.connect(self.cluster.url(), autocommit=True) as conn:
            for i in range(1, self._n + 1):
                conn.execute(f'DROP DATABASE IF EXISTS "bench_{i}" WITH (FORCE)')

    def fresh_db(self) -> str:
        self._n += 1
        name = f"bench_{self._n}"
        with psycopg.connect(self.cluster.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        url = self.cluster.url(name)
        asyncio.run(self._prepare(url))
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
            "log_level": "WARNING",
            "poll_interval": 30,
        }
        values.update(overrides)
        return Settings(**values)

    def backlog(self, url: str, n: int, *, retire: bool = True) -> None:
        """``n`` executions with real pods on the fake server; retired at once when ``retire``."""
        self.kube.reset()
        names = [f"p{i}" for i in range(n)]
        self._record(url, list(zip(names, self.kube.create_pods(names), strict=True)), retire=retire)

    def done(self, url: str) -> int:
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT count(*) FROM pod_sweeper.outbox WHERE status = 'done'").fetchone()
        return int(row[0]) if row else 0

    def drain_with_daemon(self, url: str, n: int, **overrides: Any) -> float:
        """Rows per second from the daemon's start to the last record. The process's CPU time over the
        same span, per row, goes in ``self.cpu_ms_per_row``: the daemon's own cost (the API server runs
        in another process; the sampling below is one indexed query every 20 ms)."""
        daemon_box: dict[str, Any] = {}

        def main() -> None:
            async def body() -> int:
                daemon_box["loop"] = asyncio.get_running_loop()
                daemon_box["d"] = Daemon(self.settings(url, **overrides), handle_signals=False)
                return await daemon_box["d"].run()

            asyncio.run(body())

        # One connection for the sampling, and a probe the claim's partial index answers: a new
        # connection and a count over the whole table every 20 ms cost the daemon CPU it is measured on.
        with psycopg.connect(url, autocommit=True) as probe:
            started, cpu_started = time.monotonic(), time.process_time()
            thread = threading.Thread(target=main, daemon=True)
            thread.start()
            while probe.execute(
                "SELECT EXISTS (SELECT 1 FROM pod_sweeper.outbox WHERE status IN ('pending', 'claimed'))"
            ).fetchone() != (False,):
                time.sleep(0.02)  # the benchmark's own sampling interval
            elapsed, cpu = time.monotonic() - started, time.process_time() - cpu_started
        self.cpu_ms_per_row = 1000 * cpu / n
        if (done := self.done(url)) != n:
            print(f"  warning: {n - done} of {n} rows did not end done", file=sys.stderr)
        daemon_box["loop"].call_soon_threadsafe(daemon_box["d"].stop_requested.set)
        thread.join(30)
        return n / elapsed

    # --- benchmarks -----------------------------------------------------------------------------------

    def trigger_ratio(self) -> None:
        """8 concurrent writers, one retire per transaction (pgbench), with and without the trigger,
        interleaved; with the trigger twice: the wakeup flag clear (a sweeper is claiming, so retires
        do not NOTIFY: migration 0007) and armed (every sweeper asleep: each retire NOTIFYs)."""
        url = self.fresh_db()
        seed_retire_tables(url)
        rounds = 2 if self.quick else 4
        seconds = 3 if self.quick else 8
        figures: dict[str, list[float]] = {"clear": [], "armed": [], "plain": []}
        for _ in range(rounds):
            for case in ("clear", "plain", "armed"):
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute("UPDATE pod_sweeper.wakeup SET armed = %s", (case == "armed",))
                figures[case].append(retire_tps(url, "plain" if case == "plain" else "executions", seconds))
        clear, armed, without = (statistics.median(figures[k]) for k in ("clear", "armed", "plain"))
        self.results.update(
            trigger_tps=round(clear),
            trigger_armed_tps=round(armed),
            no_trigger_tps=round(without),
            trigger_ratio=round(clear / without, 3),
            trigger_ratio_armed=round(armed / without, 3),
        )

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

    def client_ceiling(self, n: int) -> None:
        """The same DELETE calls through the same client, no database; and the fake server's own rate."""
        self.client_calls(n)
        # The fake server alone: raw keep-alive requests, no client model layer (404s: nothing to delete).
        http = urllib3.PoolManager(maxsize=16, headers={"Authorization": "Bearer fake-token"})
        started = time.monotonic()
        with ThreadPoolExecutor(16) as pool:
            list(
                pool.map(
                    lambda i: http.request("DELETE", f"{self.kube.url}/api/v1/namespaces/{NS}/pods/x{i}").status,
                    range(n),
                )
            )
        self.results["fake_server_rows_per_s"] = round(n / (time.monotonic() - started))

    def sql_ceiling(self, n: int) -> None:
        """The same backlog through the claim and record SQL alone, no API calls."""
        url = self.fresh_db()
        self.backlog(url, n)

        policy = answers.Policy(10, Backoff(1.0, 1.0))

        async def run() -> float:
            async with db.connection(self.settings(url), prepare=True) as conn:  # as the daemon's pool
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
                        at_claim=lambda c, checked: answers.at_claim(c, checked, policy),
                    )
                    await outbox.record_results(
                        conn,
                        [Verdict(c.id, c.epoch, Result.DELETED, http_status=200) for c in result.to_send],
                        "bench",
                        cluster=DEFAULT_CLUSTER,
                    )
                    total += len(result.to_send)
                return n / (time.monotonic() - started)

        self.results["sql_ceiling_rows_per_s"] = round(asyncio.run(run()))

    def drain(self, n: int) -> None:
        url = self.fresh_db()
        self.backlog(url, n)
        rate = self.drain_with_daemon(url, n, concurrency=16, batch_size=100)
        self.client_calls(3_000 if self.quick else 20_000)  # the ceiling again, after the drain
        self.results["drain_rows_per_s"] = round(rate)
        self.results["drain_cpu_ms_per_row"] = round(self.cpu_ms_per_row, 3)
        self.results["drain_vs_client_ceiling"] = round(rate / self.results["client_ceiling_rows_per_s"], 3)
        self.results["drain_vs_sql_ceiling"] = round(rate / self.results["sql_ceiling_rows_per_s"], 3)

    def pgqueuer_peer(self, n: int) -> None:
        """The same backlog through the pgqueuer peer (bench/pgqueuer_peer.py)."""
        try:
            import pgqueuer_peer
        except ImportError:
            print("  pgqueuer is not installed (pip install -e '.[dev]'): no peer figure", file=sys.stderr)
            return
        url = self.fresh_db()
        self.backlog(url, n)
        pods = [(f"s{i}", 1, NS, name, uid) for i, (name, uid) in enumerate(self.pods)]
        asyncio.run(pgqueuer_peer.install(url))
        asyncio.run(pgqueuer_peer.enqueue(url, pods))
        kube_client = KubeClient(load_configuration(self.kubeconfig, None, pool_size=16))
        try:
            # batch_size 500: the best of 20 (37 rows/s), 100 (147/s) and 500 (261/s) on 2,000 rows here.
            rate = asyncio.run(pgqueuer_peer.drain(url, kube_client, n, concurrency=16, batch_size=500))
        finally:
            kube_client.close()
        self.results["pgqueuer_rows_per_s"] = round(rate)
        if "drain_rows_per_s" in self.results:
            self.results["drain_vs_pgqueuer"] = round(self.results["drain_rows_per_s"] / rate, 3)

    def slow_api(self, n: int) -> None:
        url = self.fresh_db()
        self.backlog(url, n)
        self.kube.inject("delay", method="DELETE", seconds=SLOW_API_DELAY, times=None)
        rate = self.drain_with_daemon(url, n, concurrency=SLOW_API_CONCURRENCY, batch_size=100)
        self.kube.clear_faults()
        self.results["slow_api_rows_per_s"] = round(rate)
        # 64 requests in flight of 50 ms each bound it at 1,280 calls/s, and so does the client's own
        # CPU where one process cannot make that many: the figure over the tighter of the two.
        bound = SLOW_API_CONCURRENCY / SLOW_API_DELAY
        if ceiling := self.results.get("client_ceiling_rows_per_s"):
            self.results["slow_api_vs_client_ceiling"] = round(rate / ceiling, 3)
            bound = min(bound, ceiling)
        self.results["slow_api_vs_bound"] = round(rate / bound, 3)

    def wake_latency(self, n: int) -> None:
        """An idle daemon, single retires with random 10-30 ms gaps: commit to the DELETE's arrival."""
        url = self.fresh_db()
        self.backlog(url, n, retire=False)

        def arrived() -> dict[str, float]:
            return {r["path"].rsplit("/", 1)[1]: r["at"] for r in self.kube.deletes()}

        latencies = self._single_retires(url, {f"s{i}": f"p{i}" for i in range(n)}, arrived)
        self.results.update(self._percentiles("wake", latencies))

    def _single_retires(
        self, url: str, pods: dict[str, str], arrived: Callable[[], dict[str, float]], **overrides: Any
    ) -> list[float]:
        """An idle daemon; each sandbox of ``pods`` (sandbox id -> pod name) retired alone, 10-30 ms
        apart; the milliseconds from each commit to the time ``arrived()`` gives its pod, sorted."""
        box: dict[str, Any] = {}

        def main() -> None:
            async def body() -> int:
                box["loop"] = asyncio.get_running_loop()
                box["d"] = Daemon(self.settings(url, **overrides), handle_signals=False)
                return await box["d"].run()

            asyncio.run(body())

        thread = threading.Thread(target=main, daemon=True)
        thread.start()
        while not (box.get("d") and box["d"].ready):
            time.sleep(0.01)
        rng = random.Random(5)
        committed: dict[str, float] = {}
        with psycopg.connect(url, autocommit=True) as conn:
            for sandbox, pod in pods.items():
                conn.execute("UPDATE executions SET active = false WHERE sandbox_id = %s", (sandbox,))
                committed[pod] = time.monotonic()
                time.sleep(rng.uniform(0.010, 0.030))
        deadline = time.monotonic() + 30
        while len(arrived()) < len(pods) and time.monotonic() < deadline:
            time.sleep(0.05)
        box["loop"].call_soon_threadsafe(box["d"].stop_requested.set)
        thread.join(30)
        at = arrived()
        return sorted((at[k] - t) * 1000 for k, t in committed.items() if k in at)

    @staticmethod
    def _percentiles(prefix: str, latencies: list[float]) -> dict[str, float]:
        return {
            f"{prefix}_p50_ms": round(statistics.median(latencies), 2),
            f"{prefix}_p99_ms": round(latencies[int(len(latencies) * 0.99) - 1], 2),
            f"{prefix}_max_ms": round(latencies[-1], 2),
        }

    def real_api(self, n: int, retires: int) -> None:
        """Against a real kube-apiserver and etcd (tools/kube/build): the same client alone (the real
        ceiling), the daemon's drain of ``n`` pods, and the wake latency of ``retires`` single retires,
        from the commit to the DELETED event the server's watch sends for the pod."""
        try:
            bindir = find_kube_bindir()
        except KubeApiServerError as exc:
            print(f"  no real API server figures: {exc}", file=sys.stderr)
            return
        with KubeApiServer(bindir) as server:
            server.namespace(NS)
            real = server.admin_kubeconfig  # system:masters: exempt from Priority and Fairness, as a ceiling must be
            kube_client = KubeClient(load_configuration(real, None, pool_size=16))
            try:
                pods = self._real_pods(kube_client, server, n)
                started = time.monotonic()
                with ThreadPoolExecutor(16) as pool:
                    list(pool.map(lambda p: kube_client.delete_pod(NS, p[0], p[1], timeout=10), pods))
                ceiling = n / (time.monotonic() - started)
                url = self.fresh_db()
                self._record(url, self._real_pods(kube_client, server, n), retire=True)
                rate = self.drain_with_daemon(url, n, concurrency=16, batch_size=100, kubeconfig=real)
                self.results.update(
                    real_client_ceiling_rows_per_s=round(ceiling),
                    real_drain_rows_per_s=round(rate),
                    real_drain_vs_client_ceiling=round(rate / ceiling, 3),
                    real_drain_cpu_ms_per_row=round(self.cpu_ms_per_row, 3),
                    real_server_rss_mb=round(sum(server.rss_bytes().values()) / 2**20),
                )
                url = self.fresh_db()
                self._record(url, self._real_pods(kube_client, server, retires), retire=False)
                self._real_wake_latency(url, server, real)
            finally:
                kube_client.close()

    def whole_cluster(self, latencies: int, sustained_seconds: float, rate: float, backlog: int) -> None:
        """On a whole cluster (controller manager, scheduler, kwok's emulated kubelets), as the shipped
        ServiceAccount with a token from the TokenRequest API (not exempt from Priority and Fairness):
        retire-to-gone latency of Pending pods (a runtime that refuses them) and of Running pods, from the
        commit to the pod's DELETED event (the kubelet ending it); a sustained stream of ``rate`` retires
        a second for ``sustained_seconds`` at the shipped rate limit, with its lag (enqueue to done); and
        the drain of a ``backlog`` as the account beside the same client alone, as the same account."""
        try:
            bindir = find_kube_bindir()
            cluster = KubeCluster(bindir)
        except KubeApiServerError as exc:
            print(f"  no whole-cluster figures: {exc}", file=sys.stderr)
            return
        with cluster:
            cluster.namespace(NS)
            for name in ("serviceaccount.yaml", "role.yaml", "rolebinding.yaml"):
                cluster.kubectl("apply", "--server-side", "-f", str(ROOT / "deploy" / name))
            account = cluster.token_kubeconfig(
                Path(tempfile.mkdtemp()) / "sa.kubeconfig", cluster.token(NS, "pod-sweeper"), namespace=NS
            )
            for _ in range(2):
                cluster.add_node()
            for kind, refuses, phase in (("pending", True, "Pending"), ("running", False, "Running")):
                pods = [cluster.pod(NS, f"{kind}-{i}", refuses=refuses, grace=1) for i in range(latencies)]
                for pod in pods:
                    self._wait_for_pod(cluster, pod["metadata"]["name"], phase, refuses)
                self._retire_to_gone(cluster, pods, f"cluster_{kind}_gone", kubeconfig=account, rate_limit_qps=50.0)
            self._sustained(cluster, account, sustained_seconds, rate)
            kube_client = KubeClient(load_configuration(account, None, pool_size=16))
            try:
                pods = self._real_pods(kube_client, cluster, backlog, as_admin=cluster)
                started = time.monotonic()
                with ThreadPoolExecutor(16) as pool:
                    list(pool.map(lambda p: kube_client.delete_pod(NS, p[0], p[1], timeout=10), pods))
                ceiling = backlog / (time.monotonic() - started)
            finally:
                kube_client.close()
            url = self.fresh_db()
            admin = KubeClient(load_configuration(cluster.admin_kubeconfig, None, pool_size=16))
            try:
                self._record(url, self._real_pods(admin, cluster, backlog), retire=True)
            finally:
                admin.close()
            drained = self.drain_with_daemon(url, backlog, concurrency=16, batch_size=100, kubeconfig=account)
            self.results.update(
                cluster_account_client_ceiling_rows_per_s=round(ceiling),
                cluster_account_drain_rows_per_s=round(drained),
                cluster_account_drain_vs_client_ceiling=round(drained / ceiling, 3),
                cluster_rss_mb=round(sum(cluster.rss_bytes().values()) / 2**20),
            )

    def real_node(self, latencies: int) -> None:
        """On a real node (containerd and a kubelet, ``pod_sweeper.testing.kubenode``) joined to the whole
        cluster: its start-up (containerd started to node Ready), and retire-to-gone of Pending pods whose
        sandbox the runtime refuses (a RuntimeClass without a handler) and of Running pods (grace 1 s),
        from the commit to the pod's DELETED event: the real kubelet's end of each pod included."""
        try:
            bindir = find_kube_bindir()
        except KubeApiServerError as exc:
            print(f"  no real-node figures: {exc}", file=sys.stderr)
            return
        missing = missing_requirements() + ([] if (bindir / "kubelet").is_file() else ["tools/kube/build's kubelet"])
        if missing:
            print(f"  no real-node figures: a real node needs {', '.join(missing)}", file=sys.stderr)
            return
        with KubeCluster(bindir) as cluster, RealNode(cluster) as node:
            assert node.started_in is not None
            cluster.namespace(NS)
            refused = node.refusing_runtime_class()
            for kind, runtime_class in (("pending", refused), ("running", None)):
                pods = [
                    node.pod(NS, f"node-{kind}-{i}", runtime_class=runtime_class, grace=1) for i in range(latencies)
                ]
                deadline = time.monotonic() + 120
                for pod in pods:
                    name = pod["metadata"]["name"]
                    while not (node.refusals(NS, name) if runtime_class else cluster.phase(NS, name) == "Running"):
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"pod {name} never reached where the step wants it")
                        time.sleep(0.1)
                self._retire_to_gone(cluster, pods, f"node_{kind}_gone", kubeconfig=cluster.admin_kubeconfig)
            rss = node.rss_bytes()
            self.results.update(
                node_ready_s=round(node.started_in, 2),
                node_kubelet_rss_mb=round(rss.get("kubelet", 0) / 2**20),
                node_containerd_rss_mb=round(rss.get("containerd", 0) / 2**20),
            )

    def _retire_to_gone(self, cluster: KubeCluster, pods: list[dict[str, Any]], key: str, **overrides: Any) -> None:
        """``pods`` recorded in a fresh database and retired one at a time under an idle daemon: the
        percentiles, under ``key``, of the commit to each pod's DELETED event."""
        url = self.fresh_db()
        self._record(url, [(p["metadata"]["name"], p["metadata"]["uid"]) for p in pods], retire=False)
        names = {f"s{i}": p["metadata"]["name"] for i, p in enumerate(pods)}
        gone = self._single_retires(url, names, self._deletions(cluster), **overrides)
        self.results.update(self._percentiles(key, gone))

    @staticmethod
    def _wait_for_pod(cluster: KubeCluster, name: str, phase: str, refuses: bool) -> None:
        """Until the emulated kubelet has the pod where a test wants it (an IP and ``phase``)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pod = cluster.get_pod(NS, name) or {}
            status = pod.get("status") or {}
            if status.get("podIP") and status.get("phase") == phase:
                return
            time.sleep(0.1)
        raise RuntimeError(f"pod {name} never reached {phase}")

    @staticmethod
    def _deletions(cluster: KubeCluster) -> Callable[[], dict[str, float]]:
        """Follow the namespace's watch; what it returns gives each DELETED pod's time of arrival."""
        deleted: dict[str, float] = {}
        http = urllib3.PoolManager(
            ca_certs=str(cluster.ca),
            cert_file=str(cluster.folder / "admin.crt"),
            key_file=str(cluster.folder / "admin.key"),
        )
        watch = http.request(
            "GET", f"{cluster.url}/api/v1/namespaces/{NS}/pods?watch=true&timeoutSeconds=600", preload_content=False
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

    def _sustained(self, cluster: KubeCluster, account: Path, seconds: float, rate: float) -> None:
        """A writer retiring ``rate`` rows a second for ``seconds`` (pods made before, never scheduled),
        the daemon at the shipped rate limit as the account; the lag of each row, enqueue to done."""
        n = int(seconds * rate)
        admin = KubeClient(load_configuration(cluster.admin_kubeconfig, None, pool_size=16))
        try:
            pods = self._real_pods(admin, cluster, n)
        finally:
            admin.close()
        url = self.fresh_db()
        self._record(url, pods, retire=False)
        box: dict[str, Any] = {}

        def main() -> None:
            async def body() -> int:
                box["loop"] = asyncio.get_running_loop()
                box["d"] = Daemon(
                    self.settings(url, kubeconfig=account, rate_limit_qps=50.0, rate_limit_burst=100, poll_interval=5),
                    handle_signals=False,
                )
                return await box["d"].run()

            asyncio.run(body())

        thread = threading.Thread(target=main, daemon=True)
        thread.start()
        while not (box.get("d") and box["d"].ready):
            time.sleep(0.01)
        started = time.monotonic()
        with psycopg.connect(url, autocommit=True) as conn:
            for i in range(n):
                conn.execute("UPDATE executions SET active = false WHERE sandbox_id = %s", (f"s{i}",))
                time.sleep(max(0.0, started + (i + 1) / rate - time.monotonic()))
            elapsed = time.monotonic() - started
            while self.done(url) < n and time.monotonic() - started < seconds + 120:
                time.sleep(0.2)
            lags = sorted(
                r[0] * 1000
                for r in conn.execute(
                    "SELECT extract(epoch FROM done_at - enqueued_at)::float8 FROM pod_sweeper.outbox"
                    " WHERE status = 'done'"
                ).fetchall()
            )
            throttled = box["d"].metrics.value("pod_sweeper_kube_responses_total", code="429")
        box["loop"].call_soon_threadsafe(box["d"].stop_requested.set)
        thread.join(30)
        self.results.update(
            cluster_sustained_seconds=round(elapsed),
            cluster_sustained_retires_per_s=round(n / elapsed, 1),
            cluster_sustained_done=len(lags),
            cluster_sustained_429=int(throttled),
            **self._percentiles("cluster_sustained_lag", lags),
        )

    def _real_pods(
        self, kube_client: KubeClient, server: KubeApiServer, n: int, *, as_admin: KubeApiServer | None = None
    ) -> list[tuple[str, str]]:
        """``n`` pending pods on the real server, created 16 at a time: (name, uid). With ``as_admin``,
        created as that server's admin whatever ``kube_client`` is (an account that may not create pods)."""
        if as_admin is not None:
            admin = KubeClient(load_configuration(as_admin.admin_kubeconfig, None, pool_size=16))
            try:
                return self._real_pods(admin, server, n)
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

    def _record(self, url: str, pods: list[tuple[str, str]], *, retire: bool) -> None:
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

    def _real_wake_latency(self, url: str, server: KubeApiServer, kubeconfig: Path) -> None:
        deleted: dict[str, float] = {}
        http = urllib3.PoolManager(
            ca_certs=str(server.ca),
            cert_file=str(server.folder / "admin.crt"),
            key_file=str(server.folder / "admin.key"),
        )
        watch = http.request(
            "GET", f"{server.url}/api/v1/namespaces/{NS}/pods?watch=true&timeoutSeconds=300", preload_content=False
        )

        def follow() -> None:
            buffer = b""
            with contextlib.suppress(urllib3.exceptions.HTTPError, OSError):  # the stream closed at the end
                for chunk in watch.stream(4096):
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        event = json.loads(line)
                        if event["type"] == "DELETED":
                            deleted[event["object"]["metadata"]["name"]] = time.monotonic()

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        pods = {f"s{i}": name for i, (name, _) in enumerate(self.pods)}
        latencies = self._single_retires(url, pods, lambda: dict(deleted), kubeconfig=kubeconfig)
        watch.release_conn()
        self.results.update(self._percentiles("real_wake", latencies))

    def claim_scaling(self, done_rows: int) -> None:
        """The claim query's latency with ``done_rows`` done rows over its latency with none: two
        databases with the same 100 open rows of cluster east, measured in alternating rounds (a busy
        minute on a shared machine then weighs on both sides alike). The full one also holds another
        cluster: half the done rows are west's, and west has 1,000 open rows of its own; east's claim
        must not pay for them (migration 0009's index leads with the cluster)."""
        empty_url, full_url = self.fresh_db(), self.fresh_db()
        claim = __import__("pod_sweeper.store.queries", fromlist=["load"]).load("claim")
        params = {
            "batch": 100,
            "max_attempts": 10,
            "owner": "b",
            "lease_seconds": 60,
            "disarm": True,
            "cluster": "east",
            "guard": None,
        }

        def claim_times(conn: psycopg.Connection[Any], n: int) -> list[float]:
            times = []
            for _ in range(n):
                started = time.perf_counter()
                conn.execute(claim, params).fetchall()
                times.append(time.perf_counter() - started)
                conn.rollback()
            return times

        for url, done in ((empty_url, 0), (full_url, done_rows)):
            with psycopg.connect(url, autocommit=True) as conn:
                # as a claiming sweeper keeps it: the claim finds the flag clear (no update to make)
                conn.execute("INSERT INTO pod_sweeper.wakeup (cluster, armed) VALUES ('east', false)")
                conn.execute(
                    "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace,"
                    " pod_name, pod_uid, reason, cluster) SELECT 1, 'o' || g, g, 'ns', 'o' || g, gen_random_uuid(),"
                    " 'retired', 'east' FROM generate_series(1, 100) g"
                )
                conn.execute(
                    "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace,"
                    " pod_name, pod_uid, reason, status, outcome, done_at, cluster) SELECT 1, 'd' || g, g, 'ns',"
                    # ascending UUIDs: the unique index grows at its right edge, the seeding is quicker
                    # (the claim never reads that index)
                    " 'd' || g, ('00000000-0000-4000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 'retired',"
                    " 'done', 'deleted', now(), CASE WHEN g %% 2 = 0 THEN 'east' ELSE 'west' END"
                    " FROM generate_series(1, %s) g",
                    (done,),
                )
                if done:
                    conn.execute(
                        "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace,"
                        " pod_name, pod_uid, reason, cluster) SELECT 1, 'w' || g, g, 'ns', 'w' || g,"
                        " gen_random_uuid(), 'retired', 'west' FROM generate_series(1, 1000) g"
                    )
                conn.execute("VACUUM ANALYZE pod_sweeper.outbox")
        samples: dict[str, list[float]] = {"empty": [], "full": []}
        with psycopg.connect(empty_url) as e, psycopg.connect(full_url) as f:
            for _ in range(10):
                samples["empty"] += claim_times(e, 20)
                samples["full"] += claim_times(f, 20)
        empty, full = (statistics.median(samples[k]) * 1000 for k in ("empty", "full"))
        key = "claim_ratio_10m"
        self.results.update(
            {
                key: round(full / empty, 3),
                "claim_done_rows": done_rows,
                "claim_ms_empty": round(empty, 3),
                "claim_ms_full": round(full, 3),
            }
        )

    def rss(self, n: int) -> None:
        """Peak memory of a daemon process draining an ``n``-row backlog."""
        url = self.fresh_db()
        self.backlog(url, n)
        env = {
            **os.environ,
            "POD_SWEEPER_DATABASE_URL": url,
            "POD_SWEEPER_KUBECONFIG": str(self.kubeconfig),
            "POD_SWEEPER_HTTP_PORT": "0",
            "POD_SWEEPER_RATE_LIMIT_QPS": "0",
            "POD_SWEEPER_MAX_DELETES_PER_MINUTE": "0",
            "POD_SWEEPER_LOG_LEVEL": "WARNING",
        }
        proc = subprocess.Popen([sys.executable, "-m", "pod_sweeper", "run"], env=env)
        peak = 0
        while self.done(url) < n:
            try:
                status = Path(f"/proc/{proc.pid}/status").read_text()
                peak = max(peak, int(next(x for x in status.splitlines() if x.startswith("VmHWM")).split()[1]))
            except (OSError, StopIteration):
                pass
            time.sleep(0.2)
        proc.terminate()
        proc.wait(30)
        self.results.update(rss_mb=round(peak / 1024, 1), rss_backlog_rows=n)


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench/run")
    parser.add_argument("--quick", action="store_true", help="small sizes, about two minutes on 2 cores")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument(
        "--only", metavar="STEPS", help="comma-separated step names to run (e.g. 'drain,pgqueuer peer'); default all"
    )
    args = parser.parse_args()
    quick = args.quick
    # A SIGTERM (a `timeout`, a Ctrl-C'd wrapper) unwinds like an exception, so the throwaway cluster
    # and the fake server are stopped rather than left running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    with ThrowawayCluster() as cluster, tempfile.TemporaryDirectory() as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        kube = RemoteFake(kubeconfig)  # its own process: it must not share the client's interpreter
        bench = Bench(cluster, kube, kubeconfig, quick)
        # The client loads its API classes lazily, seconds of CPU here: pay that once, before any step
        # measures a daemon from its start (an --only run would otherwise count it in its figure).
        KubeClient(load_configuration(kubeconfig, None, pool_size=1)).close()
        steps = [
            ("trigger cost", bench.trigger_ratio),
            ("client ceiling", lambda: bench.client_ceiling(3_000 if quick else 20_000)),
            ("SQL ceiling", lambda: bench.sql_ceiling(10_000 if quick else 20_000)),
            ("drain", lambda: bench.drain(5_000 if quick else 20_000)),
            ("pgqueuer peer", lambda: bench.pgqueuer_peer(2_000 if quick else 20_000)),
            ("slow API", lambda: bench.slow_api(2_000 if quick else 5_000)),
            ("wake latency", lambda: bench.wake_latency(200 if quick else 500)),
            ("real API server", lambda: bench.real_api(1_000 if quick else 5_000, 200 if quick else 500)),
            (
                "whole cluster",
                lambda: bench.whole_cluster(
                    50 if quick else 200, 120.0, 40.0 if quick else 50.0, 1_000 if quick else 5_000
                ),
            ),
            ("real node", lambda: bench.real_node(10 if quick else 50)),
            ("claim scaling", lambda: bench.claim_scaling(1_000_000 if quick else 10_000_000)),
            ("memory", lambda: bench.rss(4_000 if quick else 200_000)),
        ]
        if quick and not args.only:
            # Two minutes of sustained sweeping alone would double the quick run: the whole cluster's
            # figures come with the full run, or with --only "whole cluster".
            steps = [(label, step) for label, step in steps if label not in ("whole cluster", "real node")]
        if args.only:
            wanted = {w.strip() for w in args.only.split(",")}
            # The ratios need their ceilings: a drain brings the client and SQL ceilings along.
            if wanted & {"drain", "pgqueuer peer"}:
                wanted |= {"client ceiling", "SQL ceiling", "drain"}
            steps = [(label, step) for label, step in steps if label in wanted]
        try:
            for label, step in steps:
                bench.drop_databases()
                t = time.monotonic()
                step()
                print(f"  {label}: {time.monotonic() - t:.1f} s", file=sys.stderr, flush=True)
        finally:
            kube.close()
    results = {
        **bench.results,
        "quick": quick,
        "seconds": round(time.monotonic() - started, 1),
        "cpus": os.cpu_count(),
        "maxrss_bench_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }
    width = max(len(k) for k in results)
    for key, value in results.items():
        print(f"{key.ljust(width)}  {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
