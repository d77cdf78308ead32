"""docs/design.md's "One row, in path order" walks a row from the retire to its record, each step with
its file and name and how it is reached. The table is only worth reading while it is true, so:

- every file it names exists and every name is defined there: a function or class, a class's method,
  an SQL function that a migration creates, or a statement file;
- every step after the first is reached from an earlier one through a name both of them name in their
  code (or one of them is called by): the caller calls the callee, or the two share a channel, an
  event, a queue. Python is read with ``ast`` (the names, attributes, parameters and the words of the
  strings of the definition); an SQL function as the text of its definitions, a statement file whole.
  A hop renamed, moved or dropped, or a row out of order, fails."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEADING = "### One row, in path order"
REACHED = re.compile(r"^from (\d+) by `([^`]+)`$")
STATEMENT = "(the statement)"


@dataclass(frozen=True)
class Step:
    step: int
    reached: str  # "from N by `name`", or empty for the first
    file: str
    name: str


def steps() -> list[Step]:
    """Each row of the table."""
    text = (ROOT / "docs/design.md").read_text()
    assert HEADING in text, f"docs/design.md lost its section {HEADING!r}"
    section = text.split(HEADING, 1)[1].split("\n#", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].isdigit():
            rows.append(Step(int(cells[0]), cells[2], cells[3].strip("`"), cells[4].strip("`")))
    return rows


def _python_definition(path: Path, name: str) -> ast.AST | None:
    """The definition of ``name`` (``f``, ``Class`` or ``Class.method``) at the top of the module ``path``."""
    tree = ast.parse(path.read_text())
    owner, _, member = name.rpartition(".")
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    for node in tree.body:
        if not owner and isinstance(node, kinds) and node.name == name:
            return node
        if owner and isinstance(node, ast.ClassDef) and node.name == owner:
            return next((c for c in node.body if isinstance(c, kinds) and c.name == member), None)
    return None


def _sql_definitions(path: Path, name: str) -> str:
    """The text of every definition of the SQL function ``name`` in ``path`` (empty: none)."""
    text = path.read_text()
    found = re.finditer(rf"CREATE (?:OR REPLACE )?FUNCTION {re.escape(name)}\(.*?\n\$\$;", text, re.DOTALL)
    return "\n".join(match[0] for match in found)


def defined(path: Path, name: str) -> bool:
    if name == STATEMENT:
        return path.suffix == ".sql" and path.parent.name == "sql"
    if path.suffix == ".sql":
        return bool(_sql_definitions(path, name))
    return _python_definition(path, name) is not None


def own_name(step: Step) -> str:
    """How the step is called: its name's last part (``Sender._send``: ``_send``), a statement by its file."""
    return Path(step.file).stem if step.name == STATEMENT else step.name.rpartition(".")[2]


@cache
def names_in(file: str, name: str) -> frozenset[str]:
    """What a step's code names: a Python definition's names, attributes, parameters, keywords and the
    words of its strings; an SQL function's or a statement's words."""
    path = ROOT / file
    if path.suffix == ".sql":
        text = path.read_text() if name == STATEMENT else _sql_definitions(path, name)
        return frozenset(re.findall(r"\w+", text))
    definition = _python_definition(path, name)
    assert definition is not None
    found: set[str] = set()
    for node in ast.walk(definition):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.arg) or (isinstance(node, ast.keyword) and node.arg):
            found.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found |= set(re.findall(r"\w+", node.value))
    return frozenset(found)


def meets(step: Step, token: str) -> bool:
    """Whether the step is called ``token`` or names it in its code."""
    return token == own_name(step) or token in names_in(step.file, step.name)


def test_the_table_walks_every_step_in_order() -> None:
    rows = steps()
    assert len(rows) >= 20, rows
    assert [row.step for row in rows] == list(range(1, len(rows) + 1))
    assert rows[0].reached == "" and all(REACHED.match(row.reached) for row in rows[1:])


@pytest.mark.parametrize("row", steps(), ids=lambda row: str(row.step))
def test_each_step_names_a_file_and_a_name_that_exist(row: Step) -> None:
    path = ROOT / row.file
    assert path.is_file(), f"step {row.step}: {row.file} does not exist"
    assert defined(path, row.name), f"step {row.step}: {row.name} is not defined in {row.file}"


def reached_from(row: Step, rows: list[Step]) -> str | None:
    """Why ``row`` is not reached as it says (None: it is)."""
    match = REACHED.match(row.reached)
    if match is None:
        return f"step {row.step}: no 'from N by `name`'"
    source, token = int(match[1]), match[2]
    if not 1 <= source < row.step:
        return f"step {row.step}: reached from step {source}, which is not an earlier one"
    earlier = rows[source - 1]
    if not meets(earlier, token):
        return f"step {row.step}: step {source} ({earlier.name}) neither is nor names `{token}`"
    if not meets(row, token):
        return f"step {row.step} ({row.name}) neither is nor names `{token}`, by which step {source} reaches it"
    return None


@pytest.mark.parametrize("row", steps()[1:], ids=lambda row: str(row.step))
def test_each_step_is_reached_from_an_earlier_one_through_a_name_both_name(row: Step) -> None:
    assert reached_from(row, steps()) is None


def test_the_check_refuses_a_name_that_is_not_there() -> None:
    """The negative controls: a misspelt method, a missing SQL function, a module-level name that is
    only a method; a hop the earlier step does not make, one the later step does not take, and a step
    said to be reached from a later one."""
    sender = ROOT / "daemon/pod_sweeper/tasks/sweep/sender.py"
    assert defined(sender, "Sender.worker")
    assert not defined(sender, "Sender.wroker")
    assert not defined(sender, "worker")
    assert not defined(ROOT / "migrations/0009_clusters.sql", "pod_sweeper.no_such_function")
    assert not defined(ROOT / "migrations/0009_clusters.sql", STATEMENT)
    rows = steps()
    recheck = next(row for row in rows if row.name == "recheck")
    run = next(row for row in rows if row.name == "Claimer.run")
    send = next(row for row in rows if row.name == "Sender._send")
    assert reached_from(recheck, rows) is None
    skipped = Step(recheck.step, f"from {run.step} by `recheck`", recheck.file, recheck.name)  # the claim does it
    assert "neither is nor names `recheck`" in (reached_from(skipped, rows) or "")
    untaken = Step(send.step, f"from {run.step} by `_turn`", send.file, send.name)  # _send takes no turn
    assert f"step {send.step} (Sender._send) neither is nor names `_turn`" in (reached_from(untaken, rows) or "")
    backwards = Step(run.step, f"from {recheck.step} by `recheck`", run.file, run.name)
    assert "not an earlier one" in (reached_from(backwards, rows) or "")
