"""What the daemon relies on, each on the real API server: the 409 of a wrong UID and the GET that
decides ``replaced``; a pod bound to a node with no kubelet left terminating, confirmed stuck, and
force-deleted only once its Node is gone; the reconciliation pass paging with ``limit``/``continue``
and surviving a continue token that etcd compaction expired; 403 outside the granted namespace; 429
from API Priority and Fairness."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from conformance.apiserver import core_api, manifest
from harness.kubeapiserver import USER, KubeApiServer
from helpers import DaemonThread, daemon_settings, outbox, retire, run, settings_for, wait_until
from pod_sweeper.core.backoff import Backoff
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.states import Result
from pod_sweeper.kube.answer import Answer, Said
from pod_sweeper.kube.api import KubeClient
from pod_sweeper.kube.config import load_configuration
from pod_sweeper.store import db
from pod_sweeper.store.rows import Claim
from pod_sweeper.tasks.loops import confirmer
from pod_sweeper.tasks.loops.outage import OutageWatch
from pod_sweeper.tasks.loops.reconciler import Reconciler
from pod_sweeper.tasks.rules import verdicts

SANDBOX, GENERATION = "example.com/sandbox", "example.com/generation"
POLICY = verdicts.Policy(5, Backoff(1.0, 1.0))


@pytest.fixture
def ns(kube_apiserver: KubeApiServer) -> str:
    return kube_apiserver.namespace(f"t-{uuid.uuid4().hex[:10]}")


@pytest.fixture
def admin(kube_apiserver: KubeApiServer) -> Iterator[KubeClient]:
    made = KubeClient(load_configuration(kube_apiserver.admin_kubeconfig, None, pool_size=4))
    yield made
    made.close()


def record(conn: psycopg.Connection[Any], ns: str, pod: Any, sid: str) -> None:
    conn.execute(
        "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid, active)"
        " VALUES (%s, 1, %s, %s, %s, true)",
        (sid, ns, pod.metadata.name, uuid.UUID(pod.metadata.uid)),
    )


def result_of(answer: Answer, uid: str) -> Result:
    """What the answer table makes of the real server's answer, for a row of pod ``uid``."""
    row = Claim(1, 1, 1, "s", 1, "ns", "p", uuid.UUID(uid), 1, "retired")
    return verdicts.decide(row, verdicts.Sent(datetime.now(UTC), 0.0, 0.0, answer), POLICY).result


def test_a_wrong_uid_is_409_and_the_get_decides_replaced(
    kube_apiserver: KubeApiServer, ns: str, admin: KubeClient
) -> None:
    core = core_api(kube_apiserver.admin_kubeconfig)
    old = core.create_namespaced_pod(ns, manifest("p")).metadata.uid
    core.delete_namespaced_pod("p", ns)
    new = core.create_namespaced_pod(ns, manifest("p")).metadata.uid  # a replacement under the same name
    replaced = admin.delete_pod(ns, "p", old, timeout=5)
    assert (replaced.said, replaced.status, replaced.holder_uid) == (Said.CONFLICT, 409, new)
    assert result_of(replaced, old) is Result.REPLACED
    assert core.read_namespaced_pod("p", ns).metadata.uid == new  # left alone
    deleted = admin.delete_pod(ns, "p", new, timeout=5)
    assert (deleted.status, deleted.holder_uid) == (200, None) and result_of(deleted, new) is Result.DELETED
    absent = admin.delete_pod(ns, "p", new, timeout=5)
    assert (absent.said, absent.status, absent.reason) == (Said.NOT_FOUND, 404, "NotFound")
    assert result_of(absent, new) is Result.ABSENT


def test_the_answer_says_when_the_delete_went_on_the_wire_after_its_hook_and_before_the_get(
    kube_apiserver: KubeApiServer, ns: str, tmp_path: Path
) -> None:
    """``Answer.left`` on the real server's 409 path (kube/api.py): the DELETE's stamp, taken after its
    credential hook and before the GET's hook, not the GET's. A bearer token (a service account's, allowed
    to get and delete the namespace's pods), since the client runs the hook only for a token."""
    kube_apiserver.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "wire"}})
    kube_apiserver.kubectl("create", "role", "wire", "--verb=get,delete", "--resource=pods", f"--namespace={ns}")
    kube_apiserver.kubectl(
        "create", "rolebinding", "wire", "--role=wire", f"--serviceaccount={ns}:wire", f"--namespace={ns}"
    )
    token = kube_apiserver.kubectl("create", "token", "wire", f"--namespace={ns}").strip()
    wired = kube_apiserver.token_kubeconfig(tmp_path / "wire.kubeconfig", token, namespace=ns)
    configuration = load_configuration(wired, None, pool_size=2)
    hooked: list[float] = []
    configuration.refresh_api_key_hook = lambda _: hooked.append(time.monotonic())
    client = KubeClient(configuration, clock=time.monotonic)
    # The binding reaches the authorizer's cache a moment after it is written.
    wait_until(lambda: client.may("delete", "pods", ns, timeout=5), what="the role binding to take effect")
    hooked.clear()
    core = core_api(kube_apiserver.admin_kubeconfig)
    old = core.create_namespaced_pod(ns, manifest("p")).metadata.uid
    core.delete_namespaced_pod("p", ns)
    core.create_namespaced_pod(ns, manifest("p"))
    try:
        replaced = client.delete_pod(ns, "p", old, timeout=5)
        assert replaced.said is Said.CONFLICT and replaced.holder_uid is not None and len(hooked) == 2
        assert replaced.left is not None and hooked[0] < replaced.left < hooked[1]
    finally:
        client.close()


def test_a_pod_on_a_node_without_kubelet_is_confirmed_stuck_then_forced_once_its_node_is_gone(
    kube_apiserver: KubeApiServer, ns: str, execs: psycopg.Connection[Any], db_url: str, monkeypatch: Any
) -> None:
    core = core_api(kube_apiserver.admin_kubeconfig)
    node = f"node-{uuid.uuid4().hex[:8]}"
    core.create_node({"metadata": {"name": node}})  # registered, but no kubelet will ever finish a pod
    pod = core.create_namespaced_pod(ns, manifest("bound", scheduled=True, node=node, terminationGracePeriodSeconds=1))
    record(execs, ns, pod, "s")
    monkeypatch.setattr(confirmer, "RECHECK_SECONDS", 0.5)  # still terminating: looked at again soon
    monkeypatch.setattr("pod_sweeper.tasks.rules.verdicts.CONFIRM_MARGIN_SECONDS", 0.5)
    settings = daemon_settings(
        db_url, kube_apiserver.admin_kubeconfig, stuck_terminating_seconds=1.0, force_stuck=True, poll_interval=1.0
    )
    with DaemonThread(settings) as daemon:
        retire(execs, "s")
        wait_until(lambda: (r := outbox(execs)) and r[0]["stuck_at"] is not None, timeout=30, what="reported stuck")
        left = core.read_namespaced_pod("bound", ns)
        assert left.metadata.deletion_timestamp is not None and left.metadata.deletion_grace_period_seconds == 1
        assert daemon.daemon.metrics.value("pod_sweeper_force_deleted_total") == 0  # its node is still there
        core.delete_node(node)
        wait_until(lambda: not core.list_namespaced_pod(ns).items, timeout=30, what="the forced delete")
        wait_until(lambda: outbox(execs)[0]["confirmed_at"] is not None, timeout=30, what="confirmed")
        assert daemon.daemon.metrics.value("pod_sweeper_force_deleted_total") == 1
    (row,) = outbox(execs)
    assert (row["status"], row["outcome"], row["last_http_status"]) == ("done", "deleted", 200)


@pytest.fixture(scope="module")
def strained(kube_apiserver: KubeApiServer) -> Iterator[KubeApiServer]:
    """A second real server set to show at once what a production cluster shows under load.

    Paged lists read etcd: since 1.34 the watch cache serves a continue token from its own snapshot
    while it still holds one, so compaction alone expires no token there; a token older than the
    cache's window (or any token on 1.33 and before) is listed from etcd, where compaction expires it.
    And one request in flight at a time (two with mutations) for everyone but system:masters, so API
    Priority and Fairness rejects with 429 what a busy cluster would."""
    args = [
        "--feature-gates=ListFromCacheSnapshot=false",
        "--max-requests-inflight=1",
        "--max-mutating-requests-inflight=1",
    ]
    with KubeApiServer(kube_apiserver.bindir, extra_args=args) as server:
        yield server


def test_reconciliation_pages_and_survives_a_continue_token_that_compaction_expired(
    strained: KubeApiServer, execs: psycopg.Connection[Any], db_url: str
) -> None:
    kube_apiserver = strained
    ns = kube_apiserver.namespace("reconcile")
    core = core_api(kube_apiserver.admin_kubeconfig)
    for i in range(7):
        core.create_namespaced_pod(ns, manifest(f"p{i}", labels={SANDBOX: f"p{i}", GENERATION: "1"}))
    settings = settings_for(
        db_url,
        kubeconfig=kube_apiserver.admin_kubeconfig,
        reconcile_sandbox_label=SANDBOX,
        reconcile_generation_label=GENERATION,
        reconcile_namespace=ns,
        reconcile_interval=0.01,
        reconcile_quarantine=3600,
        reconcile_min_age=0.001,
        reconcile_page_size=3,
    )

    async def scenario() -> list[Any]:
        kube_client = KubeClient(load_configuration(settings.kubeconfig, None, pool_size=2))
        pool = db.make_pool(settings, max_size=2)
        await pool.open(wait=True, timeout=10)
        try:
            metrics = Metrics()
            r = Reconciler(settings, pool, kube_client, metrics, OutageWatch(settings, pool, kube_client, metrics))
            whole = await r.pass_once()
            real = kube_client.list_pods

            def compacting(*args: Any, **kwargs: Any) -> Any:
                page = real(*args, **kwargs)
                # Writes after this page, then a compaction past them: its continue token is now too old.
                core.create_namespaced_pod(ns, manifest(f"late-{uuid.uuid4().hex[:6]}"))
                kube_apiserver.compact()
                return page

            kube_client.list_pods = compacting  # type: ignore[method-assign]
            broken = await r.pass_once()
            return [whole, broken]
        finally:
            await pool.close()
            kube_client.close()

    whole, broken = run(scenario())
    assert (whole.seen, whole.complete, whole.suspects) == (7, True, 7)
    assert broken.seen == 3 and not broken.complete
    assert broken.error and "410" in broken.error and "Expired" in broken.error
    assert execs.execute("SELECT count(*) AS n FROM pod_sweeper.suspects").fetchone()["n"] == 7  # kept


def test_a_namespace_the_identity_may_not_touch_answers_403(kube_apiserver: KubeApiServer, ns: str) -> None:
    core = core_api(kube_apiserver.admin_kubeconfig)
    pod = core.create_namespaced_pod(ns, manifest("p"))
    user = KubeClient(load_configuration(kube_apiserver.user_kubeconfig, None, pool_size=2))
    try:
        answer = user.delete_pod(ns, "p", pod.metadata.uid, timeout=5)
        assert (answer.said, answer.status, answer.reason) == (Said.FORBIDDEN, 403, "Forbidden")
        assert not user.may("delete", "pods", ns, timeout=5)
    finally:
        user.close()
    assert core.read_namespaced_pod("p", ns).metadata.uid == pod.metadata.uid


def test_a_token_the_server_does_not_accept_answers_401(kube_apiserver: KubeApiServer, tmp_path: Path) -> None:
    """A bearer token the real server cannot authenticate: the DELETE's answer is unauthorized (what
    closes the auth gate), not an error, and the pod is left alone."""
    core = core_api(kube_apiserver.admin_kubeconfig)
    ns = kube_apiserver.namespace("unauthorized")
    pod = core.create_namespaced_pod(ns, manifest("p"))
    kubeconfig = kube_apiserver.token_kubeconfig(tmp_path / "bad.kubeconfig", "not-a-token-it-knows", namespace=ns)
    stranger = KubeClient(load_configuration(kubeconfig, None, pool_size=2))
    try:
        answer = stranger.delete_pod(ns, "p", pod.metadata.uid, timeout=5)
    finally:
        stranger.close()
    assert (answer.said, answer.status, answer.reason) == (Said.UNAUTHORIZED, 401, "Unauthorized")
    assert not answer.past_authorization and answer.answered
    assert core.read_namespaced_pod("p", ns).metadata.uid == pod.metadata.uid


def test_no_answer_is_an_answer_of_its_own_kind(kube_apiserver: KubeApiServer) -> None:
    """The same client aimed at a port nobody listens on: no exception reaches the caller, and the
    answer says there was none (the transport failure's kind kept for the attempt history)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the request: nobody listens there
    configuration = load_configuration(kube_apiserver.admin_kubeconfig, None, pool_size=2)
    configuration.host = f"https://127.0.0.1:{port}"
    unreachable = KubeClient(configuration)
    try:
        answer = unreachable.delete_pod("default", "p", str(uuid.uuid4()), timeout=2)
    finally:
        unreachable.close()
    assert (answer.said, answer.status, answer.needs_probe) == (Said.NO_ANSWER, None, True)
    assert answer.reason and answer.reason.endswith("Error")
    assert str(answer).startswith("no answer from the API server: ")


def limit_the_user(server: KubeApiServer, name: str) -> None:
    """API Priority and Fairness: the plain user's requests get one seat and are rejected, not queued,
    beyond it; RBAC lets the user read and delete pods."""
    server.request(
        "POST",
        "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations",
        {
            "metadata": {"name": name},
            "spec": {
                "type": "Limited",
                "limited": {"nominalConcurrencyShares": 1, "lendablePercent": 0, "limitResponse": {"type": "Reject"}},
            },
        },
    )
    server.request(
        "POST",
        "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas",
        {
            "metadata": {"name": name},
            "spec": {
                "priorityLevelConfiguration": {"name": name},
                "matchingPrecedence": 100,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [
                    {
                        "subjects": [{"kind": "User", "user": {"name": USER}}],
                        "resourceRules": [
                            {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["*"]}
                        ],
                    }
                ],
            },
        },
    )
    # Not the built-in "edit": its rules are aggregated by the controller manager, which is not running.
    server.request(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        {
            "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]}],
        },
    )
    server.request(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "User", "name": USER, "apiGroup": "rbac.authorization.k8s.io"}],
        },
    )


def test_429_from_priority_and_fairness_is_retried_until_every_pod_is_deleted(
    strained: KubeApiServer, execs: psycopg.Connection[Any], db_url: str
) -> None:
    ns = strained.namespace("throttled")
    limit_the_user(strained, "pod-sweeper-test-throttled")
    admin = core_api(strained.admin_kubeconfig)  # system:masters: exempt from the limit
    for i in range(20):
        record(execs, ns, admin.create_namespaced_pod(ns, manifest(f"p{i}")), f"s{i}")
    settings = daemon_settings(db_url, strained.user_kubeconfig, concurrency=8, max_attempts=1000, backoff_max=1.0)
    with DaemonThread(settings) as daemon:
        execs.execute("UPDATE executions SET active = false")
        done = "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status = 'done'"
        wait_until(lambda: execs.execute(done).fetchone()["n"] == 20, timeout=120, what="20 rows done")
        throttled = daemon.daemon.metrics.value("pod_sweeper_kube_responses_total", code="429")
    assert throttled > 0, "no request was throttled: the test proved nothing"
    rows = outbox(execs)
    assert {(r["outcome"], r["last_http_status"], r["attempts"]) for r in rows} == {("deleted", 200, 1)}
    # The throttled ones took another claim each, never charged: a 429 is the server's load, not the row.
    held = execs.execute(
        "SELECT count(*) AS n FROM pod_sweeper.attempts WHERE result = 'handed_back' AND http_status = 429"
    ).fetchone()["n"]
    assert held == throttled
    assert admin.list_namespaced_pod(ns).items == []
