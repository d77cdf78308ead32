"""The image tier: deploy/Containerfile built unchanged, on a base made here from Debian's packages under
the name it names, and run as it runs in a pod. (The ``image`` fixture is the suite's: the real-node
tier runs the same image.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import mark_tier


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_tier(items, Path(__file__).parent, pytest.mark.image)
