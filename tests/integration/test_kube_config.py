"""The three ways the daemon finds its cluster: an explicit kubeconfig, the in-cluster service
account, and the usual kubeconfig lookup."""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from pod_sweeper.core.errors import ConfigError
from pod_sweeper.kube.answer import Said
from pod_sweeper.kube.api import KubeClient
from pod_sweeper.kube.config import ThrottledRefresh, load_configuration
from pod_sweeper.kube.errors import KubeError


def test_explicit_kubeconfig_talks_to_the_server(kube: Any) -> None:
    configuration = load_configuration(kube.kubeconfig, None, pool_size=7)
    assert configuration.retries is False and configuration.connection_pool_maxsize == 7
    pod = kube.create_pod("ns", "p")
    kube_client = KubeClient(configuration)
    state = kube_client.pod_state("ns", "p", timeout=2)
    assert state is not None and state.uid == pod["metadata"]["uid"]
    assert kube.requests[-1].authorization == "Bearer fake-token"
    assert isinstance(configuration.refresh_api_key_hook, ThrottledRefresh)


def test_a_delete_says_when_it_went_on_the_wire_after_the_credential_hook(kube: Any) -> None:
    """The outage watch judges a request from when it left (issue 53): the client runs the credential
    hook between the call and the wire, and a hook renewing a token may take seconds, so the answer's
    ``left`` is stamped after it and before the server has the request, on the clock the client is given
    (the fake server, in this process, logs each request's arrival on the same monotonic clock). A
    request that never left has none, whatever the thread sent before."""
    configuration = load_configuration(kube.kubeconfig, None, pool_size=2)
    hooked: list[float] = []
    configuration.refresh_api_key_hook = lambda _: hooked.append(time.monotonic())
    kube_client = KubeClient(configuration, clock=time.monotonic)
    uid = kube.create_pod("ns", "p")["metadata"]["uid"]

    deleted = kube_client.delete_pod("ns", "p", uid, timeout=2)
    assert deleted.said is Said.DONE and len(hooked) == 1
    assert deleted.left is not None and hooked[-1] < deleted.left < kube.requests[-1].at

    # A 409 is followed by a GET; the answer is the DELETE's and so is its time on the wire.
    kube.create_pod("ns", "q")
    conflict = kube_client.delete_pod("ns", "q", "not-its-uid", timeout=2)
    delete, get = kube.requests[-2:]
    assert conflict.said is Said.CONFLICT and (delete.method, get.method) == ("DELETE", "GET")
    assert conflict.left is not None and hooked[-2] < conflict.left < delete.at < hooked[-1] < get.at

    # A hook that fails as the network does (an OIDC refresh's connection refused): never sent, so
    # unsent rather than no answer, and not stamped with the time of the request this thread sent before.
    def refuse(_: Any) -> None:
        raise ConnectionRefusedError("the token endpoint refused the connection")

    configuration.refresh_api_key_hook = refuse
    sent = len(kube.requests)
    unsent = kube_client.delete_pod("ns", "q", "not-its-uid", timeout=2)
    assert unsent.said is Said.UNSENT and len(kube.requests) == sent
    assert unsent.left is None


@pytest.mark.parametrize(
    "failure",
    [
        ConnectionRefusedError("the token endpoint refused the connection"),  # the IdP down
        ConfigException("oidc: no refresh token"),  # what the loader raises for an auth provider
        RuntimeError("invalid_grant: the refresh token was revoked"),  # anything else a hook raises
        ApiException(status=0, reason="TLS handshake with the token endpoint"),  # the client's own, in a refresh
    ],
    ids=lambda failure: type(failure).__name__,
)
def test_a_delete_whose_credential_hook_fails_is_unsent_and_charges_nothing(kube: Any, failure: Exception) -> None:
    """A credential hook that cannot get a token, whatever it raises, sends nothing: the DELETE, a
    GET and the outage watch's probe come back ``unsent`` (never ``no_answer``, which the outage watch
    would probe into, nor ``unforeseen``, which is charged: a plugin down for longer than the attempt
    budget once killed every row it met; the answer table's case is tests/unit/test_verdicts.py's)."""
    configuration = load_configuration(kube.kubeconfig, None, pool_size=2)
    kube_client = KubeClient(configuration)
    uid = kube.create_pod("ns", "p")["metadata"]["uid"]

    def fail(_: Any) -> None:
        raise failure

    configuration.refresh_api_key_hook = fail
    sent = len(kube.requests)
    answer = kube_client.delete_pod("ns", "p", uid, timeout=2)
    assert (answer.said, answer.label, answer.left) == (Said.UNSENT, "unsent", None)
    assert type(failure).__name__ in str(answer) and not answer.answered and not answer.needs_probe
    with pytest.raises(KubeError) as raised:
        kube_client.pod_state("ns", "p", timeout=2)
    assert raised.value.answer.said is Said.UNSENT
    assert kube_client.probe(timeout=2).said is Said.UNSENT
    assert len(kube.requests) == sent

    # The hook works again: the same client sends, and the server answers.
    configuration.refresh_api_key_hook = lambda _: None
    assert kube_client.delete_pod("ns", "p", uid, timeout=2).said is Said.DONE


def test_a_failing_hook_that_quotes_the_credentials_leaves_them_out_of_every_answer(kube: Any) -> None:
    """The hook's words reach logs and the row's ``last_error`` through the answer: a hook that quotes
    the token it holds, or the basic-auth password, has them cut out of the DELETE's answer, the GET's
    error and the probe's answer alike, read from the configuration as it stands when the hook fails."""
    configuration = load_configuration(kube.kubeconfig, None, pool_size=2)
    kube_client = KubeClient(configuration)
    configuration.api_key["BearerToken"] = "Bearer tok-renewed-451"
    configuration.password = "basic-pw-872"

    def fail(_: Any) -> None:
        raise RuntimeError("refresh of tok-renewed-451 (user pw basic-pw-872) refused: invalid_grant")

    configuration.refresh_api_key_hook = fail
    with pytest.raises(KubeError) as raised:
        kube_client.pod_state("ns", "p", timeout=2)
    answers = [
        kube_client.delete_pod("ns", "p", "some-uid", timeout=2),
        raised.value.answer,
        kube_client.probe(timeout=2),
    ]
    for answer in answers:
        assert answer.said is Said.UNSENT and "invalid_grant" in str(answer) and "[redacted]" in str(answer)
        assert "tok-renewed-451" not in str(answer) and "basic-pw-872" not in str(answer)


def test_a_failure_of_ours_before_the_wire_that_is_not_the_hooks_stays_unforeseen(kube: Any) -> None:
    """Only the credential hook's failure is ``unsent``: a bug before the wire (here the client refusing a
    name it must have) is a failure nobody foresaw, logged with its traceback and kept for another round,
    not a credential problem that would hold every row behind the auth gate."""
    kube_client = KubeClient(load_configuration(kube.kubeconfig, None, pool_size=2))
    sent = len(kube.requests)
    answer = kube_client.delete_pod("ns", cast(str, None), "some-uid", timeout=2)
    assert answer.said is Said.UNFORESEEN and answer.reason == "ValidationError" and len(kube.requests) == sent


def test_usual_lookup_uses_the_kubeconfig_variable(kube: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig))
    kube_client = KubeClient(load_configuration(None, None, pool_size=2))
    assert kube_client.pod_state("ns", "missing", timeout=2) is None
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


def test_an_expiring_exec_token_is_still_renewed_but_not_per_request(kube: Any, tmp_path: Path) -> None:
    """An exec credential plugin whose token is within the loader's renewal margin: the loader would
    run the plugin before every request; through the throttle it runs about once a second, and a new
    token still reaches the server."""
    token, runs = tmp_path / "token", tmp_path / "runs"
    token.write_text("t1")
    expiry = (datetime.now(UTC) + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, pathlib, sys\n"
        "with open(sys.argv[2], 'a') as f: f.write('.')\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',"
        f" 'status': {{'token': pathlib.Path(sys.argv[1]).read_text(), 'expirationTimestamp': '{expiry}'}}}}))\n"
    )
    kubeconfig = json.loads(kube.write_kubeconfig(tmp_path / "kubeconfig").read_text())
    kubeconfig["users"][0]["user"] = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(plugin), str(token), str(runs)],
            "interactiveMode": "Never",
        }
    }
    (tmp_path / "kubeconfig").write_text(json.dumps(kubeconfig))
    kube.token = None  # accept any token; the test reads the recorded header
    kube_client = KubeClient(load_configuration(tmp_path / "kubeconfig", None, pool_size=2))
    kube_client.pod_state("ns", "p", timeout=2)
    assert kube.requests[-1].authorization == "Bearer t1"

    token.write_text("t2")
    before, requests, deadline = len(runs.read_text()), 0, time.monotonic() + 15
    while kube.requests[-1].authorization != "Bearer t2":
        assert time.monotonic() < deadline, "the renewed token never reached the server"
        kube_client.pod_state("ns", "p", timeout=2)
        requests += 1
    plugin_runs = len(runs.read_text()) - before
    assert requests >= 10 and plugin_runs <= 3, (requests, plugin_runs)
