"""Pointers that point: every repository path and every dotted module path named in the package's
docstrings and comments, the SQL files' comments, the tests' docstrings, the docs and the README exists
(a path with a placeholder, ``migrations/NNNN_name.sql``, matches at least one file). Module paths are
read under ``pod_sweeper`` (``tasks.rules.verdicts``) and may end in a name the module defines
(``core.waits.RULES``). Code is not read: a variable's attribute there looks like a module path."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATH = re.compile(
    r"(?<![\w./-])((?:daemon|docs|tests|sql|deploy|migrations|tools|bench|systemd)/[A-Za-z0-9_./-]*[A-Za-z0-9_])"
)
MODULE = re.compile(r"(?<![\w./-])((?:pod_sweeper\.)?(?:core|kube|store|tasks|cli|testing)(?:\.[a-z_][a-z0-9_]*)+)")
NOT_A_MODULE = re.compile(r"\.(py|sql|md|yaml|json|txt|toml)$")
PLACEHOLDER = re.compile(r"(?<![A-Za-z])(?:N+|NAME)(?![A-Za-z])")


def prose_of_python(path: Path) -> str:
    """The docstrings and the comments of a Python file."""
    source = path.read_text()
    parts = [
        ast.get_docstring(node) or ""
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    parts += [t.string for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.COMMENT]
    return "\n".join(parts)


def prose_of_sql(path: Path) -> str:
    return "\n".join(line.split("--", 1)[1] for line in path.read_text().splitlines() if "--" in line)


def prose() -> dict[Path, str]:
    found = {p: prose_of_python(p) for p in [*ROOT.glob("daemon/**/*.py"), *ROOT.glob("tests/**/*.py")]}
    found |= {p: prose_of_sql(p) for p in [*ROOT.glob("sql/**/*.sql"), *ROOT.glob("migrations/*.sql")]}
    found |= {p: p.read_text() for p in [*ROOT.glob("docs/*.md"), ROOT / "README.md"]}
    return found


def _wild(segment: str) -> str:
    """A segment with a placeholder, as a glob: ``NNNN_name.sql`` -> ``*.sql``, ``v1.N`` -> ``*``."""
    suffix = Path(segment).suffix
    return "*" + ("" if PLACEHOLDER.search(suffix) else suffix)


def path_exists(cited: str) -> bool:
    if (ROOT / cited).exists():
        return True
    if PLACEHOLDER.search(cited) or cited.endswith("_"):  # a pattern: some file must fit it
        segments = [_wild(segment) if PLACEHOLDER.search(segment) else segment for segment in cited.split("/")]
        return any(ROOT.glob("/".join(segments) + ("*" if cited.endswith("_") else "")))
    module, _, _ = cited.rpartition(".")  # tests/containers.build_wheels: a name in a module
    return bool(module) and (ROOT / f"{module}.py").is_file()


def module_exists(dotted: str) -> bool:
    parts = (dotted if dotted.startswith("pod_sweeper.") else f"pod_sweeper.{dotted}").split(".")
    for i in range(len(parts), 1, -1):
        name = ".".join(parts[:i])
        try:
            if importlib.util.find_spec(name) is None:
                continue
        except ModuleNotFoundError:
            continue
        thing: object = importlib.import_module(name)
        for attr in parts[i:]:
            if not hasattr(thing, attr):
                return False
            thing = getattr(thing, attr)
        return True
    return False


def test_every_path_and_module_named_in_prose_exists() -> None:
    missing: set[tuple[str, str]] = set()
    for path, text in prose().items():
        where = str(path.relative_to(ROOT))
        missing |= {(where, p) for p in PATH.findall(text) if not path_exists(p.rstrip("."))}
        missing |= {
            (where, m) for m in MODULE.findall(text) if not NOT_A_MODULE.search(m) and not module_exists(m.rstrip("."))
        }
    assert sorted(missing) == [], "\n".join(map(str, sorted(missing)))


def test_the_check_finds_what_is_missing() -> None:
    assert not path_exists("deploy/prometheusrule.yaml") and path_exists("deploy/monitoring/prometheusrule.yaml")
    assert path_exists("migrations/NNNN_name.sql") and not path_exists("migrations/NNNN_name.yaml")
    assert module_exists("tasks.rules.verdicts") and module_exists("core.waits.RULES")
    assert not module_exists("tasks.answers") and not module_exists("core.waits.NOTHING")
