"""Which NOTIFY wakes which replica (migration 0018): a retire's names the replica that armed the wakeup
flag, an empty one wakes every replica, and a listener's ping wakes nobody."""

from __future__ import annotations

from pod_sweeper.store.sweep.channel import PING_PREFIX, WAKE_PREFIX, wakes


def test_a_retire_wakes_the_replica_it_names_and_no_other() -> None:
    assert wakes(WAKE_PREFIX + "east-1", replica="east-1")
    assert not wakes(WAKE_PREFIX + "east-1", replica="east-2")
    assert not wakes(WAKE_PREFIX + "east-1", replica="east-10")  # the whole name, not a prefix of it
    assert not wakes(WAKE_PREFIX + "east-10", replica="east-1")


def test_an_empty_payload_wakes_every_replica() -> None:
    # the enqueue before 0018, a flag naming nobody, a hand-on (sql/wakeup_hand_on.sql), a REPEATABLE READ retire
    assert wakes("", replica="east-1") and wakes("", replica="east-2")


def test_a_ping_wakes_nobody_not_even_the_replica_it_names() -> None:
    # its own ping is told by the listener before this (tasks/loops/listener.py); another's is no wakeup
    assert not wakes(f"{PING_PREFIX}east-1:7", replica="east-2")
    assert not wakes(f"{PING_PREFIX}east-1:7", replica="east-1")


def test_a_payload_of_an_older_sender_wakes_as_before() -> None:
    # anything else (a DBA's pg_notify('pod_sweeper', 'x'), a tool of a later release) wakes, the safe side
    assert wakes("x", replica="east-1")
