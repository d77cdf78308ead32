"""``attach``/``detach`` against real tables: column mappings, tables that do not fit, hostile names."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from psycopg.rows import dict_row

from helpers import attach_table, cli, create_executions, outbox, run
from pod_sweeper.core.errors import AttachError
from pod_sweeper.core.settings import Settings
from pod_sweeper.store import db
from pod_sweeper.store.admin import attach
from pod_sweeper.store.sweep import recheck

pytestmark = pytest.mark.versions

UID = uuid.UUID("33333333-3333-4333-8333-333333333333")


def triggers(conn: psycopg.Connection[Any]) -> list[str]:
    """The triggers on the host's tables (pod_sweeper's own tables have theirs: migration 0012)."""
    return [
        r["tgname"]
        for r in conn.execute(
            "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal"
            " AND tgrelid::regclass::text NOT LIKE 'pod_sweeper.%' ORDER BY tgname"
        ).fetchall()
    ]


def attachments(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return list(conn.execute("SELECT * FROM pod_sweeper.attachments ORDER BY id").fetchall())


def test_mapping_to_other_column_names(pg: psycopg.Connection[Any], db_url: str) -> None:
    pg.execute("CREATE SCHEMA app")
    pg.execute(
        "CREATE TABLE app.runs (sbx uuid, gen integer, ns varchar(63), name text, puid text, live boolean,"
        " PRIMARY KEY (sbx, gen))"
    )
    run(
        attach_table(
            db_url,
            "app.runs",
            ["sandbox_id=sbx", "generation=gen", "pod_namespace=ns", "pod_name=name", "pod_uid=puid", "active=live"],
        )
    )
    sbx = uuid.uuid4()
    pg.execute("INSERT INTO app.runs VALUES (%s, 7, 'ns', 'p', %s, true)", (sbx, str(UID)))
    pg.execute("UPDATE app.runs SET live = false")
    [row] = outbox(pg)
    assert (row["sandbox_id"], row["generation"], row["pod_uid"]) == (str(sbx), 7, UID)
    assert attachments(pg)[0]["column_map"]["active"] == "live"


def rejects(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return list(conn.execute("SELECT * FROM pod_sweeper.rejects ORDER BY id").fetchall())


NULLABLE_TEXT = (
    "CREATE TABLE t (sandbox_id text, generation int, pod_namespace text, pod_name text, pod_uid text, active bool)"
)


@pytest.mark.parametrize(
    ("value", "problem"),
    [("not-a-uuid", "pod_uid is not a UID"), ("", "pod_uid is empty"), ("{" + str(UID), "pod_uid is not a UID")],
)
def test_a_malformed_text_uid_is_a_reject_not_a_failed_retire(
    pg: psycopg.Connection[Any], db_url: str, value: str, problem: str
) -> None:
    pg.execute(NULLABLE_TEXT)
    run(attach_table(db_url, "public.t"))
    pg.execute("INSERT INTO t VALUES ('s', 1, 'ns', 'p', %s, true)", (value,))
    pg.execute("UPDATE t SET active = false")  # commits: the host's write never fails
    assert outbox(pg) == []
    [reject] = rejects(pg)
    assert (reject["sandbox_id"], reject["generation"], reject["pod_uid"], reject["problem"]) == (
        "s",
        1,
        value,
        problem,
    )
    assert reject["reason"] == "retired"
    assert pg.execute("SELECT rejected FROM pod_sweeper.lag").fetchone()["rejected"] == 1


@pytest.mark.parametrize("value", [str(UID), str(UID).upper(), "{" + str(UID) + "}", str(UID).replace("-", "")])
def test_every_form_postgres_reads_as_a_uid_enqueues(pg: psycopg.Connection[Any], db_url: str, value: str) -> None:
    pg.execute(NULLABLE_TEXT)
    run(attach_table(db_url, "public.t"))
    pg.execute("INSERT INTO t VALUES ('s', 1, 'ns', 'p', %s, false)", (value,))
    assert [r["pod_uid"] for r in outbox(pg)] == [UID] and rejects(pg) == []


@pytest.mark.parametrize("uid_type", ["uuid", "text"])
@pytest.mark.parametrize(
    ("column", "problem"),
    [
        ("pod_namespace", "pod_namespace is NULL"),
        ("pod_name", "pod_name is NULL"),
        ("sandbox_id", "sandbox_id is NULL"),
        ("generation", "generation is NULL"),
    ],
)
def test_a_null_field_is_a_reject_not_a_failed_retire(
    pg: psycopg.Connection[Any], db_url: str, uid_type: str, column: str, problem: str
) -> None:
    pg.execute(NULLABLE_TEXT.replace("pod_uid text", f"pod_uid {uid_type}"))
    run(attach_table(db_url, "public.t"))
    pg.execute("INSERT INTO t VALUES ('s', 1, 'ns', 'p', %s, true)", (str(UID),))
    pg.execute(psycopg.sql.SQL("UPDATE t SET active = false, {} = NULL").format(psycopg.sql.Identifier(column)))
    assert outbox(pg) == []
    [reject] = rejects(pg)
    assert reject["problem"] == problem and reject["pod_uid"] == str(UID)
    pg.execute("DELETE FROM t")  # a deleted row that still names the UID: rejected again, never an error
    assert [r["reason"] for r in rejects(pg)] == ["retired", "row_deleted"]


def test_attach_warns_about_the_nullable_columns_it_maps(pg: psycopg.Connection[Any], db_url: str) -> None:
    pg.execute(NULLABLE_TEXT)
    result = cli("attach", "--table", "public.t", url=db_url)
    assert result.returncode == 0, result.stderr
    [warning] = result.stderr.strip().splitlines()
    assert warning.startswith("warning: sandbox_id (sandbox_id), generation (generation), pod_namespace")
    assert "pod_sweeper.rejects" in warning
    create_executions(pg, "public.reference")  # the reference table: NOT NULL where it matters
    assert cli("attach", "--table", "public.reference", url=db_url).stderr == ""


_hostile = st.one_of(
    st.none(),
    st.just(""),
    st.sampled_from([".", "..", "x/../victim", "Upper", "a" * 10_000, "evil\x1b[31mRED\x1b[0m\nnewline", "ns;--", "'"]),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40),
)


@example(sandbox=None, generation=None, namespace=None, name=None, uid="not-a-uid")
@example(sandbox="s", generation=1, namespace="ns", name="p", uid=str(UID))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sandbox=_hostile,
    generation=st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)),
    namespace=_hostile,
    name=_hostile,
    uid=st.one_of(_hostile, st.uuids().map(str)),
)
def test_no_value_in_a_nullable_text_table_fails_the_hosts_write_or_goes_unseen(
    pg: psycopg.Connection[Any],
    db_url: str,
    sandbox: str | None,
    generation: int | None,
    namespace: str | None,
    name: str | None,
    uid: str | None,
) -> None:
    pg.execute("DROP TABLE IF EXISTS t")
    pg.execute(NULLABLE_TEXT)
    pg.execute("TRUNCATE pod_sweeper.outbox, pod_sweeper.attempts, pod_sweeper.rejects")
    run(attach_table(db_url, "public.t"))
    pg.execute("INSERT INTO t VALUES (%s, %s, %s, %s, %s, true)", (sandbox, generation, namespace, name, uid))
    pg.execute("UPDATE t SET active = false")  # raises if the trigger failed the write
    enqueued, rejected = outbox(pg), rejects(pg)
    if uid is None:
        assert (enqueued, rejected) == ([], [])  # no pod recorded yet: nothing to delete, nothing wrong
    else:
        assert len(enqueued) + len(rejected) == 1  # exactly one trace, never silence
        if enqueued:
            row = enqueued[0]
            assert (row["sandbox_id"], row["generation"], row["pod_namespace"], row["pod_name"]) == (
                sandbox,
                generation,
                namespace,
                name,
            )
        else:
            assert rejected[0]["problem"] and rejected[0]["pod_uid"] == uid[:1000]


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        (
            "CREATE TABLE t (sandbox_id text, generation int, pod_namespace text, pod_name text, active bool)",
            "no column 'pod_uid'",
        ),
        (
            "CREATE TABLE t (sandbox_id text, generation text, pod_namespace text, pod_name text, pod_uid uuid,"
            " active bool)",
            "'generation' of public.t (role generation) is of type text",
        ),
        (
            "CREATE TABLE t (sandbox_id text, generation int, pod_namespace text, pod_name text, pod_uid uuid,"
            " active int)",
            "(role active) is of type int4",
        ),
        ("CREATE VIEW t AS SELECT 1 AS x", "public.t is not a table"),
    ],
)
def test_a_table_that_does_not_fit_changes_nothing(
    pg: psycopg.Connection[Any], db_url: str, ddl: str, message: str
) -> None:
    pg.execute(ddl)  # type: ignore[arg-type]
    with pytest.raises(AttachError, match=message.replace("(", r"\(").replace(")", r"\)")):
        run(attach_table(db_url, "public.t"))
    assert triggers(pg) == []
    assert attachments(pg) == []


def test_missing_table(db_url: str) -> None:
    with pytest.raises(AttachError, match=r"table public\.nope does not exist"):
        run(attach_table(db_url, "public.nope"))


def test_hostile_identifiers_are_quoted_not_executed(pg: psycopg.Connection[Any], db_url: str) -> None:
    pg.execute('CREATE SCHEMA "s; drop schema public"')
    pg.execute(
        'CREATE TABLE "s; drop schema public"."t""x$body$" ("id; --" text, "g""" bigint, "n$$" text,'
        ' "p)" text, "u\'" uuid, "a$body$" bool)'
    )
    columns = ["sandbox_id=id; --", 'generation=g"', "pod_namespace=n$$", "pod_name=p)", "pod_uid=u'", "active=a$body$"]
    run(attach_table(db_url, '"s; drop schema public"."t""x$body$"', columns))
    pg.execute("INSERT INTO \"s; drop schema public\".\"t\"\"x$body$\" VALUES ('s', 1, 'ns', 'p', %s, false)", (UID,))
    assert [r["pod_uid"] for r in outbox(pg)] == [UID]
    assert pg.execute("SELECT to_regnamespace('public') IS NOT NULL AS ok").fetchone()["ok"]


def test_reattach_replaces_and_detach_removes(pg: psycopg.Connection[Any], db_url: str) -> None:
    create_executions(pg)
    first = run(attach_table(db_url))
    assert run(attach_table(db_url)) == first
    assert triggers(pg) == ["pod_sweeper_enqueue_del", "pod_sweeper_enqueue_ins", "pod_sweeper_enqueue_upd"]

    async def do_detach() -> bool:
        async with db.connection(Settings(database_url=db_url, http_port=0)) as conn:
            return await attach.detach(conn, attach.parse_table("public.executions"))

    assert run(do_detach()) is True
    assert run(do_detach()) is False
    assert triggers(pg) == []
    pg.execute(
        "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid, active)"
        " VALUES ('s', 1, 'ns', 'p', %s, false)",
        (UID,),
    )
    assert outbox(pg) == []
    assert attachments(pg)[0]["detached_at"] is not None


def test_two_attachments_record_their_source(pg: psycopg.Connection[Any], db_url: str) -> None:
    create_executions(pg, "public.executions")
    create_executions(pg, "public.executions_archive")
    ids = [run(attach_table(db_url, t)) for t in ("public.executions", "public.executions_archive")]
    for i, table in enumerate(("executions", "executions_archive")):
        pg.execute(
            f"INSERT INTO {table} (sandbox_id, generation, pod_namespace, pod_name, pod_uid, active)"  # noqa: S608
            " VALUES ('s', 1, 'ns', 'p', %s, false)",
            (uuid.UUID(int=i + 1),),
        )
    assert [r["attachment_id"] for r in outbox(pg)] == ids


_names = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=30)


@example(table="%", columns=["%s", "1", "%%", "3", "{}", 'a"b'])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(table=_names, columns=st.lists(_names, min_size=6, max_size=6, unique=True))
def test_any_identifiers_attach_and_enqueue(
    pg: psycopg.Connection[Any], db_url: str, table: str, columns: list[str]
) -> None:
    # PostgreSQL truncates names to 63 bytes; a longer name is another name (attach then says the
    # column is missing, which test_a_table_that_does_not_fit covers).
    assume(all(len(n.encode()) <= 63 for n in [table, *columns]) and len(set(columns)) == 6)
    ident = psycopg.sql.Identifier
    pg.execute(psycopg.sql.SQL("DROP TABLE IF EXISTS {}").format(ident("public", table)))
    types = ["text", "bigint", "text", "text", "uuid", "boolean"]
    pg.execute(
        psycopg.sql.SQL("CREATE TABLE {} ({})").format(
            ident("public", table),
            psycopg.sql.SQL(", ").join(
                psycopg.sql.SQL("{} {}").format(ident(c), psycopg.sql.SQL(t))
                for c, t in zip(columns, types, strict=True)
            ),
        )
    )
    roles = ["sandbox_id", "generation", "pod_namespace", "pod_name", "pod_uid", "active"]
    quoted = '"public"."' + table.replace('"', '""') + '"'
    run(attach_table(db_url, quoted, [f"{r}={c}" for r, c in zip(roles, columns, strict=True)]))
    uid = uuid.uuid4()
    pg.execute(
        psycopg.sql.SQL("INSERT INTO {} VALUES ('s', 1, 'ns', 'p', {}, false)").format(
            ident("public", table), psycopg.sql.Literal(uid)
        )
    )
    row = next(r for r in outbox(pg) if r["pod_uid"] == uid)
    # The daemon's re-check composes the same names into a statement with parameters (where a '%' in a
    # name once broke it): the row is retired, so it comes back neither active nor unknown.
    verdict = run(_recheck(db_url, row))
    assert (verdict.active, verdict.unknown) == (set(), {})
    pg.execute(psycopg.sql.SQL("UPDATE {} SET {} = true").format(ident("public", table), ident(columns[5])))
    assert run(_recheck(db_url, row)).active == {row["id"]}


async def _recheck(db_url: str, row: dict[str, Any]) -> recheck.Verdict:
    async with await psycopg.AsyncConnection.connect(db_url, row_factory=dict_row) as conn:
        return await recheck.recheck(conn, [SimpleNamespace(**row)], await recheck.load_attachments(conn))
