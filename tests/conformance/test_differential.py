"""One sequence of requests sent to the fake and to the real kube-apiserver, answer by answer: status
codes, ``reason``, and every field the daemon reads of a body. Where they differ the fake is wrong,
and is fixed to answer like the real server, so the fast tiers that use the fake stay honest."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from conformance.apiserver import ApiServer, fake_api_server, manifest, real_api_server
from conftest import real_kube


def _answer(call: Any) -> tuple[int, Any, dict[str, str]]:
    """(status, JSON body, headers) of one raw client call, success or failure."""
    try:
        response = call()
        return response.status, json.loads(response.data), dict(response.headers)
    except ApiException as exc:
        return int(exc.status), json.loads(exc.body), dict(exc.headers or {})


def _pod_fields(pod: dict[str, Any], uids: dict[str, str]) -> dict[str, Any]:
    """What ``PodState.from_json`` and the DELETE's grace reading take from a pod, UIDs named by role."""
    metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    return {
        "kind": pod.get("kind"),
        "uid": uids.get(metadata.get("uid"), "unknown uid"),
        "namespace_set": bool(metadata.get("namespace")),
        "name": metadata.get("name"),
        "labels": metadata.get("labels"),
        "created_is_a_timestamp": bool(metadata.get("creationTimestamp")),
        "nodeName": spec.get("nodeName"),
        "terminating": bool(metadata.get("deletionTimestamp")),
        "deletionGracePeriodSeconds": metadata.get("deletionGracePeriodSeconds"),
    }


def _failure_fields(body: dict[str, Any]) -> dict[str, Any]:
    """What ``kube.api.classify`` reads of a Status body."""
    details = body.get("details") or {}
    return {
        "kind": body.get("kind"),
        "reason": body.get("reason"),
        "code": body.get("code"),
        "details.kind": details.get("kind"),
        "details.name": details.get("name"),
        "retryAfterSeconds": details.get("retryAfterSeconds"),
    }


def run_sequence(api: ApiServer) -> list[tuple[str, int, Any]]:
    """The daemon's calls, in order, each reduced to what the daemon reads of its answer."""
    core, ns = api.core, api.namespace
    raw = {"_preload_content": False}
    uids: dict[str, str] = {}
    seen: list[tuple[str, int, Any]] = []

    def step(what: str, call: Any) -> dict[str, Any]:
        status, body, _ = _answer(call)
        if body.get("kind") == "Status":
            seen.append((what, status, _failure_fields(body)))
        elif body.get("kind") == "Event":
            involved = body.get("involvedObject") or {}
            fields = {k: body.get(k) for k in ("reason", "type", "action", "reportingComponent", "count")}
            seen.append((what, status, {**fields, "involved": (involved.get("kind"), involved.get("name"))}))
        elif body.get("kind") == "PodList":
            items = [_pod_fields(p, uids) for p in body.get("items") or []]
            seen.append((what, status, {"items": items, "has_continue": bool(body["metadata"].get("continue"))}))
        else:
            seen.append((what, status, _pod_fields(body, uids)))
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
