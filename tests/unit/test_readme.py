"""The settings table in docs/operations.md is the one the settings themselves describe."""

from __future__ import annotations

from pathlib import Path

from pod_sweeper.cli.main import settings_markdown


def test_readme_settings_table_is_current() -> None:
    readme = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    assert settings_markdown() in readme, "regenerate the table in docs/operations.md with `pod-sweeper settings`"
