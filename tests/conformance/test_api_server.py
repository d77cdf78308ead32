"""How the API server answers the calls pod-sweeper makes, asserted the same way against the real
kube-apiserver (built by ``tools/kube/build``) and against the project's fake."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from conformance.apiserver import ApiServer, manifest


def body(exc: ApiException) -> dict[str, Any]:
    return dict(json.loads(exc.body))


def test_create_sets_server_fields(api: ApiServer) -> None:
    pod = api.pod("p1")
    assert pod.kind == "Pod" and pod.api_version == "v1"
    assert pod.metadata.uid and pod.metadata.resource_version and pod.metadata.creation_timestamp
    assert pod.metadata.namespace == api.namespace and pod.spec.termination_grace_period_seconds == 30
    other = api.pod("p2")
    assert int(other.metadata.resource_version) > int(pod.metadata.resource_version)
    with pytest.raises(ApiException) as info:
        api.pod("p1")
    assert (info.value.status, body(info.value)["reason"]) == (409, "AlreadyExists")


def test_create_without_containers_is_invalid(api: ApiServer) -> None:
    with pytest.raises(ApiException) as info:
        api.core.create_namespaced_pod(api.namespace, {"metadata": {"name": "p"}, "spec": {"containers": []}})
    b = body(info.value)
    assert (info.value.status, b["reason"], b["details"]["causes"][0]["field"]) == (422, "Invalid", "spec.containers")


def test_get_and_not_found_body(api: ApiServer) -> None:
    with pytest.raises(ApiException) as info:
        api.core.read_namespaced_pod("nope", api.namespace)
    assert body(info.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "kind": "pods"},
        "code": 404,
    }


def test_list_is_200_when_empty_filters_by_label_and_pages(api: ApiServer) -> None:
    assert api.core.list_namespaced_pod(api.namespace).items == []
    api.pod("a", labels={"app": "sb", "gen": "1"})
    api.pod("b", labels={"app": "sb", "gen": "2"})
    names = [p.metadata.name for p in api.core.list_namespaced_pod(api.namespace, label_selector="gen=2").items]
    assert names == ["b"]
    page = api.core.list_namespaced_pod(api.namespace, limit=1)
    assert [p.metadata.name for p in page.items] == ["a"] and page.metadata._continue
    rest = api.core.list_namespaced_pod(api.namespace, limit=1, _continue=page.metadata._continue)
    assert [p.metadata.name for p in rest.items] == ["b"] and not rest.metadata._continue


def test_delete_404_comes_before_the_precondition(api: ApiServer) -> None:
    with pytest.raises(ApiException) as info:
        api.core.delete_namespaced_pod("nope", api.namespace, body={"preconditions": {"uid": "wrong"}})
    assert info.value.status == 404


def test_delete_uid_mismatch_is_409_conflict_and_keeps_the_pod(api: ApiServer) -> None:
    pod = api.pod("p1")
    with pytest.raises(ApiException) as info:
        api.core.delete_namespaced_pod("p1", api.namespace, body={"preconditions": {"uid": "x"}})
    b = body(info.value)
    assert (info.value.status, b["reason"], b["details"]) == (409, "Conflict", {"name": "p1", "kind": "Pod"})
    assert b["message"].startswith('Operation cannot be fulfilled on Pod "p1": the UID in the precondition (x)')
    kept = api.read("p1")
    assert kept is not None and kept.metadata.uid == pod.metadata.uid
    with pytest.raises(ApiException) as rv:
        api.core.delete_namespaced_pod("p1", api.namespace, body={"preconditions": {"resourceVersion": "1"}})
    assert rv.value.status == 409 and "ResourceVersion in the precondition" in body(rv.value)["message"]


def test_unscheduled_pod_goes_at_once_scheduled_pod_terminates(api: ApiServer) -> None:
    pod = api.pod("pending")
    api.core.delete_namespaced_pod("pending", api.namespace, body={"preconditions": {"uid": pod.metadata.uid}})
    assert api.read("pending") is None
    api.pod("bound", scheduled=True)
    first = api.core.delete_namespaced_pod("bound", api.namespace)
    assert first.metadata.deletion_timestamp is not None and first.metadata.deletion_grace_period_seconds == 30
    again = api.core.delete_namespaced_pod("bound", api.namespace, grace_period_seconds=5)  # repeat: 200, shorter
    assert again.metadata.deletion_grace_period_seconds == 5
    api.core.delete_namespaced_pod("bound", api.namespace, grace_period_seconds=0)
    assert api.read("bound") is None


def test_an_invalid_propagation_policy_is_422_delete_options(api: ApiServer) -> None:
    api.pod("bad")
    with pytest.raises(ApiException) as info:
        api.core.delete_namespaced_pod("bad", api.namespace, body={"propagationPolicy": "Sideways"})
    assert (info.value.status, body(info.value)["details"]["kind"]) == (422, "DeleteOptions")


def test_dry_run_changes_nothing(api: ApiServer) -> None:
    pod = api.pod("p")
    api.core.delete_namespaced_pod("p", api.namespace, dry_run="All")
    kept = api.read("p")
    assert kept is not None and kept.metadata.uid == pod.metadata.uid


def test_the_manifests_here_never_run_a_container() -> None:
    pending, bound = manifest("a"), manifest("b", scheduled=True)
    assert "nodeName" not in pending["spec"] and pending["spec"]["nodeSelector"]
    assert bound["spec"]["nodeName"] == "pod-sweeper-test-no-such-node"
