"""The image tier: deploy/Containerfile built unchanged, on a base made here from Debian's packages under
the name it names, and run as it runs in a pod."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from containers import BASE, ROOT, Podman, debian_root, image_context
from helpers import mark_tier

IMAGE = "localhost/pod-sweeper:test"
SOURCE_DATE_EPOCH = 1764547200  # 2025-12-01T00:00:00Z: the bill of materials' date


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_tier(items, Path(__file__).parent, pytest.mark.image)


@pytest.fixture(scope="session")
def image(podman: Podman, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The image, built as a user builds it: the locked wheels and the checkout's in build/wheels, then
    podman build (the bill of materials dated by SOURCE_DATE_EPOCH, as the docs' command does)."""
    podman.import_root(debian_root("debian-slim"), BASE)
    context = image_context(tmp_path_factory.mktemp("context"))
    started = time.monotonic()
    podman(
        "build", "--pull=never", "-f", str(ROOT / "deploy" / "Containerfile"),
        "--build-arg", f"SOURCE_DATE_EPOCH={SOURCE_DATE_EPOCH}", "-t", IMAGE, str(context),
    )  # fmt: skip
    size = podman.inspect(IMAGE)["Size"]
    print(f"\nimage {IMAGE}: built in {time.monotonic() - started:.0f} s, {size / 1e6:.0f} MB")
    return IMAGE
