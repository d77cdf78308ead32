"""On a real kube-apiserver and etcd: the client's ceiling, the daemon's drain, and the wake latency to
the DELETED event the server's watch sends."""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rig import NS, Rig

from harness.kubeapiserver import KubeApiServer, KubeApiServerError
from harness.kubeapiserver import find_bindir as find_kube_bindir
from pod_sweeper.kube.api import KubeClient
from pod_sweeper.kube.config import load_configuration


def real_api(rig: Rig, n: int, retires: int) -> None:
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
            pods = rig.real_pods(kube_client, server, n)
            started = time.monotonic()
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(lambda p: kube_client.delete_pod(NS, p[0], p[1], timeout=10), pods))
            ceiling = n / (time.monotonic() - started)
            url = rig.fresh_db()
            rig.record(url, rig.real_pods(kube_client, server, n), retire=True)
            rate = rig.drain_with_daemon(url, n, concurrency=16, batch_size=100, kubeconfig=real)
            rig.results.update(
                real_client_ceiling_rows_per_s=round(ceiling),
                real_drain_rows_per_s=round(rate),
                real_drain_vs_client_ceiling=round(rate / ceiling, 3),
                real_drain_cpu_ms_per_row=round(rig.cpu_ms_per_row, 3),
                real_server_rss_mb=round(sum(server.rss_bytes().values()) / 2**20),
            )
            url = rig.fresh_db()
            rig.record(url, rig.real_pods(kube_client, server, retires), retire=False)
            real_wake_latency(rig, url, server, real)
        finally:
            kube_client.close()


def real_wake_latency(rig: Rig, url: str, server: KubeApiServer, kubeconfig: Path) -> None:
    """Single retires under an idle daemon: the commit to the DELETED event of the server's watch."""
    pods = {f"s{i}": name for i, (name, _) in enumerate(rig.pods)}
    latencies = rig.single_retires(url, pods, rig.deletions(server), kubeconfig=kubeconfig)
    rig.results.update(rig.percentiles("real_wake", latencies))
