"""Each package's docstring names its modules as they are: a module renamed or removed without its
package's docstring following fails here (tasks/ once named three modules renamed long before)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "daemon" / "pod_sweeper"


def test_the_tasks_docstring_names_every_module_and_only_modules() -> None:
    folder = PACKAGE / "tasks"
    docstring = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    named = set(re.findall(r"``(\w+)``", docstring))
    modules = {path.stem for path in folder.glob("*.py")} - {"__init__"}
    assert named == modules
