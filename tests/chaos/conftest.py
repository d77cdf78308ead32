"""Fixtures of the chaos tier: a migrated database with the reference table attached."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from chaos.harness import Workload
from helpers import attach_table, create_executions, mark_tier, run


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_tier(items, Path(__file__).parent, pytest.mark.chaos)


@pytest.fixture
def workload(pg: psycopg.Connection[Any], db_url: str, kube: Any) -> Workload:
    create_executions(pg)
    run(attach_table(db_url))
    return Workload(db_url, kube)
