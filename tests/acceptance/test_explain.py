"""`pod-sweeper explain` as on-call runs it: the story of a deleted pod, a dead row, an active
generation and an unknown name, in text and as JSON."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from helpers import DaemonThread, add_execution, cli, daemon_settings, retire, wait_until


def test_explain_tells_each_pods_story(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    gone_uid = add_execution(execs, kube, "gone")
    add_execution(execs, kube, "broken")
    add_execution(execs, kube, "alive")
    kube.inject("status", method="DELETE", code=500, path="pod-broken", times=None)
    with DaemonThread(daemon_settings(db_url, kube, max_attempts=1)):
        retire(execs, "gone")
        retire(execs, "broken")
        settled = "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status IN ('done', 'dead')"
        wait_until(lambda: execs.execute(settled).fetchone()["n"] == 2, timeout=20, what="both rows settled")

    deleted = cli("explain", gone_uid, url=db_url)
    assert deleted.returncode == 0, deleted.stderr
    assert "public.executions: sandbox gone generation 1" in deleted.stdout and "retired" in deleted.stdout
    assert "HTTP 200" in deleted.stdout and "-> deleted" in deleted.stdout
    assert "done: deleted" in deleted.stdout

    dead = cli("explain", "broken", "--json", url=db_url)
    assert dead.returncode == 0, dead.stderr
    story = json.loads(dead.stdout)
    [row] = story["outbox"]
    assert row["status"] == "dead" and [a["http_status"] for a in story["attempts"]] == [500]
    assert story["next"] == [f"row {row['id']}: " + story["next"][0].split(": ", 1)[1]]
    assert f"`pod-sweeper retry {row['id']}`" in story["next"][0]

    active = cli("explain", "sandboxes/pod-alive-1", url=db_url)
    assert "its generation is active: nothing happens until a writer retires it" in active.stdout

    unknown = cli("explain", "no-such-thing", url=db_url)
    assert unknown.returncode == 0 and "knows nothing of it" in unknown.stdout


def test_status_and_explain_escape_what_the_database_holds_and_cut_long_values(
    execs: psycopg.Connection[Any], db_url: str
) -> None:
    """A host-table writer controls names: they must not reach an operator's terminal as control
    sequences or forged lines, nor make a table 10,000 columns wide; --json keeps them whole."""
    hostile = "evil\x1b[31mRED\x1b[0m\nnewline"
    long_name = "n" * 10_000
    for sid, name in (("hostile", hostile), ("long", long_name)):
        execs.execute(
            "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid,"
            " reason, status, last_error) VALUES (1, %s, 1, %s, %s, gen_random_uuid(), 'retired', 'dead', %s)",
            (sid, hostile, name, f"pod name {hostile!r} is not valid\x1b[2J"),
        )
    execs.execute(
        "INSERT INTO pod_sweeper.rejects (attachment_id, reason, sandbox_id, pod_name, problem)"
        " VALUES (1, 'retired', %s, %s, 'pod_namespace is NULL')",
        (hostile, long_name),
    )
    status = cli("status", url=db_url)
    assert status.returncode == 0, status.stderr
    explained = cli("explain", "hostile", url=db_url)
    assert explained.returncode == 0, explained.stderr
    for out in (status.stdout, explained.stdout):
        assert "\x1b" not in out and "evil\\x1b[31mRED" in out
        assert not any(line.startswith("newline") for line in out.splitlines())  # no forged line
        assert max(len(line) for line in out.splitlines()) < 1000
    whole = json.loads(cli("status", "--json", url=db_url).stdout)
    assert {r["pod_name"] for r in whole["recent_rejects"]} == {long_name}
    assert json.loads(cli("explain", "hostile", "--json", url=db_url).stdout)["outbox"][0]["pod_name"] == hostile
