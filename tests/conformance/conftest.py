"""Every test under tests/conformance carries the `integration` marker, so a file cannot miss its tier;
the ``api`` fixture runs each test twice, against the fake and against the real kube-apiserver."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.apiserver import ApiServer, fake_api_server, real_api_server
from helpers import real_kube


@pytest.fixture(params=["fake", "real"])
def api(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ApiServer]:
    """The fake API server, then the real one (the session's ``kube_apiserver``)."""
    if request.param == "real":
        with real_api_server(real_kube(request)) as server:
            yield server
    else:
        with fake_api_server(tmp_path) as server:
            yield server
