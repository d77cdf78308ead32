"""Every test under tests/conformance carries the `integration` marker, so a file cannot miss its tier."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.apiserver import ApiServer, api_server
from helpers import mark_tier


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_tier(items, Path(__file__).parent, pytest.mark.integration)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[ApiServer]:
    """The API server of this run: a real one (POD_SWEEPER_TEST_KUBECONFIG) or the fake."""
    with api_server(tmp_path) as server:
        yield server
