"""The enqueue rule of docs/design.md, case by case, on the reference table in a real PostgreSQL."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import psycopg
import pytest

from helpers import outbox, wait_until

pytestmark = pytest.mark.versions

UID1 = uuid.UUID("11111111-1111-4111-8111-111111111111")
UID2 = uuid.UUID("22222222-2222-4222-8222-222222222222")


def insert(
    conn: psycopg.Connection[Any], sid: str = "s1", gen: int = 1, uid: uuid.UUID | None = UID1, active: bool = True
) -> None:
    conn.execute(
        "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid, active)"
        " VALUES (%s, %s, 'sandboxes', %s, %s, %s)",
        (sid, gen, f"pod-{sid}-{gen}", uid, active),
    )


def retire(conn: psycopg.Connection[Any], sid: str = "s1", gen: int = 1) -> None:
    conn.execute("UPDATE executions SET active = false WHERE sandbox_id = %s AND generation = %s", (sid, gen))


def test_active_insert_enqueues_nothing(execs: psycopg.Connection[Any]) -> None:
    insert(execs)
    assert outbox(execs) == []


def test_retire_enqueues_one_row_with_the_execution_fields(execs: psycopg.Connection[Any]) -> None:
    insert(execs)
    retire(execs)
    [row] = outbox(execs)
    assert (row["sandbox_id"], row["generation"], row["pod_namespace"], row["pod_name"], row["pod_uid"]) == (
        "s1",
        1,
        "sandboxes",
        "pod-s1-1",
        UID1,
    )
    assert (row["reason"], row["status"], row["attempts"], row["outcome"]) == ("retired", "pending", 0, None)


def test_updates_that_change_neither_enqueue_nothing_more(execs: psycopg.Connection[Any]) -> None:
    insert(execs)
    retire(execs)
    retire(execs)
    execs.execute("UPDATE executions SET state = 'stopped', activation_attempt = 2")
    assert len(outbox(execs)) == 1


def test_retire_without_uid_enqueues_nothing(execs: psycopg.Connection[Any]) -> None:
    insert(execs, uid=None)
    retire(execs)
    execs.execute("DELETE FROM executions")
    assert outbox(execs) == []


def test_uid_recorded_on_a_retired_row_enqueues_it(execs: psycopg.Connection[Any]) -> None:
    insert(execs, uid=None)
    retire(execs)
    execs.execute("UPDATE executions SET pod_uid = %s", (UID1,))
    [row] = outbox(execs)
    assert (row["pod_uid"], row["reason"]) == (UID1, "retired")


def test_uid_changed_on_a_retired_row_enqueues_the_new_uid(execs: psycopg.Connection[Any]) -> None:
    insert(execs)
    retire(execs)
    execs.execute("UPDATE executions SET pod_uid = %s", (UID2,))
    assert [r["pod_uid"] for r in outbox(execs)] == [UID1, UID2]


def test_uid_recorded_on_an_active_row_enqueues_nothing(execs: psycopg.Connection[Any]) -> None:
    insert(execs, uid=None)
    execs.execute("UPDATE executions SET pod_uid = %s", (UID1,))
    assert outbox(execs) == []


def test_deleted_row_that_names_a_uid_enqueues_it(execs: psycopg.Connection[Any]) -> None:
    insert(execs)
    execs.execute("DELETE FROM executions")
    [row] = outbox(execs)
    assert (row["pod_uid"], row["reason"]) == (UID1, "row_deleted")


def test_deleting_a_retired_row_does_not_enqueue_its_uid_twice(execs: psycopg.Connection[Any]) -> None:
    insert(execs)
    retire(execs)
    execs.execute("DELETE FROM executions")
    [row] = outbox(execs)
    assert row["reason"] == "retired"


def test_inactive_insert_with_uid_enqueues(execs: psycopg.Connection[Any]) -> None:
    insert(execs, active=False)
    [row] = outbox(execs)
    assert row["reason"] == "retired"


def test_rolled_back_retire_enqueues_nothing(execs: psycopg.Connection[Any], db_url: str) -> None:
    insert(execs)
    with psycopg.connect(db_url) as conn:
        retire(conn)
        assert len(outbox(conn)) == 1  # visible inside the retiring transaction
        conn.rollback()
    assert outbox(execs) == []


def test_retire_and_outbox_row_commit_together(execs: psycopg.Connection[Any], db_url: str) -> None:
    insert(execs)
    with psycopg.connect(db_url) as conn:
        retire(conn)
        assert outbox(execs) == []  # not visible to others before the commit
        conn.commit()
    assert len(outbox(execs)) == 1


def test_a_second_retire_reopens_a_skipped_active_row(execs: psycopg.Connection[Any]) -> None:
    insert(execs)
    retire(execs)
    execs.execute(
        "UPDATE pod_sweeper.outbox SET status = 'done', outcome = 'skipped_active', attempts = 3, done_at = now()"
    )
    execs.execute("UPDATE executions SET active = true")
    retire(execs)
    [row] = outbox(execs)
    assert (row["status"], row["outcome"], row["attempts"], row["done_at"]) == ("pending", None, 0, None)


@pytest.mark.parametrize(
    ("status", "outcome"), [("done", "deleted"), ("done", "absent"), ("dead", None), ("claimed", None)]
)
def test_a_second_retire_leaves_other_rows_alone(
    execs: psycopg.Connection[Any], status: str, outcome: str | None
) -> None:
    insert(execs)
    retire(execs)
    execs.execute(
        "UPDATE pod_sweeper.outbox SET status = %s, outcome = %s, attempts = 3, claimed_by = 'x'",
        (status, outcome),
    )
    execs.execute("UPDATE executions SET active = true")
    retire(execs)
    [row] = outbox(execs)
    assert (row["status"], row["outcome"], row["attempts"]) == (status, outcome, 3)


def test_two_executions_naming_one_uid_give_one_row(execs: psycopg.Connection[Any]) -> None:
    insert(execs, sid="a")
    insert(execs, sid="b")
    execs.execute("UPDATE executions SET active = false")
    assert len(outbox(execs)) == 1


def test_retire_notifies_the_channel(execs: psycopg.Connection[Any], db_url: str) -> None:
    insert(execs)
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute("LISTEN pod_sweeper")
        retire(execs)
        received = list(listener.notifies(timeout=5, stop_after=1))
    assert [n.channel for n in received] == ["pod_sweeper"]


def test_concurrent_retires_of_one_row_enqueue_once(execs: psycopg.Connection[Any], db_url: str) -> None:
    insert(execs)
    first = psycopg.connect(db_url)
    second = psycopg.connect(db_url)
    try:
        retire(first)  # holds the row lock until commit
        done = threading.Event()

        def second_retire() -> None:
            retire(second)
            second.commit()
            done.set()

        worker = threading.Thread(target=second_retire)
        worker.start()
        # The second UPDATE must be waiting on the first one's row lock, not finished.
        wait_until(
            lambda: execs.execute(
                "SELECT count(*) AS n FROM pg_stat_activity"
                " WHERE wait_event_type = 'Lock' AND datname = current_database()"
            ).fetchone()["n"],
            what="the second retire to wait on the row lock",
        )
        assert not done.is_set()
        first.commit()
        worker.join(timeout=10)
        assert done.is_set()
    finally:
        first.close()
        second.close()
    [row] = outbox(execs)
    assert row["pod_uid"] == UID1


def test_concurrent_retire_after_a_rollback_still_enqueues(execs: psycopg.Connection[Any], db_url: str) -> None:
    insert(execs)
    with psycopg.connect(db_url) as first, psycopg.connect(db_url) as second:
        retire(first)
        worker = threading.Thread(target=lambda: (retire(second), second.commit()))
        worker.start()
        first.rollback()
        worker.join(timeout=10)
    assert len(outbox(execs)) == 1
