"""The operators' real tools the operator tier runs: promtool and prometheus (Debian's ``prometheus``
package) and kubectl. Missing ones skip the test locally and fail it in CI, which installs them."""

from __future__ import annotations

import os
import shutil

import pytest


def require(tool: str, package: str) -> str:
    found = shutil.which(tool)
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail(f"{tool} is not installed; .ci/run installs Debian's {package}")
    pytest.skip(f"{tool} is not installed (Debian: apt-get install {package})")


TARGET_LABELS = {"namespace", "pod", "container", "endpoint", "job", "instance", "service"}
