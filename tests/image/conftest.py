"""The image tier: deploy/Containerfile built unchanged, on a base made here from Debian's packages under
the name it names, and run as it runs in a pod."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from containers import BASE, ROOT, Podman, build_wheels, debian_root
from helpers import mark_tier

IMAGE = "localhost/pod-sweeper:test"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_tier(items, Path(__file__).parent, pytest.mark.image)


@pytest.fixture(scope="session")
def image(podman: Podman, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The image, built as a user builds it: the checkout's wheels in build/wheels, then podman build."""
    podman.import_root(debian_root("debian-slim"), BASE)
    context = tmp_path_factory.mktemp("context")
    build_wheels(context / "build" / "wheels")
    started = time.monotonic()
    podman("build", "--pull=never", "-f", str(ROOT / "deploy" / "Containerfile"), "-t", IMAGE, str(context))
    size = podman.inspect(IMAGE)["Size"]
    print(f"\nimage {IMAGE}: built in {time.monotonic() - started:.0f} s, {size / 1e6:.0f} MB")
    return IMAGE
