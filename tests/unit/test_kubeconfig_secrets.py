"""The secrets a kubeconfig's users hold, read before the client's loader runs so that every log line is cut
of them (``kube.config.kubeconfig_secrets``): the credentials themselves, not the names and settings around
them, and nothing, never a crash, from a file of another shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pod_sweeper.core.errors import ConfigError
from pod_sweeper.kube.config import kubeconfig_secrets, load_configuration


def test_the_users_credentials_are_read_and_their_settings_are_not(tmp_path: Path) -> None:
    user = {
        "token": "static-token-1",
        "password": "basic-password-2",
        "client-key-data": "a2V5LWRhdGEtMw==",
        "auth-provider": {
            "name": "oidc",
            "config": {"idp-issuer-url": "https://issuer.example", "client-id": "sweeper", "refresh-token": "rt-4444"},
        },
        "exec": {
            "command": "aws",
            "env": [{"name": "AWS_PROFILE", "value": "default"}, {"name": "VAULT_TOKEN", "value": "vault-5555"}],
        },
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({"users": [{"name": "u", "user": user}, {"name": "empty"}]}))
    assert sorted(kubeconfig_secrets(path)) == sorted(
        ["static-token-1", "basic-password-2", "a2V5LWRhdGEtMw==", "rt-4444", "vault-5555"]
    )


@pytest.mark.parametrize(
    "text",
    ["users: 5", "users: [5, {user: 3}, {user: {exec: {env: 3}}}, {user: {auth-provider: 1}}]", "- a list", ":"],
)
def test_a_kubeconfig_of_another_shape_yields_nothing_and_fails_to_load_as_a_bad_setting(
    tmp_path: Path, text: str
) -> None:
    """Read before the loader, a file the loader refuses must still end as its ConfigError (exit 2, one
    line from the CLI), not as a TypeError of ours."""
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    assert kubeconfig_secrets(path) == []
    with pytest.raises(ConfigError, match="kube"):
        load_configuration(path, None, pool_size=1)
