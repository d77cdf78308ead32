"""The docs that code or tests back: the settings table in docs/operations.md is the one the settings
themselves describe, and every test docs/design.md cites as a proof exists."""

from __future__ import annotations

import re
from pathlib import Path

from pod_sweeper.cli.show import settings_markdown


def test_operations_settings_table_is_current() -> None:
    operations = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    assert settings_markdown() in operations, "regenerate the table in docs/operations.md with `pod-sweeper settings`"


def test_every_test_the_design_cites_exists() -> None:
    """docs/design.md names the test that proves each safety invariant; a renamed or deleted test
    would leave an invariant proved by nothing while the page still says it is."""
    import re

    root = Path(__file__).resolve().parents[2]
    design = (root / "docs" / "design.md").read_text()
    files = set(re.findall(r"`(tests/[\w/]+\.py)", design))
    names = set(re.findall(r"\b(test_\w+)\b(?!\.py)", design)) - {Path(f).stem for f in files}
    assert files and names
    assert [f for f in sorted(files) if not (root / f).is_file()] == []
    defined = {
        m
        for path in (root / "tests").rglob("test_*.py")
        for m in re.findall(r"^\s*def (test_\w+)", path.read_text(), re.M)
    }
    stems = {path.stem for path in (root / "tests").rglob("test_*.py")}
    assert sorted(names - defined - stems) == []


def test_dba_md_states_the_schema_as_the_migrations_build_it() -> None:
    """The facts docs/dba.md gives about the claim index and the wakeup table, held to docs/schema.sql,
    the schema the migration tier checks the chain against."""
    root = Path(__file__).resolve().parents[2]
    schema = (root / "docs" / "schema.sql").read_text()
    dba = (root / "docs" / "dba.md").read_text()
    [claim_index] = [line for line in schema.splitlines() if "INDEX outbox_claimable " in line]
    columns = re.search(r"USING btree \(([^)]*)\)", claim_index)
    assert columns is not None and f"`outbox_claimable ({columns[1]})" in dba
    wakeup = schema.split("CREATE TABLE pod_sweeper.wakeup (", 1)[1].split(");", 1)[0]
    assert "CONSTRAINT wakeup_pkey PRIMARY KEY (cluster)" in wakeup
    assert "a row per cluster" in dba and "single row" not in dba


def test_the_licence_note_names_every_runtime_dependency_and_the_licence_file_exists() -> None:
    import tomllib

    root = Path(__file__).resolve().parents[2]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[\[<>=!~ ]", requirement, maxsplit=1)[0] for requirement in project["dependencies"]}
    note = (root / "docs" / "licenses.md").read_text()
    rows = {
        cell.strip() for line in note.splitlines() if line.startswith("| ") for cell in line.split("|")[1].split(",")
    }
    assert names <= rows, names - rows
    assert "Apache License" in (root / "LICENSE").read_text() and project["license"] == {"text": "Apache-2.0"}


def test_the_lock_pins_every_dependency_with_hashes_and_the_licence_note_lists_each_one() -> None:
    """deploy/requirements.lock (tools/lock) pins each runtime dependency of pyproject.toml at a version
    it accepts, every pin carries SHA-256 hashes, and docs/licenses.md lists exactly the locked
    distributions (a new one in the image needs its licence stated for a review)."""
    import tomllib

    from packaging.requirements import Requirement

    root = Path(__file__).resolve().parents[2]
    text = (root / "deploy" / "requirements.lock").read_text()
    entries = re.split(r"\n(?=[a-z0-9])", text.split("\n", 3)[3].strip()) if text.count("\n") > 3 else []
    pins = {}
    for entry in entries:
        head, *hashes = [part.strip(" \\\n") for part in entry.split("--hash=")]
        name, version = head.split("==")
        assert hashes and all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), name
        pins[name] = version
    assert pins
    for requirement in tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]:
        wanted = Requirement(requirement)
        name = re.sub(r"[-_.]+", "-", wanted.name).lower()
        assert name in pins and wanted.specifier.contains(pins[name]), (requirement, pins.get(name))
    note = (root / "docs" / "licenses.md").read_text()
    assert set(re.findall(r"^\| `([a-z0-9-]+)` \|", note, re.M)) == set(pins)
