"""The whole-cluster tier: every test here runs against etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok (the session's ``kube_cluster``), where pods are scheduled, run, and end as on a
real cluster, PodGC and the namespace controller run, and tokens come from the TokenRequest API."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import mark_tier


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_tier(items, Path(__file__).parent, pytest.mark.cluster)
