"""The unit tests hold the code to its types and its seams without going round them: no ``type: ignore``
in tests/unit, and no test assigns over a private name of the code (a ``_method`` or ``_attribute`` of an
object not its own, or through ``monkeypatch.setattr``). A stand-in is handed in where the code takes one:
an interface (``SweepKube``, ``PodKube``, ``SweepStore``), the token file's lock, the sender's threads."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

UNIT = Path(__file__).resolve().parent


def ignores(source: str) -> list[int]:
    """The lines whose comment silences the type checker."""
    return [
        t.start[0]
        for t in tokenize.generate_tokens(io.StringIO(source).readline)
        if t.type == tokenize.COMMENT and "type: ignore" in t.string
    ]


def private_assignments(source: str) -> list[int]:
    """The lines that assign over another object's private name, or monkeypatch one."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and target.attr.startswith("_")
                and not target.attr.startswith("__")
                and not (isinstance(target.value, ast.Name) and target.value.id == "self")
            ):
                found.append(node.lineno)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "setattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and str(node.args[1].value).startswith("_")
        ):
            found.append(node.lineno)
    return found


def test_no_unit_test_silences_the_type_checker_or_assigns_over_a_private_name() -> None:
    found = {
        str(path.relative_to(UNIT)): (ignores(source), private_assignments(source))
        for path in sorted(UNIT.glob("*.py"))
        if (source := path.read_text())
    }
    assert {where: lines for where, lines in found.items() if any(lines)} == {}


def test_the_check_sees_each_kind() -> None:
    assert ignores("x = f()  # type: ignore[arg-type]\n") == [1]
    assert private_assignments("r.sender._send = spy\n") == [1]
    assert private_assignments("monkeypatch.setattr(hook, '_lock', lock)\n") == [1]
    assert private_assignments("self._lock = lock\nr.store.record_waits = event\n") == []
