"""What only the fake API server has: faults applied before any state change, the request log, its
control API, label selector parsing. How it answers the calls themselves is asserted, the same way as
for a real API server, in ``tests/conformance``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from pod_sweeper.demo.fakekube import selector_matches


@pytest.fixture
def core(kube: Any) -> client.CoreV1Api:
    configuration = client.Configuration()
    config.load_kube_config(str(kube.kubeconfig), client_configuration=configuration)
    configuration.retries = False
    return client.CoreV1Api(client.ApiClient(configuration))


def body(exc: ApiException) -> dict[str, Any]:
    return dict(json.loads(exc.body))


def manifest(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": "i"}], **spec},
    }


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("a=1", {"a": "1"}, True),
        ("a==1", {"a": "2"}, False),
        ("a!=1", {}, True),
        ("a", {"a": ""}, True),
        ("!a", {"a": "x"}, False),
        ("a in (1,2),b", {"a": "2", "b": "x"}, True),
        ("a notin (1)", {"a": "1"}, False),
        ("", {}, True),
    ],
)
def test_selector_semantics(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert selector_matches(selector, labels) is expected


def test_foreground_propagation_keeps_the_pod_behind_its_finalizer(core: client.CoreV1Api, kube: Any) -> None:
    kube.create_pod("ns", "fg")
    core.delete_namespaced_pod("fg", "ns", propagation_policy="Foreground")
    assert kube.get_pod("ns", "fg")["metadata"]["finalizers"] == ["foregroundDeletion"]


def test_list_across_namespaces(core: client.CoreV1Api, kube: Any) -> None:
    kube.create_pod("ns", "a", labels={"app": "sb"})
    kube.create_pod("other", "c", labels={"app": "sb"})
    assert len(core.list_pod_for_all_namespaces(label_selector="app=sb").items) == 2


@pytest.mark.parametrize(
    ("code", "reason"), [(500, "InternalError"), (503, "ServiceUnavailable"), (429, "TooManyRequests")]
)
def test_injected_errors_come_before_any_state_change(
    core: client.CoreV1Api, kube: Any, code: int, reason: str
) -> None:
    kube.create_pod("ns", "p")
    kube.inject("status", method="DELETE", code=code, retry_after=2 if code == 429 else None)
    with pytest.raises(ApiException) as info:
        core.delete_namespaced_pod("p", "ns")
    assert (info.value.status, body(info.value)["reason"]) == (code, reason)
    if code == 429:
        assert info.value.headers["Retry-After"] == "2" and body(info.value)["details"]["retryAfterSeconds"] == 2
    assert kube.get_pod("ns", "p") is not None


def test_plain_text_429(core: client.CoreV1Api, kube: Any) -> None:
    kube.inject("status", code=429, text=True, retry_after=1)
    with pytest.raises(ApiException) as info:
        core.list_namespaced_pod("ns")
    assert info.value.status == 429 and info.value.headers["Content-Type"].startswith("text/plain")
    assert info.value.body.strip() == "Too many requests, please try again later."


def test_dropped_connection_and_lost_response(core: client.CoreV1Api, kube: Any) -> None:
    kube.create_pod("ns", "p")
    kube.inject("drop", method="DELETE")
    with pytest.raises(urllib3.exceptions.ProtocolError):
        core.delete_namespaced_pod("p", "ns")
    assert kube.get_pod("ns", "p") is not None  # dropped before the change
    kube.inject("drop_after", method="DELETE")
    with pytest.raises(urllib3.exceptions.ProtocolError):
        core.delete_namespaced_pod("p", "ns")
    assert kube.get_pod("ns", "p") is None  # done, but the answer was lost
    with pytest.raises(ApiException) as info:
        core.delete_namespaced_pod("p", "ns")
    assert info.value.status == 404  # what a retry sees


def test_the_stock_client_retries_a_delete_on_429_which_the_log_shows(kube: Any) -> None:
    configuration = client.Configuration()
    config.load_kube_config(str(kube.kubeconfig), client_configuration=configuration)  # retries left at default
    stock = client.CoreV1Api(client.ApiClient(configuration))
    kube.create_pod("ns", "p")
    kube.inject("status", method="DELETE", code=429, retry_after=1, times=1)
    stock.delete_namespaced_pod("p", "ns")
    assert [r.status for r in kube.deletes()] == [429, 200]


def test_unauthenticated_requests_get_401(kube: Any, tmp_path: Any) -> None:
    configuration = client.Configuration()
    config.load_kube_config(
        str(kube.write_kubeconfig(tmp_path / "k", token="wrong")), client_configuration=configuration
    )
    with pytest.raises(ApiException) as info:
        client.CoreV1Api(client.ApiClient(configuration)).list_namespaced_pod("ns")
    assert (info.value.status, body(info.value)["reason"]) == (401, "Unauthorized")
    assert kube.requests[-1].authorization == "Bearer wrong"


def test_served_in_its_own_process_with_a_control_api(tmp_path: Any) -> None:
    import subprocess
    import sys

    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.fakekube", "--kubeconfig", str(kubeconfig)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],  # tests/, where the harness package is (as bench/rig.py runs it)
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        http = urllib3.PoolManager()
        uids = json.loads(http.request("POST", f"{url}/_fake/pods", json={"namespace": "ns", "names": ["a", "b"]}).data)
        configuration = client.Configuration()
        config.load_kube_config(str(kubeconfig), client_configuration=configuration)
        core = client.CoreV1Api(client.ApiClient(configuration))
        assert core.read_namespaced_pod("a", "ns").metadata.uid == uids["uids"][0]
        http.request("POST", f"{url}/_fake/faults", json={"action": "status", "method": "DELETE", "code": 503})
        with pytest.raises(ApiException):
            core.delete_namespaced_pod("b", "ns")
        core.delete_namespaced_pod("b", "ns")
        deletes = json.loads(http.request("GET", f"{url}/_fake/deletes").data)["deletes"]
        assert [d["status"] for d in deletes] == [503, 200]
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_request_cut_off_mid_body_changes_nothing(kube: Any) -> None:
    import socket as sockets
    from urllib.parse import urlsplit

    kube.create_pod("ns", "p")
    target = urlsplit(kube.url)
    with sockets.create_connection((target.hostname, target.port)) as conn:
        conn.sendall(
            b"DELETE /api/v1/namespaces/ns/pods/p HTTP/1.1\r\nHost: x\r\n"
            b"Authorization: Bearer fake-token\r\nContent-Type: application/json\r\n"
            b'Content-Length: 200\r\n\r\n{"preconditions": '
        )
        conn.shutdown(sockets.SHUT_WR)  # the body ends early, as when the client is killed
        conn.settimeout(10)
        while conn.recv(4096):  # EOF: the server is done with this request
            pass
    assert kube.get_pod("ns", "p") is not None
    assert kube.deletes() == []
