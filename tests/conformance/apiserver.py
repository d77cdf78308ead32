"""The API server the conformance tier talks to: a real one when ``POD_SWEEPER_TEST_KUBECONFIG`` names a
cluster's kubeconfig (kind, say), the project's fake otherwise. Both are reached through the real
client, and the tests hold both to the same assertions, so the fake cannot drift from the real thing.

On a real cluster every test gets a namespace of its own, created here and deleted afterwards, and its
pods never run: a pending pod asks for a node label no node has, a "scheduled" pod is bound to a node
that does not exist. Nothing is pulled, nothing starts.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from pod_sweeper.testing.fakekube import FakeKube

KUBECONFIG_ENV = "POD_SWEEPER_TEST_KUBECONFIG"
NEVER = {"pod-sweeper.test/never-schedule": "true"}
NO_SUCH_NODE = "pod-sweeper-test-no-such-node"


def manifest(
    name: str, *, labels: dict[str, str] | None = None, scheduled: bool = False, **spec: Any
) -> dict[str, Any]:
    placement: dict[str, Any] = {"nodeName": NO_SUCH_NODE} if scheduled else {"nodeSelector": NEVER}
    return {
        "metadata": {"name": name, "labels": labels or {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}], **placement, **spec},
    }


@dataclass
class ApiServer:
    core: client.CoreV1Api
    kubeconfig: Path
    namespace: str
    real: bool

    def pod(self, name: str, *, labels: dict[str, str] | None = None, scheduled: bool = False) -> Any:
        return self.core.create_namespaced_pod(self.namespace, manifest(name, labels=labels, scheduled=scheduled))

    def read(self, name: str) -> Any | None:
        try:
            return self.core.read_namespaced_pod(name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise


def _core(kubeconfig: Path) -> client.CoreV1Api:
    configuration = client.Configuration()
    config.load_kube_config(str(kubeconfig), client_configuration=configuration)
    configuration.retries = False  # the tests see every answer as the server gave it
    return client.CoreV1Api(client.ApiClient(configuration))


@contextmanager
def api_server(tmp_path: Path) -> Iterator[ApiServer]:
    real = os.environ.get(KUBECONFIG_ENV)
    if real:
        core = _core(Path(real))
        namespace = f"pod-sweeper-test-{uuid.uuid4().hex[:8]}"
        core.create_namespace({"metadata": {"name": namespace, "labels": {"pod-sweeper.test": "true"}}})
        try:
            yield ApiServer(core, Path(real), namespace, real=True)
        finally:
            core.delete_namespace(namespace, grace_period_seconds=0)
        return
    with FakeKube() as fake:
        kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig")
        fake.kubeconfig = kubeconfig
        yield ApiServer(_core(kubeconfig), kubeconfig, "conformance", real=False)
