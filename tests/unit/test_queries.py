"""The SQL's one owner: every statement in ``sql/`` is loaded by some caller, and every caller passes
exactly the parameters its statement names; a module that writes a statement of its own is one
queries.py lists with its reason; the lock key baked into a migration is the one the code uses."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from pod_sweeper.store import queries

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "daemon" / "pod_sweeper"
_PARAM = re.compile(r"%\((\w+)\)s")
# The start of a statement in a string literal (an HTTP verb alone, 'DELETE', is not one).
_STATEMENT = re.compile(
    r"^\s*(?:SELECT\s|INSERT\s+INTO\s|UPDATE\s+\S+\s+SET\s|DELETE\s+FROM\s|SET\s+\w|SHOW\s|CREATE\s|ALTER\s"
    r"|DROP\s|GRANT\s|REVOKE\s|LISTEN\s|NOTIFY\s|WITH\s+\w+\s+AS\s|TRUNCATE\s|COPY\s|LOCK\s|DO\s)"
)
# Helpers of queries.py that build a statement's parameters, and the names they give.
_BUILDERS = {"notify_params": {"channel", "payload"}}


def statement_params(name: str) -> set[str]:
    text = (ROOT / "sql" / f"{name}.sql").read_text()
    code = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
    assert not re.search(r"(?<!%)%s\b", code), f"{name}.sql: use named %(param)s placeholders"
    return set(_PARAM.findall(code))


def _load_name(node: ast.expr) -> str | None:
    """NAME when ``node`` is ``queries.load("NAME")``."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "load"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "queries"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ):
        return str(node.args[0].value)
    return None


def _passed(node: ast.expr | None) -> set[str] | None:
    """The parameter names an argument passes; None when they cannot be read statically."""
    if node is None:
        return set()
    if isinstance(node, ast.Dict):
        if any(key is None or not isinstance(key, ast.Constant) for key in node.keys):
            return None  # ** unpacking
        return {str(key.value) for key in node.keys if isinstance(key, ast.Constant)}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _BUILDERS:
        return _BUILDERS[node.func.attr]
    return None


def calls() -> list[tuple[str, str, set[str] | None]]:
    """(where, statement, parameters passed) for every ``execute(queries.load(...), ...)`` in the package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "execute"
                and node.args
                and (name := _load_name(node.args[0])) is not None
            ):
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                found.append((where, name, _passed(node.args[1] if len(node.args) > 1 else None)))
    return found


def test_every_caller_passes_exactly_the_parameters_of_its_statement() -> None:
    checked = 0
    for where, name, passed in calls():
        if passed is None:
            continue
        assert passed == statement_params(name), f"{where}: {name}.sql wants {sorted(statement_params(name))}"
        checked += 1
    assert checked >= 30, checked  # the scan finds the callers (it is not silently empty)


def test_every_shipped_statement_has_a_caller() -> None:
    loaded = {name for _, name, _ in calls()}
    for path in PACKAGE.rglob("*.py"):
        loaded |= set(re.findall(r'queries\.load\(\s*"([\w/]+)"', path.read_text()))
    shipped = {p.stem for p in (ROOT / "sql").glob("*.sql")}
    assert shipped - loaded == set(), "statements in sql/ that nothing runs"


def test_every_migration_that_takes_the_wakeup_lock_takes_the_codes_key() -> None:
    """(The definition the database runs is checked in the migration tier:
    ``test_the_live_enqueue_takes_the_wakeup_lock_the_sweeper_arms_with``.)"""
    found = {
        path.name: set(re.findall(r"pg_advisory_xact_lock_shared\((\d+)\)", path.read_text()))
        for path in sorted((ROOT / "migrations").glob("*.sql"))
    }
    assert {name for name, keys in found.items() if keys} >= {"0007_quiet_wakeups.sql", "0009_clusters.sql"}
    assert set().union(*found.values()) == {str(int(queries.Lock.WAKEUP))}
    assert len(set(queries.Lock)) == len(queries.Lock.__members__)  # no two locks share a key


def test_no_statement_holds_a_session_lock_or_sets_a_session_setting() -> None:
    """Behind a transaction pooler a session-level lock stays held by a server connection no client
    owns, and a session setting leaks to the next client: every lock of ours is transaction-scoped,
    and the one session setting is the direct connection's (``store.db.configure``). The pooler tier
    runs some paths through PgBouncer; this holds for every path, the reconciliation pass included."""
    session_lock = re.compile(r"pg_(try_)?advisory_lock(_shared)?\s*\(|pg_advisory_unlock", re.IGNORECASE)
    session_config = re.compile(r"set_config\([^)]*,\s*(false|%s)\)", re.IGNORECASE)
    for path in [*(ROOT / "sql").rglob("*.sql"), *(ROOT / "migrations").glob("*.sql"), *PACKAGE.rglob("*.py")]:
        text = path.read_text()
        where = path.relative_to(ROOT)
        assert not session_lock.search(text), f"{where}: a session-level advisory lock"
        if path.name != "db.py":  # store.db.configure: the direct connection's own session
            assert not session_config.search(text), f"{where}: a session setting"
        if path.suffix == ".sql":  # a statement of its own that starts with SET (not UPDATE ... SET)
            code = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
            statements = [st.strip().upper() for st in code.split(";")]
            assert not [st for st in statements if st.startswith(("SET ", "RESET "))], f"{where}: a session SET"


def test_every_statement_on_a_clusters_rows_names_the_cluster_or_says_why_it_spans_them_all() -> None:
    """A replica acts only on its own cluster's rows: a statement that reads or writes a cluster-owned
    table takes ``%(cluster)s``, or is declared in ``queries.SPANS_CLUSTERS`` with its reason."""
    owned = re.compile(r"\bpod_sweeper\.(" + "|".join(queries.CLUSTER_OWNED) + r")\b")
    touching, undeclared = set(), []
    for path in sorted((ROOT / "sql").rglob("*.sql")):
        name = path.relative_to(ROOT / "sql").with_suffix("").as_posix()
        code = "\n".join(line.split("--", 1)[0] for line in path.read_text().splitlines())
        if not owned.search(code):
            continue
        touching.add(name)
        if "cluster" not in _PARAM.findall(code) and name not in queries.SPANS_CLUSTERS:
            undeclared.append(name)
    assert undeclared == [], "statements on a cluster's rows that neither name the cluster nor say why not"
    assert set(queries.SPANS_CLUSTERS) <= touching, "declarations of statements that touch no cluster's rows"
    assert all(len(why) > 20 for why in queries.SPANS_CLUSTERS.values())
    assert {"confirm_claim", "reopen_dry_run", "record_results", "reconcile_forget"} <= touching - set(
        queries.SPANS_CLUSTERS
    )


def statements_in(path: Path) -> list[str]:
    """The statements a module writes itself: its string literals (f-strings' fixed parts joined) that
    begin as SQL does, docstrings aside."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(str(v.value) if isinstance(v, ast.Constant) else "{}" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            text = node.value
        else:
            continue
        if _STATEMENT.match(text):
            found.append(text)
    return found


def test_every_module_that_writes_its_own_statement_is_listed_with_its_reason() -> None:
    writers = {str(path.relative_to(PACKAGE)) for path in sorted(PACKAGE.rglob("*.py")) if statements_in(path)}
    listed = set(queries.STATEMENTS_ELSEWHERE)
    assert writers == listed, (
        f"write these in sql/ or list them in queries.STATEMENTS_ELSEWHERE: {sorted(writers - listed)};"
        f" listed but writing none: {sorted(listed - writers)}"
    )
    assert all(reason.strip() for reason in queries.STATEMENTS_ELSEWHERE.values())


def test_the_statement_finder_tells_sql_from_an_http_verb() -> None:
    assert statements_in(PACKAGE / "store/db.py") and not statements_in(PACKAGE / "kube/api.py")
    assert _STATEMENT.match("SELECT 1") and _STATEMENT.match("UPDATE t SET a = 1")
    assert not _STATEMENT.match("DELETE") and not _STATEMENT.match("SELECTED rows")
