"""On a whole cluster (controller manager, scheduler, kwok's kubelets), as the shipped ServiceAccount:
retire-to-gone of Pending and Running pods, a sustained stream of retires, and a drain beside the same
account's client ceiling."""

from __future__ import annotations

import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
from rig import NS, ROOT, DaemonThread, Rig

from harness.kubeapiserver import KubeApiServerError
from harness.kubeapiserver import find_bindir as find_kube_bindir
from harness.kubecluster import KubeCluster
from pod_sweeper.kube.api import KubeClient
from pod_sweeper.kube.config import load_configuration


def whole_cluster(rig: Rig, latencies: int, sustained_seconds: float, rate: float, backlog: int) -> None:
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
                wait_for_pod(cluster, pod["metadata"]["name"], phase, refuses)
            rig.retire_to_gone(cluster, pods, f"cluster_{kind}_gone", kubeconfig=account, rate_limit_qps=50.0)
        sustained(rig, cluster, account, sustained_seconds, rate)
        kube_client = KubeClient(load_configuration(account, None, pool_size=16))
        try:
            pods = rig.real_pods(kube_client, cluster, backlog, as_admin=cluster)
            started = time.monotonic()
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(lambda p: kube_client.delete_pod(NS, p[0], p[1], timeout=10), pods))
            ceiling = backlog / (time.monotonic() - started)
        finally:
            kube_client.close()
        url = rig.fresh_db()
        admin = KubeClient(load_configuration(cluster.admin_kubeconfig, None, pool_size=16))
        try:
            rig.record(url, rig.real_pods(admin, cluster, backlog), retire=True)
        finally:
            admin.close()
        drained = rig.drain_with_daemon(url, backlog, concurrency=16, batch_size=100, kubeconfig=account)
        rig.results.update(
            cluster_account_client_ceiling_rows_per_s=round(ceiling),
            cluster_account_drain_rows_per_s=round(drained),
            cluster_account_drain_vs_client_ceiling=round(drained / ceiling, 3),
            cluster_rss_mb=round(sum(cluster.rss_bytes().values()) / 2**20),
        )


def wait_for_pod(cluster: KubeCluster, name: str, phase: str, refuses: bool) -> None:
    """Until the emulated kubelet has the pod where a test wants it (an IP and ``phase``)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pod = cluster.get_pod(NS, name) or {}
        status = pod.get("status") or {}
        if status.get("podIP") and status.get("phase") == phase:
            return
        time.sleep(0.1)
    raise RuntimeError(f"pod {name} never reached {phase}")


def sustained(rig: Rig, cluster: KubeCluster, account: Path, seconds: float, rate: float) -> None:
    """A writer retiring ``rate`` rows a second for ``seconds`` (pods made before, never scheduled),
    the daemon at the shipped rate limit as the account; the lag of each row, enqueue to done."""
    n = int(seconds * rate)
    admin = KubeClient(load_configuration(cluster.admin_kubeconfig, None, pool_size=16))
    try:
        pods = rig.real_pods(admin, cluster, n)
    finally:
        admin.close()
    url = rig.fresh_db()
    rig.record(url, pods, retire=False)
    settings = rig.settings(url, kubeconfig=account, rate_limit_qps=50.0, rate_limit_burst=100, poll_interval=5)
    with DaemonThread(settings) as running, psycopg.connect(url, autocommit=True) as conn:
        daemon = running.ready()
        started = time.monotonic()
        for i in range(n):
            conn.execute("UPDATE executions SET active = false WHERE sandbox_id = %s", (f"s{i}",))
            time.sleep(max(0.0, started + (i + 1) / rate - time.monotonic()))
        elapsed = time.monotonic() - started
        while rig.done(url) < n and time.monotonic() - started < seconds + 120:
            time.sleep(0.2)
        lags = sorted(
            r[0] * 1000
            for r in conn.execute(
                "SELECT extract(epoch FROM done_at - enqueued_at)::float8 FROM pod_sweeper.outbox WHERE status = 'done'"
            ).fetchall()
        )
        throttled = daemon.metrics.value("pod_sweeper_kube_responses_total", code="429")
    rig.results.update(
        cluster_sustained_seconds=round(elapsed),
        cluster_sustained_retires_per_s=round(n / elapsed, 1),
        cluster_sustained_done=len(lags),
        cluster_sustained_429=int(throttled),
        **rig.percentiles("cluster_sustained_lag", lags),
    )
