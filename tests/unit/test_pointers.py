"""Pointers that point. Every path, dotted module path and ``file:name`` that the prose names resolves:

- the prose: the docstrings and comments of the Python under daemon/, tests/, bench/, tools/ and
  deploy/, and its string literals but for the tests' (they plant stale names on purpose); the
  comments of the SQL (sql/, migrations/, bench/); the docs, the README and bench's; pyproject.toml;
  and tools/'s scripts and deploy/'s manifests whole;
- a path is written from the repository's root (``docs/design.md``) or from the package's
  (``store/sweep/cursor.py``, ``pod_sweeper/sql``); a path with a placeholder,
  ``migrations/NNNN_name.sql``, matches at least one file;
- a module path is read under ``pod_sweeper`` (``tasks.rules.verdicts``) and may end in a name the
  module defines (``core.waits.RULES``); ``pod_sweeper.cli.main:main`` and
  ``tests/unit/test_pointers.py::test_the_check_finds_what_is_missing`` name a function that the file
  defines;
- a module of the package named in words ("the schema watch", for tasks/loops/schema_watch.py) and
  followed in its clause by a module file in parentheses, is followed by its own.

Code other than its strings is not read: a variable's attribute there looks like a module path."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import io
import re
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "daemon/pod_sweeper"
TOPS = "daemon|docs|tests|sql|deploy|migrations|tools|bench|systemd"
SUBPACKAGES = "core|kube|store|tasks|cli|testing"
PATH = re.compile(rf"(?<![\w./$-])((?:{TOPS}|{SUBPACKAGES}|pod_sweeper)/[A-Za-z0-9_./-]*[A-Za-z0-9_])")
MODULE = re.compile(rf"(?<![\w./-])((?:pod_sweeper|(?:pod_sweeper\.)?(?:{SUBPACKAGES}))(?:\.[a-z_][a-z0-9_]*)+)")
FILE_NAME = re.compile(r"(?<![\w./-])([A-Za-z0-9_./-]+\.py)::?([A-Za-z_][A-Za-z0-9_.]*[A-Za-z0-9_])")
DOTTED_NAME = re.compile(r"(?<![\w./-])(pod_sweeper(?:\.[a-z_][a-z0-9_]*)+):([A-Za-z_][A-Za-z0-9_]*)")
KUBERNETES_GROUP = re.compile(r"core/v\d")  # Kubernetes's API group of pods, not the package's core/
SQL_CREATE = re.compile(
    r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:UNIQUE\s+)?(?:TABLE|FUNCTION|VIEW|INDEX|TYPE|SEQUENCE)\s+"
    r"(?:CONCURRENTLY\s+)?(?:IF\s+NOT\s+EXISTS\s+)?(?:pod_sweeper\.)?(\w+)",
    re.IGNORECASE,
)
SQL_SETTING = re.compile(r"current_setting\('pod_sweeper\.(\w+)'")
NOT_A_MODULE = re.compile(r"\.(py|sql|md|yaml|json|txt|toml)$")
PLACEHOLDER = re.compile(r"(?<![A-Za-z])(?:N+|NAME)(?![A-Za-z])")
SENTENCE = re.compile(r"(?<=[.;:!?])\s+(?=[A-Z`(])|\n\s*\n")


def prose_of_python(source: str, *, strings: bool = False) -> str:
    """The docstrings and the comments of a Python file, and with ``strings`` its other string
    literals too (messages, SQL; the tests' are not read, they plant stale names on purpose)."""
    tree = ast.parse(source)
    owners = [
        n for n in ast.walk(tree) if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    parts = [ast.get_docstring(node) or "" for node in owners]
    parts += [t.string for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.COMMENT]
    if strings:
        docstrings = {id(node.body[0].value) for node in owners if node.body and isinstance(node.body[0], ast.Expr)}
        parts += [
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
        ]
    return "\n".join(parts)


def prose_of_sql(source: str) -> str:
    return "\n".join(line.split("--", 1)[1] for line in source.splitlines() if "--" in line)


def prose_of(path: Path) -> str:
    """What of a file is prose: a Python file's docstrings and comments, an SQL file's comments, the
    rest whole (Markdown, TOML, YAML, JSON, shell). A script without a suffix is read as what it is."""
    source = path.read_text()
    if path.suffix == ".py" or (not path.suffix and source.startswith("#!") and "python" in source.splitlines()[0]):
        return prose_of_python(source, strings=not path.is_relative_to(ROOT / "tests"))
    if path.suffix == ".sql":
        return prose_of_sql(source)
    return source


def _files() -> Iterator[Path]:
    for pattern in ["daemon/**/*.py", "tests/**/*.py", "sql/**/*.sql", "migrations/*.sql", "docs/*.md"]:
        yield from ROOT.glob(pattern)
    yield from (ROOT / "README.md", ROOT / "pyproject.toml")
    for top in ("bench", "tools", "deploy"):
        for path in (ROOT / top).rglob("*"):
            if path.is_file() and path.suffix not in {".sum", ".mod", ".lock"} and "__pycache__" not in path.parts:
                yield path


def prose() -> dict[Path, str]:
    return {path: prose_of(path) for path in _files()}


def _wild(segment: str) -> str:
    """A segment with a placeholder, as a glob: ``NNNN_name.sql`` -> ``*.sql``, ``v1.N`` -> ``*``."""
    suffix = Path(segment).suffix
    return "*" + ("" if PLACEHOLDER.search(suffix) else suffix)


def rooted(cited: str) -> str:
    """A cited path from the repository's root: ``store/db.py`` is the package's, ``pod_sweeper/sql``
    the wheel's (the repository's sql/)."""
    first = cited.split("/", 1)[0]
    if first == "pod_sweeper":
        rest = cited.split("/", 1)[1]
        return rest if rest.split("/", 1)[0] in {"sql", "migrations"} else f"daemon/{cited}"
    return f"daemon/pod_sweeper/{cited}" if re.fullmatch(SUBPACKAGES, first) else cited


def path_exists(cited: str) -> bool:
    if KUBERNETES_GROUP.fullmatch(cited):
        return True
    cited = rooted(cited)
    if (ROOT / cited).exists():
        return True
    if cited.startswith("sql/") and (ROOT / f"{cited}.sql").is_file():  # a statement by its name: sql/dba/alerts
        return True
    if PLACEHOLDER.search(cited) or cited.endswith("_"):  # a pattern: some file must fit it
        segments = [_wild(segment) if PLACEHOLDER.search(segment) else segment for segment in cited.split("/")]
        return any(ROOT.glob("/".join(segments) + ("*" if cited.endswith("_") else "")))
    module, _, _ = cited.rpartition(".")  # tests/containers.build_wheels: a name in a module
    return bool(module) and (ROOT / f"{module}.py").is_file()


@cache
def sql_objects() -> frozenset[str]:
    """What the schema holds (a table, a function, a view, an index, a type): ``pod_sweeper.outbox`` in
    prose is the table, not a module; ``pod_sweeper.actor`` a setting the SQL reads. Read from the schema's
    snapshot (docs/schema.sql) and the migrations."""
    texts = [path.read_text() for path in [ROOT / "docs/schema.sql", *ROOT.glob("migrations/*.sql")]]
    return frozenset(name for text in texts for name in SQL_CREATE.findall(text) + SQL_SETTING.findall(text))


def module_exists(dotted: str, *, created: frozenset[str] = frozenset()) -> bool:
    """Whether ``dotted`` is a module of the package, or a name one defines, or the schema's object
    (or one ``created`` by the text that names it)."""
    schema, _, rest = dotted.partition(".")
    if schema == "pod_sweeper" and rest.split(".", 1)[0] in sql_objects() | created:
        return True
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


def defines(path: Path, name: str) -> bool:
    """Whether the Python file ``path`` defines ``name`` (``f``, ``Class`` or ``Class.method``) at its top."""
    body: list[ast.stmt] = ast.parse(path.read_text()).body
    for part in name.split("."):
        found = [
            node
            for node in body
            if (isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == part)
            or (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == part for t in node.targets))
            or (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == part)
        ]
        if not found:
            return False
        body = found[0].body if isinstance(found[0], ast.ClassDef) else []
    return True


def file_name_resolves(cited: str, name: str) -> bool:
    """``file:name`` or ``file::name``; a bare file name (``test_sweeper.py``) is any test file of that name."""
    paths = [ROOT / rooted(cited)] if "/" in cited else list((ROOT / "tests").rglob(cited))
    return any(path.is_file() and defines(path, name) for path in paths)


def _module_words() -> dict[str, Path]:
    """The package's modules that prose names in words: ``schema_watch.py`` is "the schema watch"
    (a module whose name is one word reads as too many other things)."""
    return {
        "the " + path.stem.replace("_", " "): path
        for path in PACKAGE.rglob("*.py")
        if "_" in path.stem.strip("_") and not path.stem.startswith("_")
    }


def misplaced(text: str) -> set[str]:
    """The citations that follow a module named in words, in the same clause, and give another module's
    file for it: the schema watch, then (a loop's file that is not schema_watch.py)."""
    found = set()
    flat = " ".join(text.split())
    for phrase, module in _module_words().items():
        where = str(module.relative_to(ROOT))
        clause = re.compile(
            rf"(?<![\w-]){re.escape(phrase)}(?![\w-])[^.;:()|]{{0,80}}\((?:in |see )?([\w/.]+\.py)\)", re.I
        )
        for match in clause.finditer(flat):
            cited = rooted(match[1])
            if cited.startswith("daemon/pod_sweeper/") and cited != where:
                found.add(f"{phrase} is {where}, not {match[1]}: {match[0]}")
    return found


def stale(path: Path, text: str) -> set[tuple[str, str]]:
    """Every pointer of ``text`` (the prose of ``path``) that does not resolve."""
    where = str(path.relative_to(ROOT))
    created = frozenset(SQL_CREATE.findall(text))  # bench/trigger_variants.py's own trigger functions
    missing = {(where, p) for p in PATH.findall(text) if not path_exists(p.rstrip("."))}
    missing |= {
        (where, m)
        for m in MODULE.findall(text)
        if not NOT_A_MODULE.search(m) and not module_exists(m.rstrip("."), created=created)
    }
    missing |= {(where, f"{f}:{n}") for f, n in FILE_NAME.findall(text) if not file_name_resolves(f, n)}
    missing |= {(where, f"{m}:{n}") for m, n in DOTTED_NAME.findall(text) if not module_exists(f"{m}.{n}")}
    return missing | {(where, m) for m in misplaced(text)}


def test_every_path_module_and_name_in_prose_resolves() -> None:
    missing: set[tuple[str, str]] = set()
    for path, text in prose().items():
        missing |= stale(path, text)
    assert sorted(missing) == [], "\n".join(map(str, sorted(missing)))


def test_the_prose_read_reaches_every_kind_of_file() -> None:
    read = {str(p.relative_to(ROOT)) for p in prose()}
    for expected in [
        "pyproject.toml",
        "daemon/pod_sweeper/store/sweep/pgstore.py",
        "tests/unit/test_pointers.py",
        "sql/claim.sql",
        "docs/design.md",
        "bench/README.md",
        "bench/rig.py",
        "tools/kube/build",
        "tools/lock",
        "deploy/deployment.yaml",
        "deploy/sbom.py",
    ]:
        assert expected in read, expected


def test_the_check_finds_what_is_missing() -> None:
    assert not path_exists("deploy/prometheusrule.yaml") and path_exists("deploy/monitoring/prometheusrule.yaml")
    assert path_exists("migrations/NNNN_name.sql") and not path_exists("migrations/NNNN_name.yaml")
    assert path_exists("store/sweep/cursor.py") and not path_exists("store/cursor.py")
    assert path_exists("pod_sweeper/sql") and path_exists("pod_sweeper/__init__.py")
    assert module_exists("tasks.rules.verdicts") and module_exists("core.waits.RULES")
    assert not module_exists("tasks.answers") and not module_exists("core.waits.NOTHING")
    assert module_exists("pod_sweeper.core.resources") and not module_exists("pod_sweeper.resources")
    assert file_name_resolves("tests/unit/test_pointers.py", "test_the_check_finds_what_is_missing")
    assert file_name_resolves("tasks/sweep/sender.py", "Sender._send")
    assert not file_name_resolves("tasks/sweep/sender.py", "Sender.send_it")


def test_each_kind_of_stale_pointer_fails() -> None:
    """The negative control, one planted pointer of each kind, each in the prose of the file it would
    sit in: a package-relative path, a dotted module in pyproject, a file's name, a module named in
    words but cited as another file."""
    pgstore = PACKAGE / "store/sweep/pgstore.py"
    assert stale(pgstore, "the claim index (store/cursor.py)") == {
        ("daemon/pod_sweeper/store/sweep/pgstore.py", "store/cursor.py")
    }
    assert stale(ROOT / "pyproject.toml", "where pod_sweeper.resources finds them") == {
        ("pyproject.toml", "pod_sweeper.resources")
    }
    assert stale(ROOT / "pyproject.toml", 'x = "pod_sweeper.cli.main:mian"') == {
        ("pyproject.toml", "pod_sweeper.cli.main:mian")
    }
    assert stale(ROOT / "bench/README.md", "see tests/unit/test_pointers.py::test_gone") == {
        ("bench/README.md", "tests/unit/test_pointers.py:test_gone")
    }
    gates = PACKAGE / "tasks/rules/gates.py"
    (wrong,) = stale(gates, "as the schema watch last read it (tasks/process/runner.py): a newer release")
    assert "the schema watch" in wrong[1]
    assert not stale(gates, "as the schema watch last read it (tasks/loops/schema_watch.py): a newer release")
