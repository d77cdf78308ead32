"""The credential refresh hook runs at most once a second and stays in front of the loader's hook."""

from __future__ import annotations

from typing import Any

from pod_sweeper.kube.api import ThrottledRefresh


class _Configuration:
    refresh_api_key_hook: Any = None


def test_runs_once_per_interval_and_keeps_the_loaders_fresh_closure() -> None:
    runs: list[float] = []
    now = [100.0]

    def loader_hook(configuration: Any) -> None:
        runs.append(now[0])
        # Like the kubeconfig and in-cluster loaders: every run installs a new closure of itself.
        configuration.refresh_api_key_hook = lambda c: loader_hook(c)

    configuration = _Configuration()
    throttle = ThrottledRefresh(loader_hook, every=1.0, clock=lambda: now[0])
    configuration.refresh_api_key_hook = throttle
    for _ in range(50):
        configuration.refresh_api_key_hook(configuration)
    assert runs == [100.0]
    assert configuration.refresh_api_key_hook is throttle
    now[0] = 100.5
    configuration.refresh_api_key_hook(configuration)
    assert runs == [100.0]
    now[0] = 101.0
    configuration.refresh_api_key_hook(configuration)
    configuration.refresh_api_key_hook(configuration)
    assert runs == [100.0, 101.0]
    assert configuration.refresh_api_key_hook is throttle
