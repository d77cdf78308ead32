"""An on-call's controls on real PostgreSQL with two replicas: a pause stops both replicas' claims in
its scope the moment the command returns, and nowhere else; a hold keeps one pod's rows unsent and
uncharged through a restart; each command writes its audit row in its own transaction, so the two
commit together or not at all; the runtime role can add to the trail but never change or delete it."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from helpers import DaemonThread, add_execution, cli, daemon_settings, retire, row_for, run, settings_for, wait_until
from pod_sweeper.store import db
from pod_sweeper.store.schema import roles

DONE = "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status = 'done'"


def deletes_in(kube: Any, namespace: str) -> int:
    return sum(1 for d in kube.deletes() if f"/namespaces/{namespace}/" in d.path)


def audit(pg: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return list(pg.execute("SELECT * FROM pod_sweeper.audit ORDER BY id").fetchall())


def test_a_pause_stops_both_replicas_claims_in_its_scope_and_nowhere_else(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    for i in range(5):
        add_execution(execs, kube, f"a{i}", namespace="alpha")
        add_execution(execs, kube, f"b{i}", namespace="beta")
    settings = daemon_settings(db_url, kube, poll_interval=0.5)
    with DaemonThread(settings) as first, DaemonThread(settings.model_copy(update={"replica_id": "second"})):
        paused = cli(
            "pause", "--namespace", "alpha", "--for", "10m", "--reason", "incident 42", "--actor", "ana", url=db_url
        )
        assert paused.returncode == 0, paused.stderr
        assert paused.stdout.startswith("paused cluster default, namespace alpha until ")
        for i in range(5):  # retired only after the command returned: none of alpha's may be sent
            retire(execs, f"a{i}")
            retire(execs, f"b{i}")
        wait_until(lambda: execs.execute(DONE).fetchone()["n"] == 5, what="beta's five rows done")
        assert deletes_in(kube, "alpha") == 0
        alpha = [row_for(execs, f"a{i}") for i in range(5)]
        assert all(r is not None and (r["status"], r["attempts"]) == ("pending", 0) for r in alpha), alpha
        wait_until(
            lambda: (
                first.daemon.metrics.value("pod_sweeper_paused_seconds", pod_cluster="default", pod_namespace="alpha")
                > 0
            ),
            timeout=15,
            what="the pause's gauge (refreshed every 5 s)",
        )
        explained = cli("explain", "alpha/pod-a0-1", url=db_url).stdout
        assert "paused (namespace alpha of cluster default) by ana until" in explained
        shown = cli("status", url=db_url)
        assert "PAUSED (cluster default, namespace alpha)" in shown.stdout and "incident 42" in shown.stdout

        unpaused = cli("unpause", "--namespace", "alpha", "--actor", "ana", url=db_url)
        assert (unpaused.returncode, unpaused.stdout.strip()) == (
            0,
            "unpaused cluster default, namespace alpha: claims resume",
        )
        wait_until(lambda: execs.execute(DONE).fetchone()["n"] == 10, what="alpha's rows done after the unpause")
        wait_until(
            lambda: (
                first.daemon.metrics.registry.get_sample_value(
                    "pod_sweeper_paused_seconds", {"pod_cluster": "default", "pod_namespace": "alpha"}
                )
                is None
            ),
            timeout=15,
            what="the ended pause gone from the gauge",
        )
    trail = [(r["actor"], r["command"], r["scope"], r["affected"]) for r in audit(execs)]
    assert trail == [
        ("ana", "pause", "cluster default, namespace alpha", 1),
        ("ana", "unpause", "cluster default, namespace alpha", 1),
    ]


def test_a_whole_cluster_pause_ends_by_itself(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    add_execution(execs, kube, "x")
    paused = cli("pause", "--for", "2s", "--reason", "a short one", url=db_url)
    assert paused.returncode == 0 and "paused cluster default until" in paused.stdout
    retire(execs, "x")
    with DaemonThread(daemon_settings(db_url, kube)):
        # The claimer sleeps until the pause ends (its end is a due time), not until its 30 s poll.
        wait_until(
            lambda: row_for(execs, "x")["status"] == "done", timeout=10, what="the row done once the pause ended"
        )


def test_a_hold_keeps_one_pods_rows_unsent_and_uncharged_through_a_restart(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    uid = add_execution(execs, kube, "kept")
    add_execution(execs, kube, "other")
    held = cli("hold", "sandboxes/pod-kept-1", "--uid", uid, "--for", "1h", "--reason", "forensics", url=db_url)
    assert held.returncode == 0 and held.stdout.startswith("holding sandboxes/pod-kept-1 in cluster default until")
    retire(execs, "kept")
    retire(execs, "other")
    settings = daemon_settings(db_url, kube)
    for _ in range(2):  # a restart changes nothing: the hold is in the database
        with DaemonThread(settings):
            wait_until(lambda: row_for(execs, "other")["status"] == "done", what="the other pod's row done")
        kept = row_for(execs, "kept")
        assert kept is not None and (kept["status"], kept["attempts"]) == ("pending", 0)
        assert not [d for d in kube.deletes() if d.path.endswith("/pods/pod-kept-1")]
    assert "HELD: pod sandboxes/pod-kept-1" in cli("status", url=db_url).stdout
    explained = cli("explain", "sandboxes/pod-kept-1", url=db_url).stdout
    assert "forensics; not sent (nor charged) until then or `pod-sweeper release sandboxes/pod-kept-1" in explained
    released = cli("release", "sandboxes/pod-kept-1", url=db_url)
    assert (released.returncode, released.stdout.strip()) == (0, "released sandboxes/pod-kept-1: its rows go on")
    with DaemonThread(settings):
        wait_until(lambda: row_for(execs, "kept")["status"] == "done", what="the held row done once released")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("pause", "--for", "3d", "--reason", "x"), "argument --for: '3d': at most 24 h (longer: --until)"),
        (("pause", "--for", "soon", "--reason", "x"), "argument --for: 'soon': expected a number and a unit"),
        (("pause", "--for", "0.5s", "--reason", "x"), "argument --for: '0.5s': at least 1 s"),
        (
            ("discard", "--namespace", "x", "--reason", "r", "--older-than", "forever"),
            "argument --older-than: 'forever'",
        ),
        (("discard", "--namespace", "x", "--status", "pending", "--reason", "r", "--limit", "-1"), "argument --limit"),
        (("pause", "--until", "2001-01-01T00:00Z", "--reason", "x"), "that time has passed"),
        (("pause", "--namespace", "Bad_NS", "--reason", "x"), "is not a valid Kubernetes namespace"),
        (("pause", "--reason", " "), "--reason must say why"),
        (("pause",), "the following arguments are required: --reason"),
        (("hold", "nopod", "--reason", "x"), "'nopod': expected NAMESPACE/POD"),
        (("hold", "ns/p", "--uid", "nope", "--reason", "x"), "--uid 'nope' is not a UUID"),
    ],
)
def test_a_bad_argument_is_one_line_and_exit_2_and_changes_nothing(
    pg: psycopg.Connection[Any], db_url: str, args: tuple[str, ...], says: str
) -> None:
    result = cli(*args, url=db_url)
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert says in line
    assert pg.execute("SELECT count(*) AS n FROM pod_sweeper.pauses").fetchone()["n"] == 0
    assert audit(pg) == []


@pytest.fixture
def runtime(pg: psycopg.Connection[Any], db_url: str) -> Any:
    """A runtime role made by `grant` (its connection string), dropped afterwards."""
    name = f"runtime_{uuid.uuid4().hex[:8]}"

    async def grant() -> None:
        async with db.connection(settings_for(db_url)) as conn:
            for statement in await roles.runtime_grants(
                conn, name, create=True, verifier=roles.password_verifier(conn, name, "pw")
            ):
                await conn.execute(statement)

    run(grant())
    yield name, make_conninfo(db_url, user=name, password="pw")
    pg.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(name)))
    pg.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def test_the_runtime_role_adds_to_the_trail_but_never_changes_or_deletes_it(
    pg: psycopg.Connection[Any], runtime: tuple[str, str]
) -> None:
    role, url = runtime
    paused = cli("pause", "--reason", "as the runtime role", "--actor", "bo", url=url)
    assert paused.returncode == 0, paused.stderr
    [row] = audit(pg)
    assert (row["db_role"], row["actor"], row["command"]) == (role, "bo", "pause")
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in ("UPDATE pod_sweeper.audit SET actor = 'nobody'", "DELETE FROM pod_sweeper.audit"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
        # Retention runs as the schema's owner and keeps 30 days whatever it is asked.
        assert conn.execute("SELECT pod_sweeper.prune_audit('0 seconds')").fetchone() == (0,)
    pg.execute("UPDATE pod_sweeper.audit SET at = now() - interval '31 days'")
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT pod_sweeper.prune_audit('0 seconds')").fetchone() == (1,)


def test_an_action_and_its_audit_row_commit_together_or_not_at_all(
    execs: psycopg.Connection[Any], pg: psycopg.Connection[Any], runtime: tuple[str, str], kube: Any
) -> None:
    role, url = runtime
    add_execution(execs, kube, "d")
    retire(execs, "d")
    execs.execute("UPDATE pod_sweeper.outbox SET status = 'dead', last_error = 'gave up'")
    # Without the right to write the trail, the retry itself must not happen.
    pg.execute(sql.SQL("REVOKE INSERT ON pod_sweeper.audit FROM {}").format(sql.Identifier(role)))
    refused = cli("retry", "--dead", url=url)
    assert refused.returncode == 1 and "permission denied for table audit" in refused.stderr
    assert row_for(execs, "d")["status"] == "dead"
    pg.execute(sql.SQL("GRANT INSERT ON pod_sweeper.audit TO {}").format(sql.Identifier(role)))
    retried = cli("retry", "--dead", "--actor", "cy", url=url)
    assert retried.returncode == 0 and row_for(execs, "d")["status"] == "pending"
    [row] = audit(pg)
    assert (row["actor"], row["command"], row["affected"], row["arguments"]) == (
        "cy",
        "retry",
        1,
        {"statuses": ["dead"], "page": 1, "limit": None, "yes": False, "matched": 1},
    )


def test_a_breaker_trip_and_a_resume_are_in_the_trail(pg: psycopg.Connection[Any], db_url: str) -> None:
    from pod_sweeper.store.sweep import breaker, outbox

    async def trip() -> None:
        async with db.connection(settings_for(db_url)) as conn:
            await outbox.cluster_rows(conn, cluster="east")
            await breaker.trip_breaker(conn, "east", "61 deletes in a minute", "r1")
            await breaker.trip_breaker(conn, "east", "again", "r1")  # already tripped: no second row

    run(trip())
    resumed = cli("reset-breaker", "--cluster", "east", "--actor", "di", url=db_url)
    assert resumed.returncode == 0, resumed.stderr
    trail = [(r["actor"], r["command"], r["scope"], r["affected"]) for r in audit(pg)]
    assert trail == [("r1", "breaker trip", "cluster east", 0), ("di", "reset-breaker", "cluster east", 1)]
    assert audit(pg)[0]["arguments"] == {"reason": "61 deletes in a minute"}
    listed = cli("sql", "audit", url=db_url)
    assert listed.returncode == 0 and "FROM pod_sweeper.audit" in listed.stdout


def dead_rows(
    pg: psycopg.Connection[Any],
    n: int,
    *,
    namespace: str,
    error: str = "503 ServiceUnavailable",
    cluster: str = "default",
) -> None:
    pg.execute(
        "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid,"
        " reason, status, attempts, last_error, cluster)"
        " SELECT 1, %s || %s || g, 1, %s, 'p' || g, gen_random_uuid(), 'retired', 'dead', 34, %s, %s"
        " FROM generate_series(1, %s) g",
        (cluster, namespace, namespace, error, cluster, n),
    )


def by_status(pg: psycopg.Connection[Any], namespace: str) -> dict[tuple[str, str | None], int]:
    rows = pg.execute(
        "SELECT status, outcome, count(*) AS n FROM pod_sweeper.outbox WHERE pod_namespace = %s GROUP BY 1, 2",
        (namespace,),
    ).fetchall()
    return {(r["status"], r["outcome"]): r["n"] for r in rows}


def test_discard_previews_with_dry_run_and_acts_a_page_at_a_time_while_the_daemon_sweeps(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    dead_rows(execs, 3000, namespace="gamma")
    dead_rows(execs, 5, namespace="gamma", error="409 Conflict")
    for i in range(50):
        add_execution(execs, kube, f"live{i}")
    preview = cli(
        "discard", "--namespace", "gamma", "--error-contains", "503", "--dry-run", "--reason", "x", url=db_url
    )
    assert preview.returncode == 0, preview.stderr
    lines = preview.stdout.splitlines()
    assert lines[0] == "would discard 3000 row(s) in cluster default; nothing changed"
    assert len(lines) == 12 and lines[-1] == "  ... and 2990 more"
    assert by_status(execs, "gamma") == {("dead", None): 3005} and audit(execs) == []

    unbounded = cli("discard", "--namespace", "gamma", "--error-contains", "503", "--reason", "x", url=db_url)
    assert unbounded.returncode == 2
    assert "3000 rows match, more than 1000: pass --limit N, or --yes" in unbounded.stderr
    with DaemonThread(daemon_settings(db_url, kube)):
        for i in range(50):
            retire(execs, f"live{i}")
        discarded = cli(
            "discard",
            "--namespace",
            "gamma",
            "--error-contains",
            "503",
            "--limit",
            "1200",
            "--reason",
            "bad batch",
            url=db_url,
        )
        assert (discarded.returncode, discarded.stdout.strip()) == (0, "discarded 1200 row(s) in cluster default")
        rest = cli("discard", "--namespace", "gamma", "--error-contains", "503", "--yes", "--reason", "bad", url=db_url)
        assert (rest.returncode, rest.stdout.strip()) == (0, "discarded 1800 row(s) in cluster default")
        wait_until(lambda: by_status(execs, "sandboxes") == {("done", "deleted"): 50}, what="the live rows swept")
    assert by_status(execs, "gamma") == {("done", "discarded"): 3000, ("dead", None): 5}
    assert (
        execs.execute(
            "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE outcome = 'discarded' AND last_error IS NOT NULL"
        ).fetchone()["n"]
        == 0
    )  # a done row keeps no last_error; the why is in the trail
    pages = [(r["command"], r["affected"], r["arguments"]["page"]) for r in audit(execs)]
    first, second = (
        [("discard", n, p + 1) for p, n in enumerate((500, 500, 200))],
        [("discard", n, p + 1) for p, n in enumerate((500, 500, 500, 300))],
    )
    assert pages == first + second
    assert {r["arguments"]["reason"] for r in audit(execs)} == {"bad batch", "bad"}


def test_retry_with_filters_reopens_only_what_matches(pg: psycopg.Connection[Any], db_url: str) -> None:
    dead_rows(pg, 3, namespace="one")
    dead_rows(pg, 2, namespace="two")
    pg.execute("UPDATE pod_sweeper.outbox SET updated_at = now() - interval '2 hours' WHERE pod_namespace = 'two'")
    older = cli("retry", "--older-than", "1h", url=db_url)
    assert (older.returncode, older.stdout.strip()) == (0, "reopened 2 row(s) in cluster default: 4, 5")
    scoped = cli("retry", "--namespace", "one", "--limit", "2", url=db_url)
    assert (scoped.returncode, scoped.stdout.strip()) == (0, "reopened 2 row(s) in cluster default: 1, 2")
    assert by_status(pg, "one") == {("pending", None): 2, ("dead", None): 1}
    wrong = cli("retry", "--status", "pending", url=db_url)
    assert wrong.returncode == 2 and "invalid choice: 'pending'" in wrong.stderr


def test_a_bulk_action_over_two_clusters_counts_each_in_its_preview_and_acts_on_exactly_that(
    pg: psycopg.Connection[Any], db_url: str
) -> None:
    dead_rows(pg, 3, namespace="ns", cluster="east")
    dead_rows(pg, 2, namespace="ns", cluster="west")
    preview = cli("retry", "--dead", "--dry-run", url=db_url)
    assert preview.stdout.splitlines()[0] == "would retry 5 row(s) in 2 clusters: east 3, west 2; nothing changed"
    one = cli("retry", "--dead", "--cluster", "west", "--dry-run", url=db_url)
    assert one.stdout.splitlines()[0] == "would retry 2 row(s) in cluster west; nothing changed"
    done = cli("retry", "--dead", "--actor", "al", url=db_url)
    assert done.stdout.startswith("reopened 5 row(s) in 2 clusters: east 3, west 2: ")
    [row] = audit(pg)
    assert (row["affected"], row["arguments"]["matched"], row["arguments"]["limit"]) == (5, 5, None)


def test_a_guard_cannot_be_bypassed_and_the_trail_records_how_the_bound_was_passed(
    pg: psycopg.Connection[Any], db_url: str
) -> None:
    dead_rows(pg, 1005, namespace="x")
    for bad in (("--limit", "-1"), ("--limit", "0"), ("--limit", "1.5"), ("--older-than", "forever")):
        refused = cli("retry", "--dead", *bad, url=db_url)
        assert refused.returncode == 2 and f"argument {bad[0]}" in refused.stderr, refused.stderr
    unbounded = cli("retry", "--dead", url=db_url)
    assert unbounded.returncode == 2 and "1005 rows match, more than 1000" in unbounded.stderr
    assert by_status(pg, "x") == {("dead", None): 1005} and audit(pg) == []
    bounded = cli("retry", "--dead", "--limit", "7", "--actor", "al", url=db_url)
    assert bounded.stdout.startswith("reopened 7 row(s) in cluster default: ")
    confirmed = cli("retry", "--dead", "--yes", "--actor", "al", url=db_url)
    assert confirmed.stdout.startswith("reopened 998 row(s) in cluster default")
    assert [(r["arguments"]["limit"], r["arguments"]["yes"], r["affected"]) for r in audit(pg)] == [
        (7, False, 7),
        (None, True, 500),
        (None, True, 498),
    ]


def test_a_pauses_window_is_the_databases_clock_and_an_until_past_by_it_writes_nothing(
    pg: psycopg.Connection[Any], db_url: str
) -> None:
    assert cli("pause", "--for", "90m", "--reason", "r", url=db_url).returncode == 0
    row = pg.execute("SELECT until - since AS length, until - now() AS left FROM pod_sweeper.pauses").fetchone()
    assert row["length"].total_seconds() == 5400  # both ends are the database's now(), in one statement
    past = pg.execute("SELECT to_char(now() - interval '1 minute', 'YYYY-MM-DD\"T\"HH24:MI:SSOF') AS t").fetchone()
    refused = cli("hold", "ns/p", "--until", past["t"], "--reason", "r", url=db_url)
    assert refused.returncode == 2 and "that time has passed (by the database's clock)" in refused.stderr
    assert pg.execute("SELECT count(*) AS n FROM pod_sweeper.holds").fetchone()["n"] == 0
    assert [r["command"] for r in audit(pg)] == ["pause"]


def test_no_pause_or_hold_ends_without_a_trail_row_whoever_ends_it(
    pg: psycopg.Connection[Any], db_url: str, runtime: tuple[str, str]
) -> None:
    role, url = runtime
    for args in (("pause", "--namespace", "a"), ("pause", "--namespace", "b"), ("hold", "ns/p"), ("hold", "ns/q")):
        assert cli(*args, "--reason", "look", "--actor", "al", url=db_url).returncode == 0
    # The commands: one trail row each, the command's own, with its operator.
    assert cli("unpause", "--namespace", "a", "--actor", "bo", url=db_url).returncode == 0
    assert cli("release", "ns/p", "--actor", "bo", url=db_url).returncode == 0
    # Plain SQL, as the daemon's own role: the database writes the row all the same.
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DELETE FROM pod_sweeper.pauses WHERE pod_namespace = 'b'")
        conn.execute("UPDATE pod_sweeper.holds SET until = now() WHERE pod_name = 'q'")
    # A pause already over ends by itself, at the time its own row says: not recorded again.
    assert cli("pause", "--namespace", "c", "--reason", "short", url=db_url).returncode == 0
    pg.execute("UPDATE pod_sweeper.pauses SET until = now() - interval '1 s' WHERE pod_namespace = 'c'")
    # (that UPDATE ended it early: recorded as plain SQL by the test's own role)
    pg.execute("DELETE FROM pod_sweeper.pauses WHERE pod_namespace = 'c'")
    ends = [(r["actor"], r["command"], r["scope"]) for r in audit(pg) if r["command"] not in ("pause", "hold")]
    assert ends == [
        ("bo", "unpause", "cluster default, namespace a"),
        ("bo", "release", "cluster default, pod ns/p"),
        (role, "sql delete", "cluster default, namespace b"),
        (role, "sql update", "cluster default, pod ns/q"),
        ("postgres", "sql update", "cluster default, namespace c"),
    ]
    again = cli("unpause", "--namespace", "a", "--actor", "bo", url=db_url)
    assert again.stdout.strip() == "cluster default, namespace a was not paused"
    assert audit(pg)[-1]["command"] == "unpause" and audit(pg)[-1]["affected"] == 0


def test_attach_backfill_grant_and_detach_are_in_the_trail(
    pg: psycopg.Connection[Any], db_url: str, tmp_path: Any
) -> None:
    from helpers import create_executions

    secret = tmp_path / "password"
    secret.write_text("pw\n")
    create_executions(pg, "public.more")
    pg.execute(
        "INSERT INTO public.more (sandbox_id, generation, pod_namespace, pod_name, pod_uid, active)"
        " VALUES ('m', 1, 'sandboxes', 'm', gen_random_uuid(), false)"
    )
    role = f"runtime_{uuid.uuid4().hex[:8]}"
    try:
        for args in (
            ("attach", "--table", "public.more"),
            ("backfill",),
            ("grant", role, "--create", "--password-file", str(secret), "--apply"),
            ("detach", "--table", "public.more"),
        ):
            done = cli(*args, "--actor", "ed", url=db_url)
            assert done.returncode == 0, (args, done.stderr)
    finally:
        pg.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(role)))
        pg.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
    trail = [(r["actor"], r["command"], r["scope"], r["affected"] > 0) for r in audit(pg)]
    assert trail == [
        ("ed", "attach", "table public.more", True),
        ("ed", "backfill", "", True),
        ("ed", "grant", f"role {role}", True),
        ("ed", "detach", "table public.more", True),
    ]


def test_pause_wait_returns_once_the_rows_claimed_before_it_are_no_longer_in_flight(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    add_execution(execs, kube, "flying", namespace="delta")
    retire(execs, "flying")
    # A replica holds the row (its lease runs 8 s more), as one does mid-DELETE: long enough for both
    # commands below to start and look while it is held, on a loaded machine too (2 s was not).
    execs.execute(
        "UPDATE pod_sweeper.outbox SET status = 'claimed', claimed_by = 'r1', claim_epoch = 1, attempts = 1,"
        " claimed_at = now(), next_attempt_at = now() + interval '8 seconds'"
    )
    short = cli("pause", "--namespace", "delta", "--reason", "x", "--wait", "--wait-timeout", "0.2", url=db_url)
    assert short.returncode == 1 and short.stdout.splitlines()[-1] == "still 1 row(s) in flight after 0.2 s"
    waited = cli("pause", "--namespace", "delta", "--reason", "x", "--wait", url=db_url)
    assert waited.returncode == 0, waited.stderr
    lines = waited.stdout.splitlines()
    assert lines[1].startswith("1 row(s) claimed before the pause may still be sent, until ")
    assert lines[-1] == "no row of the scope is in flight"


def test_keeping_is_the_one_statement_of_which_controls_keep_a_row_back(pg: psycopg.Connection[Any]) -> None:
    """pod_sweeper.keeping (migration 0015), which the claim, the next-due query, reconciliation and
    `explain` all read: a pause of the cluster or of the pod's namespace, a hold of its name (with no
    UID or with this one), in force, in its cluster; nothing else."""
    uid, other = uuid.uuid4(), uuid.uuid4()
    pg.execute(
        "INSERT INTO pod_sweeper.pauses (cluster, pod_namespace, reason, actor, until) VALUES"
        " ('default', '', 'incident', 'bo', now() + interval '1 hour'),"
        " ('default', 'other', 'x', 'bo', now() + interval '1 hour'),"
        " ('east', 'ns', 'x', 'bo', now() + interval '1 hour'),"
        " ('west', 'ns', 'ended', 'bo', now() - interval '1 second')"
    )
    pg.execute(
        "INSERT INTO pod_sweeper.holds (cluster, pod_namespace, pod_name, pod_uid, reason, actor, until) VALUES"
        " ('default', 'ns', 'p', %s, 'forensics', 'ana', now() + interval '2 hours'),"
        " ('default', 'ns', 'q', NULL, 'any pod by that name', 'ana', now() + interval '2 hours')",
        (uid,),
    )

    def keeping(cluster: str, namespace: str, name: str, pod_uid: uuid.UUID) -> list[tuple[str, str, str | None]]:
        rows = pg.execute(
            "SELECT kind, pod_namespace, pod_name FROM pod_sweeper.keeping(%s, %s, %s, %s) ORDER BY until",
            (cluster, namespace, name, pod_uid),
        ).fetchall()
        return [(r["kind"], r["pod_namespace"], r["pod_name"]) for r in rows]

    assert keeping("default", "ns", "p", uid) == [("pause", "", None), ("hold", "ns", "p")]  # both named
    assert keeping("default", "ns", "p", other) == [("pause", "", None)]  # the hold names another pod
    assert keeping("default", "ns", "q", other) == [("pause", "", None), ("hold", "ns", "q")]  # no UID: any
    assert keeping("east", "ns", "p", uid) == [("pause", "ns", None)]  # its namespace's pause, its cluster's
    assert keeping("east", "other", "p", uid) == []  # another cluster's pause of `other` does not count
    assert keeping("west", "ns", "p", uid) == []  # a pause that has ended keeps nothing
