"""The failover tier: clusters of its own (a primary and a streaming standby), not the suite's server."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import mark_tier


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_tier(items, Path(__file__).parent, pytest.mark.failover, pytest.mark.slow)
