"""The credential refresh hook runs at most once a second and stays in front of the loader's hook; in a pod,
the ServiceAccount token is read again as soon as the kubelet rewrites it."""

from __future__ import annotations

from typing import Any

from pod_sweeper.kube.config import ThrottledRefresh


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


def _kubelet_writes(folder: Any, token: str, generation: int) -> None:
    """What the kubelet does to a projected volume: the files go into a new timestamped folder, then
    the ``..data`` symlink is swapped to it in one rename; ``token`` links through ``..data``."""
    import os

    data = folder / f"..2026_12_04_{generation}"
    data.mkdir()
    (data / "token").write_text(token)
    (folder / "..data_tmp").symlink_to(data.name)
    os.replace(folder / "..data_tmp", folder / "..data")
    if not (folder / "token").is_symlink():
        (folder / "token").symlink_to("..data/token")


def test_the_token_file_is_read_again_when_the_kubelet_rewrites_it_and_only_then(tmp_path: Any) -> None:
    from pod_sweeper.kube.config import TokenFile

    class Configuration:
        api_key: dict[str, str] = {}

    configuration = Configuration()
    _kubelet_writes(tmp_path, "first", 1)
    hook = TokenFile(tmp_path / "token")
    hook(configuration)
    assert configuration.api_key["BearerToken"] == "bearer first"
    configuration.api_key["BearerToken"] = "left alone"
    hook(configuration)
    assert configuration.api_key["BearerToken"] == "left alone"  # the same file: not read again
    _kubelet_writes(tmp_path, "second\n", 2)
    hook(configuration)
    assert configuration.api_key["BearerToken"] == "bearer second"  # rotated: in use at once
    _kubelet_writes(tmp_path, "", 3)  # caught mid-write
    hook(configuration)
    assert configuration.api_key["BearerToken"] == "bearer second"
    (tmp_path / "..data").unlink()  # the volume is gone for a moment
    hook(configuration)
    assert configuration.api_key["BearerToken"] == "bearer second"
