"""The failover tier: clusters of its own (a primary and a streaming standby), not the suite's server."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.path).startswith(here):
            item.add_marker(pytest.mark.failover)
            item.add_marker(pytest.mark.slow)
