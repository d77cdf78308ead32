"""docs/design.md's "One row, in path order" walks a row from the retire to its record, each step with
its file and name. The table is only worth reading while it is true, so every file it names must exist
and every name must be defined there: a function or class, a class's method, an SQL function that a
migration creates, or a statement file."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEADING = "### One row, in path order"
ROW = re.compile(r"^\|\s*(\d+)\s*\|(.*)\|\s*`([^`]+)`\s*\|\s*(.+?)\s*\|$")


def steps() -> list[tuple[int, str, str]]:
    """(step, file, name) for each row of the table."""
    text = (ROOT / "docs/design.md").read_text()
    assert HEADING in text, f"docs/design.md lost its section {HEADING!r}"
    section = text.split(HEADING, 1)[1].split("\n#", 1)[0]
    rows = []
    for line in section.splitlines():
        if match := ROW.match(line):
            rows.append((int(match[1]), match[3], match[4].strip("`")))
    return rows


def defined_in_python(path: Path, name: str) -> bool:
    """Whether ``name`` (``f`` or ``Class.method``) is defined at the top of the module ``path``."""
    tree = ast.parse(path.read_text())
    owner, _, member = name.rpartition(".")
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    for node in tree.body:
        if not owner and isinstance(node, kinds) and node.name == name:
            return True
        if owner and isinstance(node, ast.ClassDef) and node.name == owner:
            return any(isinstance(child, kinds) and child.name == member for child in node.body)
    return False


def defined(path: Path, name: str) -> bool:
    if name == "(the statement)":
        return path.suffix == ".sql" and path.parent.name == "sql"
    if path.suffix == ".sql":
        return re.search(rf"CREATE (OR REPLACE )?FUNCTION {re.escape(name)}\(", path.read_text()) is not None
    return defined_in_python(path, name)


def test_the_table_walks_every_step_in_order() -> None:
    rows = steps()
    assert len(rows) >= 10, rows
    assert [step for step, _, _ in rows] == list(range(1, len(rows) + 1))


@pytest.mark.parametrize(("step", "file", "name"), steps(), ids=lambda v: str(v))
def test_each_step_names_a_file_and_a_name_that_exist(step: int, file: str, name: str) -> None:
    path = ROOT / file
    assert path.is_file(), f"step {step}: {file} does not exist"
    assert defined(path, name), f"step {step}: {name} is not defined in {file}"


def test_the_check_refuses_a_name_that_is_not_there() -> None:
    """The negative control: a misspelt method, a missing SQL function, a module-level name that is
    only a method."""
    sender = ROOT / "daemon/pod_sweeper/tasks/sweep/sender.py"
    assert defined(sender, "Sender.worker")
    assert not defined(sender, "Sender.wroker")
    assert not defined(sender, "worker")
    assert not defined(ROOT / "migrations/0009_clusters.sql", "pod_sweeper.no_such_function")
    assert not defined(ROOT / "migrations/0009_clusters.sql", "(the statement)")
