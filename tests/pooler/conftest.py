"""The pooler tier: every test here talks to PostgreSQL through a real PgBouncer in transaction mode."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from pooler.bouncer import PgBouncer, find_pgbouncer


@pytest.fixture
def pgbouncer(pg_server_url: str) -> Iterator[PgBouncer]:
    if find_pgbouncer() is None:
        if os.environ.get("CI"):
            pytest.fail("pgbouncer is not installed; .ci/run installs Debian's package")
        pytest.skip("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
    with PgBouncer(pg_server_url, pool_size=3) as bouncer:
        yield bouncer
