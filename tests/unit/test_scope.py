"""The namespace scope and the names Kubernetes could hold, alone (``pod_sweeper.kube.scope``)."""

from __future__ import annotations

import pytest

from pod_sweeper.core.errors import ConfigError
from pod_sweeper.core.settings import Settings, load_settings
from pod_sweeper.kube.scope import NamespaceScope, invalid_name


def test_unset_allows_every_namespace_but_kubernetes_own() -> None:
    scope = NamespaceScope(None)
    assert scope.refuses("sandboxes") is None and scope.refuses("team-a") is None
    for system in ("kube-system", "kube-public", "kube-node-lease"):
        why = scope.refuses(system)
        assert why is not None and "POD_SWEEPER_NAMESPACES" in why
    assert "kube-system" in scope.describe()


def test_a_list_allows_exactly_its_namespaces() -> None:
    scope = NamespaceScope(frozenset({"sandboxes", "kube-system"}))
    assert scope.refuses("sandboxes") is None and scope.refuses("kube-system") is None  # named: allowed
    why = scope.refuses("default")
    assert why is not None and "outside POD_SWEEPER_NAMESPACES (kube-system, sandboxes)" in why
    assert scope.describe() == "kube-system, sandboxes"


@pytest.mark.parametrize(
    ("namespace", "name", "bad"),
    [
        ("sandboxes", "pod-a-1", None),
        ("sandboxes", "a.b", None),
        ("sandboxes", "x/../victim", "pod name"),
        ("sandboxes", "..", "pod name"),
        ("sandboxes", "Upper", "pod name"),
        ("sandboxes", "a" * 254, "pod name"),
        ("", "p", "namespace"),
        ("a.b", "p", "namespace"),
        ("ns", "evil\x1b[31mRED\n", "pod name"),
    ],
)
def test_names_kubernetes_could_never_hold(namespace: str, name: str, bad: str | None) -> None:
    why = invalid_name(namespace, name)
    assert (why is None) if bad is None else (why is not None and why.startswith(bad))
    assert why is None or ("\x1b" not in why and "\n" not in why)  # shown escaped
    assert why is None or len(why) < 200  # a 10,000-character name is cut


def test_the_setting_is_a_comma_separated_list_of_namespace_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_SWEEPER_NAMESPACES", "sandboxes, ci ,")
    assert Settings(database_url="host=x").namespaces == frozenset({"sandboxes", "ci"})
    monkeypatch.setenv("POD_SWEEPER_NAMESPACES", "Sandboxes")
    with pytest.raises(ConfigError, match=r"POD_SWEEPER_NAMESPACES: .Sandboxes.: not a Kubernetes namespace"):
        load_settings()
