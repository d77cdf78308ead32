"""An on-call's end of a large host transaction the breaker's rule holds (migration 0020), through the
real CLI on PostgreSQL: a preview that changes nothing, a discard that ends its pending rows with no
request and its audit row in the same transaction, a release that lets them go, each once; an id that
names no held transaction is one line and exit 2."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from helpers import claim, claim_params, cli, run, settings_for
from pod_sweeper.store import db, queries
from pod_sweeper.store.rows import LargeTransaction


def _held(pg: psycopg.Connection[Any], rows: int) -> int:
    """``rows`` open rows of one host transaction (one INSERT: they share its start), kept back by the
    statement a replica's claim runs when its transaction rule finds it, beside another row."""
    pg.execute(
        "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid,"
        " reason) SELECT 1, 's' || g, 1, 'workspace', 'p' || g, gen_random_uuid(), 'retired'"
        " FROM generate_series(1, %s) g",
        (rows,),
    )
    pg.execute(
        "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name,"
        " pod_uid, reason) VALUES (1, 'other', 1, 'tenant', 'other', gen_random_uuid(), 'retired')"
    )
    at = pg.execute("SELECT enqueued_at FROM pod_sweeper.outbox WHERE sandbox_id = 's1'").fetchone()
    assert at is not None
    kept = pg.execute(queries.load("large_transaction_keep"), _keep(at["enqueued_at"], rows)).fetchone()
    assert kept is not None
    return int(kept["id"])


def _keep(at: Any, rows: int) -> dict[str, Any]:
    return {"cluster": "default", "at": at, "rows": rows, "reason": "one host transaction retired 12", "who": "r0"}


def _claim(conn: psycopg.Connection[Any]) -> list[str]:
    """What a replica's claim takes now (the real statement), by sandbox id."""
    params = claim_params(owner="r1", batch=100)
    return sorted(r["sandbox_id"] for r in conn.execute(queries.load("claim"), params).fetchall())


def test_a_claim_never_takes_a_kept_back_row_whenever_it_began(pg: psycopg.Connection[Any], db_url: str) -> None:
    """The keep marks the rows themselves (their due time): a claim running while the keep is not yet
    committed skips them (locked), and one after it finds them not due; only the other row goes."""
    pg.execute(
        "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid,"
        " reason) SELECT 1, 's' || g, 1, 'workspace', 'p' || g, gen_random_uuid(), 'retired'"
        " FROM generate_series(1, 12) g"
    )
    at = pg.execute("SELECT enqueued_at FROM pod_sweeper.outbox WHERE sandbox_id = 's1'").fetchone()
    assert at is not None
    with (
        psycopg.connect(db_url, row_factory=dict_row) as keeper,
        psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as claimer,
    ):
        keeper.execute(queries.load("large_transaction_keep"), _keep(at["enqueued_at"], 12))  # not committed
        pg.execute(
            "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name,"
            " pod_uid, reason) VALUES (1, 'other', 1, 'tenant', 'other', gen_random_uuid(), 'retired')"
        )
        assert _claim(claimer) == ["other"]  # the transaction's rows are locked by the keep: skipped
        keeper.commit()
        claimer.execute(
            "UPDATE pod_sweeper.outbox SET status = 'pending', next_attempt_at = now() WHERE sandbox_id = 'other'"
        )
        assert _claim(claimer) == ["other"]  # committed: not due, whatever the claim's snapshot saw
    due = pg.execute(
        "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE next_attempt_at = pod_sweeper.kept_back_until()"
    ).fetchone()
    assert due["n"] == 12


def test_a_discard_is_previewed_then_ends_the_transactions_rows_alone_once(
    pg: psycopg.Connection[Any], db_url: str
) -> None:
    held = _held(pg, 12)
    preview = cli("discard-transaction", str(held), "--reason", "a bad script", url=db_url)
    assert preview.returncode == 0, preview.stderr
    lines = preview.stdout.splitlines()
    assert lines[0].startswith(f"large transaction {held} (cluster default): begun ") and "12 open row(s)" in lines[0]
    assert (
        len([line for line in lines if line.startswith("  workspace/p")]) == 10 and "... and 2 more" in preview.stdout
    )
    assert lines[-1] == "nothing changed; run again with --yes to discard its rows"
    done = cli("discard-transaction", str(held), "--reason", "a bad script", "--yes", "--actor", "ana", url=db_url)
    assert (
        done.returncode == 0
        and done.stdout.strip() == f"large transaction {held}: 12 row(s) discarded, no request sent"
    )
    by = {r["sandbox_id"]: r["outcome"] for r in pg.execute("SELECT sandbox_id, outcome FROM pod_sweeper.outbox")}
    assert by.pop("other") is None and set(by.values()) == {"discarded"}  # the other row is untouched
    ended = pg.execute("SELECT ended, ended_by FROM pod_sweeper.large_transactions").fetchone()
    assert (ended["ended"], ended["ended_by"]) == ("discarded", "ana")
    trail = pg.execute(
        "SELECT actor, command, affected, arguments FROM pod_sweeper.audit WHERE command = 'discard-transaction'"
    ).fetchall()
    assert [(t["actor"], t["affected"], t["arguments"]["reason"]) for t in trail] == [("ana", 12, "a bad script")]
    again = cli("release-transaction", str(held), "--yes", url=db_url)  # ended: nothing held by that id
    assert again.returncode == 2 and again.stderr.count("\n") == 1, again.stderr
    assert "kept back now: none" in again.stderr


def test_a_release_lets_the_rows_go_and_an_unknown_id_is_one_line(pg: psycopg.Connection[Any], db_url: str) -> None:
    held = _held(pg, 3)
    unknown = cli("release-transaction", "999", url=db_url)
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1 and f"kept back now: {held}" in unknown.stderr
    released = cli("release-transaction", str(held), "--yes", url=db_url)
    assert released.returncode == 0, released.stderr
    assert released.stdout.strip() == f"large transaction {held} released: its 3 open row(s) are swept from now on"
    kept = pg.execute(
        "SELECT count(*) AS n FROM pod_sweeper.outbox AS o, pod_sweeper.keeping(o.cluster, o.pod_namespace,"
        " o.pod_name, o.pod_uid, o.enqueued_at) AS k"
    ).fetchone()
    assert kept["n"] == 0  # nothing keeps them back any more


def test_a_claim_judges_the_transaction_it_takes_one_row_of(pg: psycopg.Connection[Any], db_url: str) -> None:
    """A claim takes rows in due order, so a full batch may end one row into a host transaction: that row
    is judged with the rest still pending, and the transaction (exactly the threshold) is found before
    any of it is sent. Judged only at two rows of the claim, the row went out and the rest, one short of
    the threshold, were never found (the simulator's seed 1230; a pause of the rest's namespace, seed
    2638, is the same to the rule: it counts every pending row of the transaction)."""
    insert = (
        "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid,"
        " reason) SELECT 1, %s || g, 1, 'workspace', %s || g, gen_random_uuid(), 'retired'"
        " FROM generate_series(1, %s) g"
    )
    for early in ("a", "b"):  # two retires of their own, due first
        pg.execute(insert, (early, f"pod-{early}", 1))
    pg.execute(insert, ("t", "pod-t", 5))  # one host transaction of exactly the threshold
    _found_by_the_claim(pg, db_url, batch=3)


def test_a_claim_judges_a_transaction_whose_other_rows_a_pause_keeps(pg: psycopg.Connection[Any], db_url: str) -> None:
    """One row of a host transaction in a namespace that sweeps, the rest in one an on-call paused: the
    claim takes that one row alone, far from its batch's end, and the transaction is judged all the same
    (its paused rows are pending) and found before the row is sent (the simulator's seed 2638)."""
    pg.execute(
        "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid,"
        " reason) SELECT 1, 't' || g, 1, CASE WHEN g = 1 THEN 'open' ELSE 'paused' END, 'pod-t' || g,"
        " gen_random_uuid(), 'retired' FROM generate_series(1, 5) g"
    )
    paused = cli("pause", "--namespace", "paused", "--reason", "a look first", "--actor", "t", url=db_url)
    assert paused.returncode == 0, paused.stderr
    _found_by_the_claim(pg, db_url, batch=100)


def _found_by_the_claim(pg: psycopg.Connection[Any], db_url: str, *, batch: int) -> None:
    """A claim of ``batch`` with a threshold of five finds the transaction of rows t1-t5 and is rolled back
    with it: nothing taken, none sent."""

    async def claiming() -> None:
        async with db.connection(settings_for(db_url)) as conn:
            await claim(conn, batch=batch, transaction_rows=5)

    with pytest.raises(LargeTransaction) as found:
        run(claiming())
    at = pg.execute("SELECT enqueued_at FROM pod_sweeper.outbox WHERE sandbox_id = 't1'").fetchone()
    assert at is not None and (found.value.size, found.value.at) == (5, at["enqueued_at"])
    claimed = pg.execute("SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status <> 'pending'").fetchone()
    assert claimed is not None and claimed["n"] == 0


def test_a_claim_counts_each_transaction_it_takes_rows_of_once(pg: psycopg.Connection[Any]) -> None:
    """The first look counts a host transaction's pending rows once per transaction the claim takes rows
    of, not once per row: a claim of 100 rows of one 300-row transaction (under a threshold of 500, so
    nothing is kept) reads that transaction's entries once. Counted per row, it read them 100 times:
    30,000 index entries for one claim of a host that retires in batches."""
    pg.execute(
        "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid,"
        " reason) SELECT 1, 's' || g, 1, 'workspace', 'p' || g, gen_random_uuid(), 'retired'"
        " FROM generate_series(1, 300) g"
    )
    params = claim_params(owner="r1", batch=100, transaction_rows=500)
    explain = sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) {}").format(queries.load("claim"))
    with pg.transaction(force_rollback=True):  # EXPLAIN ANALYZE runs the claim: the rows stay pending
        plan = pg.execute(explain, params).fetchone()
    assert plan is not None
    looks = [node for node in _nodes(plan["QUERY PLAN"][0]["Plan"]) if node.get("Alias") == "s"]
    assert looks, "the claim has no first look on the outbox"
    assert sum(node["Actual Loops"] for node in looks) == 1, json.dumps(plan["QUERY PLAN"], indent=1)
    assert sum(node["Actual Rows"] for node in looks) == 300


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)
