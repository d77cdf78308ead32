"""Every test under tests/operator_tier carries the `acceptance` marker, so a file cannot miss its tier."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import mark_tier


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_tier(items, Path(__file__).parent, pytest.mark.acceptance)
