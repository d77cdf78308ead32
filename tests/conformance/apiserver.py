"""The API servers the conformance tier talks to: the project's fake, and the real kube-apiserver built
by ``tools/kube/build`` (the session's ``kube_apiserver``). Both are reached through the real client,
and every test runs against both with the same assertions, so the fake cannot drift from the real thing.

On the real server every test gets a namespace of its own, and its pods never run (there is no
scheduler and no kubelet): a pending pod asks for a node label no node has, a "scheduled" pod is bound
to a node that does not exist.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from harness.kubeapiserver import KubeApiServer
from pod_sweeper.demo.fakekube import FakeKube

NEVER = {"pod-sweeper.test/never-schedule": "true"}
NO_SUCH_NODE = "pod-sweeper-test-no-such-node"


def manifest(
    name: str, *, labels: dict[str, str] | None = None, scheduled: bool = False, node: str = NO_SUCH_NODE, **spec: Any
) -> dict[str, Any]:
    placement: dict[str, Any] = {"nodeName": node} if scheduled else {"nodeSelector": NEVER}
    return {
        "metadata": {"name": name, "labels": labels or {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}], **placement, **spec},
    }


def core_api(kubeconfig: Path) -> client.CoreV1Api:
    configuration = client.Configuration()
    config.load_kube_config(str(kubeconfig), client_configuration=configuration)
    configuration.retries = False  # the tests see every answer as the server gave it
    return client.CoreV1Api(client.ApiClient(configuration))


@dataclass
class ApiServer:
    core: client.CoreV1Api
    kubeconfig: Path
    namespace: str
    real: KubeApiServer | None  # the real server, or None for the fake

    def pod(
        self, name: str, *, labels: dict[str, str] | None = None, scheduled: bool = False, namespace: str | None = None
    ) -> Any:
        return self.core.create_namespaced_pod(
            namespace or self.namespace, manifest(name, labels=labels, scheduled=scheduled)
        )

    def read(self, name: str, namespace: str | None = None) -> Any | None:
        try:
            return self.core.read_namespaced_pod(name, namespace or self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise


@contextmanager
def real_api_server(server: KubeApiServer) -> Iterator[ApiServer]:
    """A fresh namespace on the real server, as the admin."""
    namespace = server.namespace(f"t-{uuid.uuid4().hex[:10]}")
    yield ApiServer(core_api(server.admin_kubeconfig), server.admin_kubeconfig, namespace, real=server)


@contextmanager
def fake_api_server(tmp_path: Path) -> Iterator[ApiServer]:
    with FakeKube() as fake:
        kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig")
        fake.kubeconfig = kubeconfig
        yield ApiServer(core_api(kubeconfig), kubeconfig, "conformance", real=None)


# --- what the daemon reads of an answer: the differential tests compare these ---------------------


def answer(call: Any) -> tuple[int, Any, dict[str, str]]:
    """(status, JSON body, headers) of one raw client call, success or failure."""
    try:
        response = call()
        return response.status, json.loads(response.data), dict(response.headers)
    except ApiException as exc:
        return int(exc.status), json.loads(exc.body), dict(exc.headers or {})


def pod_fields(pod: dict[str, Any], uids: dict[str, str]) -> dict[str, Any]:
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


def failure_fields(body: dict[str, Any]) -> dict[str, Any]:
    """What ``kube.api.answer_of`` reads of a Status body."""
    details = body.get("details") or {}
    return {
        "kind": body.get("kind"),
        "reason": body.get("reason"),
        "code": body.get("code"),
        "details.kind": details.get("kind"),
        "details.name": details.get("name"),
        "retryAfterSeconds": details.get("retryAfterSeconds"),
        "causes": [cause.get("reason") for cause in details.get("causes") or []],
    }
