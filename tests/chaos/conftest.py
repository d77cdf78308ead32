"""Fixtures of the chaos tier: a migrated database with the reference table attached."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from chaos.harness import Workload
from helpers import attach_table, create_executions, run


@pytest.fixture
def workload(pg: psycopg.Connection[Any], db_url: str, kube: Any) -> Workload:
    create_executions(pg)
    run(attach_table(db_url))
    return Workload(db_url, kube)
