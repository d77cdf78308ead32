"""Each package's docstring names its modules as they are: a module renamed, moved or removed without
its package's docstring following fails here (tasks/ once named three modules renamed long before)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

TASKS = Path(__file__).resolve().parents[2] / "daemon" / "pod_sweeper" / "tasks"
STORE = TASKS.parent / "store"


def named(folder: Path) -> set[str]:
    docstring = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    return set(re.findall(r"``(\w+)``", docstring))


def test_the_tasks_docstring_names_its_groups() -> None:
    groups = {path.name for path in TASKS.iterdir() if (path / "__init__.py").is_file()}
    assert named(TASKS) == groups
    assert not [path.name for path in TASKS.glob("*.py") if path.name != "__init__.py"]  # every module in a group


@pytest.mark.parametrize("group", ["sweep", "loops", "rules", "process"])
def test_each_groups_docstring_names_every_module_and_only_modules(group: str) -> None:
    modules = {path.stem for path in (TASKS / group).glob("*.py")} - {"__init__"}
    assert named(TASKS / group) == modules


@pytest.mark.parametrize("group", ["sweep", "reads", "admin", "schema"])
def test_each_store_groups_docstring_names_every_module_and_only_modules(group: str) -> None:
    modules = {path.stem for path in (STORE / group).glob("*.py")} - {"__init__"}
    assert named(STORE / group) == modules


def test_the_stores_docstring_names_its_groups_and_its_top_modules() -> None:
    groups = {path.name for path in STORE.iterdir() if (path / "__init__.py").is_file()}
    top = {path.stem for path in STORE.glob("*.py")} - {"__init__"}
    assert named(STORE) == groups | top
