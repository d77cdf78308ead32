"""One sequence of requests sent to the fake and to the real kube-apiserver, answer by answer: status
codes, ``reason``, and every field the daemon reads of a body. Where they differ the fake is wrong,
and is fixed to answer like the real server, so the fast tiers that use the fake stay honest."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance.apiserver import (
    ApiServer,
    answer,
    failure_fields,
    fake_api_server,
    manifest,
    pod_fields,
    real_api_server,
)
from helpers import real_kube


def run_sequence(api: ApiServer) -> list[tuple[str, int, Any]]:
    """The daemon's calls, in order, each reduced to what the daemon reads of its answer."""
    core, ns = api.core, api.namespace
    raw = {"_preload_content": False}
    uids: dict[str, str] = {}
    seen: list[tuple[str, int, Any]] = []

    def step(what: str, call: Any) -> dict[str, Any]:
        status, body, _ = answer(call)
        if body.get("kind") == "Status":
            seen.append((what, status, failure_fields(body)))
        elif body.get("kind") == "Event":
            involved = body.get("involvedObject") or {}
            fields = {k: body.get(k) for k in ("reason", "type", "action", "reportingComponent", "count")}
            seen.append((what, status, {**fields, "involved": (involved.get("kind"), involved.get("name"))}))
        elif body.get("kind") == "Namespace":
            seen.append((what, status, {"kind": "Namespace", "phase": (body.get("status") or {}).get("phase")}))
        elif body.get("kind") == "PodList":
            items = [pod_fields(p, uids) for p in body.get("items") or []]
            seen.append((what, status, {"items": items, "has_continue": bool(body["metadata"].get("continue"))}))
        else:
            seen.append((what, status, pod_fields(body, uids)))
        return dict(body)

    for name, labels, scheduled in (("a", {"app": "d", "n": "1"}, False), ("b", {"app": "d", "n": "2"}, True)):
        body = manifest(name, labels=labels, scheduled=scheduled)
        created = step(f"create {name}", lambda body=body: core.create_namespaced_pod(ns, body, **raw))
        uids[created["metadata"]["uid"]] = f"uid of {name}"
    uid_a = next(k for k, v in uids.items() if v == "uid of a")
    uid_b = next(k for k, v in uids.items() if v == "uid of b")
    step("create a again", lambda: core.create_namespaced_pod(ns, manifest("a"), **raw))
    step("get a", lambda: core.read_namespaced_pod("a", ns, **raw))
    step("get missing", lambda: core.read_namespaced_pod("missing", ns, **raw))
    step("list n=2", lambda: core.list_namespaced_pod(ns, label_selector="app=d,n=2", limit=5, **raw))
    first = step("list limit 1", lambda: core.list_namespaced_pod(ns, label_selector="app", limit=1, **raw))
    token = first["metadata"]["continue"]
    step("list continue", lambda: core.list_namespaced_pod(ns, label_selector="app", limit=1, _continue=token, **raw))
    step("list nothing", lambda: core.list_namespaced_pod(ns, label_selector="app=none", limit=1, **raw))
    wrong = {"preconditions": {"uid": uid_b}, "propagationPolicy": "Background"}
    step("delete a, wrong uid", lambda: core.delete_namespaced_pod("a", ns, body=wrong, **raw))
    dry = {"preconditions": {"uid": uid_a}, "propagationPolicy": "Background", "dryRun": ["All"]}
    step("delete a, dry run", lambda: core.delete_namespaced_pod("a", ns, body=dry, **raw))
    step("get a after the dry run", lambda: core.read_namespaced_pod("a", ns, **raw))
    right = {"preconditions": {"uid": uid_a}, "propagationPolicy": "Background"}
    step("delete a", lambda: core.delete_namespaced_pod("a", ns, body=right, **raw))
    step("delete a again", lambda: core.delete_namespaced_pod("a", ns, body=right, **raw))
    step("delete missing, wrong uid", lambda: core.delete_namespaced_pod("missing", ns, body=wrong, **raw))
    bound = {"preconditions": {"uid": uid_b}, "propagationPolicy": "Background"}
    step("delete bound b", lambda: core.delete_namespaced_pod("b", ns, body=bound, **raw))
    step("get terminating b", lambda: core.read_namespaced_pod("b", ns, **raw))
    step("delete terminating b", lambda: core.delete_namespaced_pod("b", ns, body=bound, **raw))
    force = {**bound, "gracePeriodSeconds": 0}
    step("force delete b", lambda: core.delete_namespaced_pod("b", ns, body=force, **raw))
    step("get b after the force", lambda: core.read_namespaced_pod("b", ns, **raw))
    event = {
        "metadata": {"name": "a.1"},
        "involvedObject": {"kind": "Pod", "apiVersion": "v1", "namespace": ns, "name": "a", "uid": uid_a},
        "reason": "Retired",
        "message": "m",
        "type": "Normal",
        "action": "Delete",
        "source": {"component": "pod-sweeper"},
        "reportingComponent": "pod-sweeper",
        "reportingInstance": "r",
        "count": 1,
    }
    step("create an event", lambda: core.create_namespaced_event(ns, event, **raw))
    elsewhere = {**event, "metadata": {"name": "a.2"}, "involvedObject": {**event["involvedObject"], "namespace": "x"}}
    step("an event for another namespace", lambda: core.create_namespaced_event(ns, elsewhere, **raw))
    # A namespace deleted under its pods: it terminates (nothing finalizes it here); creating in it is
    # refused, while its pods are read and deleted as usual.
    created = step("create c", lambda: core.create_namespaced_pod(ns, manifest("c", scheduled=True), **raw))
    uids[created["metadata"]["uid"]] = "uid of c"
    step("delete the namespace", lambda: core.delete_namespace(ns, **raw))
    late = {**event, "metadata": {"name": "c.1"}, "involvedObject": {**event["involvedObject"], "name": "c"}}
    step("an event in the terminating namespace", lambda: core.create_namespaced_event(ns, late, **raw))
    step("a pod in the terminating namespace", lambda: core.create_namespaced_pod(ns, manifest("d"), **raw))
    step("get c in the terminating namespace", lambda: core.read_namespaced_pod("c", ns, **raw))
    uid_c = next(k for k, v in uids.items() if v == "uid of c")
    fenced = {"preconditions": {"uid": uid_c}, "propagationPolicy": "Background"}
    step("delete c in the terminating namespace", lambda: core.delete_namespaced_pod("c", ns, body=fenced, **raw))
    step("delete the namespace again", lambda: core.delete_namespace(ns, **raw))
    return seen


@pytest.fixture
def both(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[ApiServer, ApiServer]]:
    with fake_api_server(tmp_path) as fake, real_api_server(real_kube(request)) as real:
        yield fake, real


def test_the_fake_answers_the_daemons_calls_as_the_real_server_does(both: tuple[ApiServer, ApiServer]) -> None:
    fake, real = both
    expected, got = run_sequence(real), run_sequence(fake)
    assert [s[0] for s in got] == [s[0] for s in expected]
    for (what, real_status, real_fields), (_, fake_status, fake_fields) in zip(expected, got, strict=True):
        assert (what, fake_status, fake_fields) == (what, real_status, real_fields)
