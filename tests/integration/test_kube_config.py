"""The three ways the daemon finds its cluster: an explicit kubeconfig, the in-cluster service
account, and the usual kubeconfig lookup."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pod_sweeper.errors import ConfigError
from pod_sweeper.kube import PodDeleter, load_configuration

pytestmark = pytest.mark.integration


def test_explicit_kubeconfig_talks_to_the_server(kube: Any) -> None:
    configuration = load_configuration(kube.kubeconfig, None, pool_size=7)
    assert configuration.retries is False and configuration.connection_pool_maxsize == 7
    pod = kube.create_pod("ns", "p")
    deleter = PodDeleter(configuration)
    assert deleter.current_uid("ns", "p", timeout=2) == pod["metadata"]["uid"]
    assert kube.requests[-1].authorization == "Bearer fake-token"


def test_usual_lookup_uses_the_kubeconfig_variable(kube: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig))
    deleter = PodDeleter(load_configuration(None, None, pool_size=2))
    assert deleter.current_uid("ns", "missing", timeout=2) is None
    assert kube.requests[-1].path == "/api/v1/namespaces/ns/pods/missing"


def test_in_cluster_service_account(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    environ = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    configuration = load_configuration(None, None, pool_size=3, service_account_dir=tmp_path, environ=environ)
    assert configuration.host == "https://10.96.0.1:443"
    assert configuration.get_api_key_with_prefix("BearerToken").lower() == "bearer sa-token"
    assert configuration.ssl_ca_cert == str(tmp_path / "ca.crt")
    assert configuration.retries is False


def test_in_cluster_without_a_token_is_a_config_error(tmp_path: Path) -> None:
    environ = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(ConfigError, match="Kubernetes configuration"):
        load_configuration(None, None, pool_size=3, service_account_dir=tmp_path, environ=environ)


def test_missing_explicit_kubeconfig(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"POD_SWEEPER_KUBECONFIG: .* does not exist"):
        load_configuration(tmp_path / "nope", None, pool_size=1)
