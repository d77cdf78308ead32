"""The real-server tier: every test here runs against the kube-apiserver and etcd that
``tools/kube/build`` builds from the published modules (the session's ``kube_apiserver``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import mark_tier


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_tier(items, Path(__file__).parent, pytest.mark.realkube)
