"""The image tests/image builds, imported into the real node's containerd and run in real pods:

- as the Deployment of deploy/ (the kustomization rendered and applied, its migrate Job included): the
  Job migrates an empty database in a real container, the replicas pass their real probes with the
  ServiceAccount token the kubelet projects, as user 10001 on a read-only root under the runtime's
  memory limit, and sweep; a replica's pod deleted (the kubelet's SIGTERM) stops cleanly within its grace;
- as the native sidecar of deploy/sidecar/example beside a host container: the host runs and the
  sweeper sweeps; and in each start-up failure (the schema not migrated, a bad setting, the database
  unreachable) the host container still starts, is Ready and stays Running, the sweeper saying why.

What differs from the shipped files, and why: the image names (no registry here), and the pods'
placement on the real node (a node selector and a toleration of its taint: kwok's nodes share the
cluster, and would otherwise take the pods without running them). The pods reach the API server through
the `kubernetes` Service's ClusterIP and PostgreSQL through the bridge's host address
(``RealNode.route_service``, ``RealNode.forward``), since both listen on the machine's loopback."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from chart_render import CHART, helm
from containers import ROOT, Podman
from harness.kubecluster import KubeCluster
from harness.kubenode import PAUSE_IMAGE, TAINT, RealNode
from helpers import attach_table, cli, create_executions, record_pod, retire, row_for, run, wait_until

NS = "sandboxes"  # the shipped kustomizations' namespace
SHIPPED_IMAGE = "registry.example.invalid/pod-sweeper:0.1.0"
HOST_IMAGE = "registry.example.invalid/control-plane:1.0"


@pytest.fixture(scope="module")
def node_image(real_node: RealNode, image: str, podman: Podman, tmp_path_factory: pytest.TempPathFactory) -> str:
    archive = tmp_path_factory.mktemp("node-image") / "image.tar"
    podman("save", "--format", "docker-archive", "-o", str(archive), image)
    real_node.import_image(archive)
    assert any(name.endswith(image.split("/", 1)[1]) for name in real_node.images()), real_node.images()
    return image


def rendered(cluster: KubeCluster, folder: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(cluster.kubectl("kustomize", str(folder))) if d]


def on_the_node(docs: list[dict[str, Any]], node: RealNode, image: str) -> list[dict[str, Any]]:
    """The shipped objects with the image names replaced and the pods placed on the real node."""
    for doc in docs:
        if doc["kind"] not in ("Deployment", "Job"):
            continue
        spec = doc["spec"]["template"]["spec"]
        spec["nodeSelector"] = {"kubernetes.io/hostname": node.name}
        spec["tolerations"] = [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}]
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            if container["image"] == SHIPPED_IMAGE:
                container["image"] = image
            elif container["image"] == HOST_IMAGE:  # the example's host: pause, answering its probe
                container["image"], container["args"] = PAUSE_IMAGE, ["-listen", ":8080"]
            container["imagePullPolicy"] = "Never"
    return docs


def apply(cluster: KubeCluster, docs: list[dict[str, Any]]) -> None:
    cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=pod-sweeper-test", "-f", "-",
        stdin=yaml.safe_dump_all(docs),
    )  # fmt: skip


def secret(cluster: KubeCluster, urls: dict[str, str]) -> None:
    body = {"metadata": {"name": "pod-sweeper"}, "stringData": urls}
    cluster.request("DELETE", f"/api/v1/namespaces/{NS}/secrets/pod-sweeper")
    status, answer = cluster.request("POST", f"/api/v1/namespaces/{NS}/secrets", body)
    assert status == 201, answer


def through_the_bridge(node: RealNode, url: str) -> str:
    """``url`` as a pod reaches it: PostgreSQL's loopback port through the node's forwarder."""
    host, port = node.forward(int(conninfo_to_dict(url)["port"] or 5432))
    return make_conninfo(url, host=host, port=str(port))


def pods(cluster: KubeCluster, selector: str, ns: str = NS) -> list[dict[str, Any]]:
    return list(cluster.request("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}")[1]["items"])


def process(node: RealNode, pod: dict[str, Any], container: str) -> int:
    """The host PID of a container's main process (from containerd's task list)."""
    [status] = [s for s in pod["status"].get("containerStatuses", []) + pod["status"].get("initContainerStatuses", [])
                if s["name"] == container]  # fmt: skip
    container_id = status["containerID"].split("://")[1]
    for line in node.ctr("tasks", "list").splitlines()[1:]:
        task, pid, *_ = line.split()
        if task == container_id:
            return int(pid)
    raise AssertionError(f"no task for {container} ({container_id})")


def waiting_for(node: RealNode, cluster: KubeCluster, selector: str, condition: Any, what: str, ns: str = NS) -> Any:
    """``wait_until``, but a timeout says what each pod of ``selector`` shows: its containers' states
    and the last lines they logged."""
    try:
        return wait_until(condition, timeout=120, interval=0.5, what=what)
    except AssertionError as exc:
        report = [str(exc)]
        for pod in pods(cluster, selector, ns):
            statuses = pod["status"].get("initContainerStatuses", []) + pod["status"].get("containerStatuses", [])
            report.append(f"{pod['metadata']['name']}: {json.dumps([(s['name'], s['state']) for s in statuses])}")
            for status in statuses:
                report.append(node.container_log(pod, status["name"])[-1500:])
        raise AssertionError("\n".join(report)) from None


def delete_and_wait(cluster: KubeCluster, kind: str, name: str, selector: str) -> None:
    cluster.request("DELETE", f"/apis/apps/v1/namespaces/{NS}/{kind}/{name}", {"propagationPolicy": "Foreground"})
    wait_until(lambda: not pods(cluster, selector), timeout=90, interval=0.2, what=f"{name}'s pods gone")


def test_the_deployment_migrates_sweeps_and_stops_cleanly_in_real_pods(
    real_node: RealNode, node_image: str, kube_cluster: KubeCluster, empty_db_url: str
) -> None:
    cluster = kube_cluster
    cluster.namespace(NS)
    url = through_the_bridge(real_node, empty_db_url)
    secret(cluster, {"database-url": url, "migrate-database-url": url})
    cluster.request(
        "DELETE", f"/apis/batch/v1/namespaces/{NS}/jobs/pod-sweeper-migrate", {"propagationPolicy": "Background"}
    )
    apply(cluster, on_the_node(rendered(cluster, ROOT / "deploy"), real_node, node_image))
    # The Job: `pod-sweeper migrate` in a real container, completed by the real Job controller.
    job = f"/apis/batch/v1/namespaces/{NS}/jobs/pod-sweeper-migrate"
    wait_until(lambda: cluster.request("GET", job)[1].get("status", {}).get("succeeded") == 1,
               timeout=120, interval=0.5, what="the migrate Job to succeed")  # fmt: skip
    with psycopg.connect(empty_db_url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        create_executions(conn)
        run(attach_table(empty_db_url))
        deployment = f"/apis/apps/v1/namespaces/{NS}/deployments/pod-sweeper"
        waiting_for(
            real_node, cluster, "app.kubernetes.io/name%3Dpod-sweeper",
            lambda: cluster.request("GET", deployment)[1].get("status", {}).get("readyReplicas") == 2,
            "two replicas Ready (their real /readyz)",
        )  # fmt: skip
        sid = f"swept-{uuid.uuid4().hex[:6]}"
        victim = cluster.pod(NS, sid, node=None)
        record_pod(conn, victim, sid)
        committed = time.monotonic()
        retire(conn, sid)
        wait_until(lambda: cluster.get_pod(NS, sid) is None, timeout=60, interval=0.05, what="the retired pod gone")
        gone = time.monotonic() - committed
        row = wait_until(lambda: (r := row_for(conn, sid)) and r["status"] == "done" and r, timeout=30, what="done")
        assert row["outcome"] == "deleted"

    replica = pods(cluster, "app.kubernetes.io/name%3Dpod-sweeper")[0]
    pid = process(real_node, replica, "pod-sweeper")
    status = Path(f"/proc/{pid}/status").read_text()
    uid = next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:"))
    rss = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) * 1024
    root = next(line for line in Path(f"/proc/{pid}/mounts").read_text().splitlines() if line.split()[1] == "/")
    memory = next(line.split(":", 2)[2] for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()
                  if ":memory:" in line)  # fmt: skip
    limit = int(Path(f"/sys/fs/cgroup/memory{memory}/memory.limit_in_bytes").read_text())
    mounts = [line.split()[1] for line in Path(f"/proc/{pid}/mounts").read_text().splitlines()]
    projected = [v for v in replica["spec"]["volumes"] if "projected" in v]
    assert uid == "10001"  # runAsNonRoot with the image's numeric user
    assert root.split()[3].split(",")[0] == "ro"  # readOnlyRootFilesystem, enforced by the runtime
    assert limit == 256 * 2**20  # the Deployment's memory limit, set by the runtime in the cgroup
    # The ServiceAccount token the kubelet projects (and keeps fresh), mounted where the in-cluster
    # configuration reads it (/var/run is a link to /run in the image); the sweep above used it.
    assert any("serviceAccountToken" in s for v in projected for s in v["projected"]["sources"])
    assert "/run/secrets/kubernetes.io/serviceaccount" in mounts
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    age = float(Path("/proc/uptime").read_text().split()[0]) - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    print(f"\nretired pod gone {gone:.2f} s after the commit; a replica: RSS {rss / 2**20:.0f} MB (limit 256 MB),")
    print(f"CPU {cpu:.1f} s over its first {age:.0f} s (start-up and the sweep included)")

    # A replica's pod deleted in the middle of a backlog (1,000 retires of pods that are gone: each
    # DELETE answers 404, at the shipped rate limit): the kubelet's SIGTERM while it holds claims, a
    # clean stop within the grace period, and no row lost or charged twice. A finalizer of the test's keeps the pod
    # object once the kubelet is done, so its final status (the container's exit code) can be read.
    name = replica["metadata"]["name"]
    where = f"/api/v1/namespaces/{NS}/pods/{name}"
    keep = {"metadata": {"finalizers": ["pod-sweeper.test/keep"]}}
    assert cluster.request("PATCH", where, keep, content_type="application/merge-patch+json")[0] == 200
    backlog = 1000
    conn = psycopg.connect(empty_db_url, autocommit=True)
    with (
        conn.cursor() as cur,
        cur.copy("COPY executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid) FROM STDIN") as copy,
    ):
        for i in range(backlog):
            copy.write_row((f"backlog-{i}", 1, NS, f"gone-{i}", uuid.uuid4()))
    # Retired before the attach, as a platform's history is, and enqueued by `backfill`: 1,000 host
    # retires in one transaction is what the shipped breaker's transaction rule trips on (a bad
    # migration's shape), while an operator's backfill is never counted by it.
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")  # the trigger does not see these
        conn.execute("UPDATE executions SET active = false WHERE sandbox_id LIKE 'backlog-%'")
    filled = cli("backfill", url=empty_db_url)
    assert filled.returncode == 0, filled.stderr
    in_hand = "SELECT count(*) FROM pod_sweeper.outbox WHERE status = 'claimed' AND claimed_by = %s"
    wait_until(lambda: conn.execute(in_hand, (name,)).fetchone()[0] > 0, timeout=30, what="the replica's claims")
    deleted = time.monotonic()
    cluster.request("DELETE", where)
    log = ""

    def terminated() -> dict[str, Any] | None:
        nonlocal log
        log = real_node.container_log(replica, "pod-sweeper") or log
        pod = cluster.get_pod(NS, name)
        [status] = pod["status"]["containerStatuses"] if pod else [{"state": {}}]
        return status["state"].get("terminated")

    ended_state = wait_until(terminated, timeout=60, interval=0.05, what="the replica's container terminated")
    ended = time.monotonic() - deleted
    released = {"metadata": {"finalizers": None}}
    assert cluster.request("PATCH", where, released, content_type="application/merge-patch+json")[0] == 200
    wait_until(lambda: cluster.get_pod(NS, name) is None, timeout=45, what="the replica's pod gone")
    lines = [json.loads(x.split(" ", 3)[3]) for x in log.splitlines() if x.count(" ") >= 3 and "{" in x]
    assert any("SIGTERM" in line.get("msg", "") for line in lines), log[-2000:]
    assert any(line.get("msg") == "stopped cleanly" for line in lines), log[-2000:]
    assert (ended_state["exitCode"], ended_state["reason"]) == (0, "Completed"), ended_state
    handed = "SELECT count(*) FROM pod_sweeper.attempts WHERE replica = %s AND result = 'handed_back'"
    handed_back = conn.execute(handed, (name,)).fetchone()[0]
    # What it had claimed at its stop was sent before its deadline or handed back (how many of each
    # depends on the moment); either way every row below ends once, uncharged by the stop.
    done = "SELECT count(*) FROM pod_sweeper.outbox WHERE sandbox_id LIKE 'backlog-%%' AND status = 'done'"
    wait_until(lambda: conn.execute(done).fetchone()[0] == backlog, timeout=120, what="the backlog done")
    ends = conn.execute(
        "SELECT DISTINCT outcome, attempts FROM pod_sweeper.outbox WHERE sandbox_id LIKE 'backlog-%'"
    ).fetchall()
    assert ends == [("absent", 1)]  # every row once, the handed-back ones uncharged
    conn.close()
    assert ended < 45  # terminationGracePeriodSeconds: it stopped by itself, nothing was killed
    print(f"a replica deleted mid-backlog: exit 0 ({ended_state['reason']}) {ended:.1f} s after the DELETE,")
    print(f"{handed_back} claim(s) handed back at its stop; every one of the {backlog} rows ended once")
    delete_and_wait(cluster, "deployments", "pod-sweeper", "app.kubernetes.io/name%3Dpod-sweeper")


@pytest.mark.parametrize("failure", ["none", "schema not migrated", "bad setting", "database unreachable"])
def test_the_sidecar_never_keeps_its_host_from_starting(
    real_node: RealNode, node_image: str, kube_cluster: KubeCluster, db_url: str, empty_db_url: str, failure: str
) -> None:
    cluster = kube_cluster
    cluster.namespace(NS)
    urls = {
        "none": through_the_bridge(real_node, db_url),
        "schema not migrated": through_the_bridge(real_node, empty_db_url),
        "bad setting": through_the_bridge(real_node, db_url),
        "database unreachable": make_conninfo(db_url, host="10.245.0.1", port="1"),  # nothing listens there
    }
    secret(cluster, {"database-url": urls[failure]})
    docs = on_the_node(rendered(cluster, ROOT / "deploy" / "sidecar" / "example"), real_node, node_image)
    if failure == "bad setting":
        host = next(d for d in docs if d["kind"] == "Deployment")
        [sidecar] = host["spec"]["template"]["spec"]["initContainers"]
        sidecar["env"].append({"name": "POD_SWEEPER_BATCH_SIZE", "value": "lots"})
    role = [d for d in rendered(cluster, ROOT / "deploy") if d["kind"] == "Role"]
    apply(cluster, role + docs)
    try:

        def host_ready() -> dict[str, Any] | None:
            found = pods(cluster, "app%3Dcontrol-plane")
            if not found:
                return None
            pod = found[0]
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))
            return pod if ready else None

        pod = waiting_for(real_node, cluster, "app%3Dcontrol-plane", host_ready, "the host's pod Ready")
        [host_status] = pod["status"]["containerStatuses"]
        [sidecar_status] = pod["status"]["initContainerStatuses"]
        assert "running" in host_status["state"], host_status
        assert "running" in sidecar_status["state"] and sidecar_status["restartCount"] == 0, sidecar_status
        if failure == "none":
            with psycopg.connect(db_url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
                create_executions(conn)
                run(attach_table(db_url))
                sid = f"sidecar-{uuid.uuid4().hex[:6]}"
                victim = cluster.pod(NS, sid)
                record_pod(conn, victim, sid)
                retire(conn, sid)
                wait_until(lambda: cluster.get_pod(NS, sid) is None, timeout=60, what="the retired pod gone")
        else:
            said = {"schema not migrated": ("schema",), "bad setting": ("pod_sweeper_batch_size",),
                    "database unreachable": ("database", "connect")}[failure]  # fmt: skip

            def saying_why() -> bool:
                lines = [
                    x.split(" ", 3)[3]
                    for x in real_node.container_log(pod, "pod-sweeper").splitlines()
                    if x.count(" ") >= 3
                ]
                found = [json.loads(x) for x in lines if x.startswith("{")]
                return any(
                    f["level"] in ("ERROR", "WARNING") and any(w in f["msg"].lower() for w in said) for f in found
                )

            wait_until(saying_why, timeout=60, interval=0.2, what=f"the sidecar saying why ({failure})")
            # Still Running a while later: the host is not restarted, the sidecar not crash-looping.
            again = cluster.get_pod(NS, pod["metadata"]["name"])
            assert again is not None
            assert [s["restartCount"] for s in again["status"]["containerStatuses"]] == [0]
            assert [s["restartCount"] for s in again["status"]["initContainerStatuses"]] == [0]
        print(f"\n{failure}: the host Running and Ready, the sidecar Running without a restart")
    finally:
        delete_and_wait(cluster, "deployments", "control-plane", "app%3Dcontrol-plane")


@pytest.mark.parametrize(
    ("helm_binary", "granted_by"),
    [("helm", "the hook (database.runtimeRole)"), ("helm3", "a DBA, while helm install --wait waits")],
)
def test_a_first_helm_install_completes_by_itself_on_a_tainted_node(
    real_node: RealNode, node_image: str, kube_cluster: KubeCluster, empty_db_url: str, helm_binary: str,
    granted_by: str, tmp_path: Path,
) -> None:  # fmt: skip
    """ "Install with Helm" on an empty database, as a platform team runs it: ``helm install --wait`` ends
    with Ready replicas that never restarted, whichever way the runtime role gets its grant: by the
    pre-install hook (``database.runtimeRole``), or by a DBA's ``grant`` at some moment during the wait
    (the replicas wait, not ready, saying which grant). The scheduling values are given to the
    Deployment only; the hook's pod inherits them, so it runs on the real node, whose taint only that
    toleration admits."""
    cluster = kube_cluster
    ns = f"first-install-{helm_binary}"
    cluster.namespace(ns)
    role = f"chart_first_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'first-pw'").format(sql.Identifier(role)))
    owner = through_the_bridge(real_node, empty_db_url)
    runtime = make_conninfo(owner, user=role, password="first-pw")
    body = {"metadata": {"name": "pod-sweeper"}, "stringData": {"database-url": runtime, "migrate-database-url": owner}}
    assert cluster.request("POST", f"/api/v1/namespaces/{ns}/secrets", body)[0] == 201
    repository, tag = node_image.rsplit(":", 1)
    values = {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "nodeSelector": {"kubernetes.io/hostname": real_node.name},
        "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
        "database": {"runtimeRole": role if helm_binary == "helm" else ""},
    }
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    selector = "app.kubernetes.io/name%3Dpod-sweeper"
    installed: list[Any] = []
    install = threading.Thread(
        target=lambda: installed.append(helm(
            cluster.bindir, "install", "pod-sweeper", str(CHART), "-n", ns, "-f", str(tmp_path / "values.yaml"),
            "--wait", "--timeout", "240s", binary=helm_binary, kubeconfig=cluster.admin_kubeconfig, check=False,
        ))
    )  # fmt: skip
    install.start()
    try:
        if helm_binary == "helm3":

            def saying_which_grant() -> bool:
                return any(
                    f"pod-sweeper grant {role} --apply" in real_node.container_log(pod, "pod-sweeper")
                    for pod in pods(cluster, selector, ns)
                    if pod["status"].get("containerStatuses")
                )

            waiting_for(real_node, cluster, selector, saying_which_grant, "a replica saying which grant", ns)
            granted = cli("grant", role, "--apply", url=empty_db_url)
            assert granted.returncode == 0, granted.stderr
        install.join(300)
        assert installed and installed[0].returncode == 0, installed and installed[0].stderr
        # Helm 4 waits for every replica; Helm 3's --wait is satisfied once the Deployment is available
        # (maxUnavailable short of the replicas), so the second replica may still be on its way.
        deployment = f"/apis/apps/v1/namespaces/{ns}/deployments/pod-sweeper"
        ready = cluster.request("GET", deployment)[1]["status"].get("readyReplicas")
        assert ready == 2 if helm_binary == "helm" else ready >= 1, ready
        wait_until(lambda: cluster.request("GET", deployment)[1]["status"].get("readyReplicas") == 2,
                   timeout=60, what="both replicas Ready")  # fmt: skip
        replicas = pods(cluster, selector, ns)
        assert [s["restartCount"] for p in replicas for s in p["status"]["containerStatuses"]] == [0, 0]
        [hook] = pods(cluster, "app.kubernetes.io/component%3Dmigrate", ns)
        assert hook["spec"]["nodeName"] == real_node.name and hook["status"]["phase"] == "Succeeded", hook["status"]
        print(f"\n{helm_binary}: installed, 2 replicas Ready, no restart; granted by {granted_by}")
    finally:
        install.join(300)
        helm(cluster.bindir, "uninstall", "pod-sweeper", "-n", ns, "--wait", binary=helm_binary,
             kubeconfig=cluster.admin_kubeconfig, check=False)  # fmt: skip
        with psycopg.connect(empty_db_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
