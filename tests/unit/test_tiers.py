"""The tiers: each folder of tests/ is one, marked by the one hook in tests/conftest.py; a folder left out
of its table would run unmarked, outside every ``-m`` selection CI makes."""

from __future__ import annotations

import tomllib
from pathlib import Path

from conftest import TIERS, tier_of

TESTS = Path(__file__).resolve().parents[1]


def test_every_folder_of_tests_is_a_tier_and_its_markers_are_registered() -> None:
    folders = {path.relative_to(TESTS).parts[0] for path in TESTS.rglob("test_*.py")}
    assert folders == set(TIERS)
    pyproject = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())
    registered = {line.split(":")[0] for line in pyproject["tool"]["pytest"]["ini_options"]["markers"]}
    assert {marker for markers in TIERS.values() for marker in markers} <= registered


def test_a_test_takes_its_first_folders_markers() -> None:
    assert tier_of(TESTS / "pooler" / "test_pgbouncer.py") == ("pooler", "versions")
    assert tier_of(TESTS / "unit" / "test_tiers.py") == ("unit",)
    assert tier_of(TESTS / "helpers.py") == ()
