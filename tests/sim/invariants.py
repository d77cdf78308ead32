"""The invariants the simulator checks, each by name, after every step of a run and at its end.

Each is a rule of docs/design.md ("Safety invariants", "The life of an outbox row"), read from what
the simulated world saw happen, never from the daemon's own counts: the scripted Kubernetes logs every
request and what it did to which pod, the store's wrapper sees every statement before and after it
applies. A check that fails records a ``Violation``; the loop stops the run at the end of that step.
``NAMES`` is the list a test holds to ``docs/design.md``'s simulator section.
"""

from __future__ import annotations

from dataclasses import dataclass

UID_PRECONDITION = "uid_precondition"
NO_ACTIVE_DELETED = "no_active_generation_deleted"
DONE_ONCE = "every_retire_ends_done_once"
NO_CHARGE_UNSENT = "no_charge_without_a_request"
NO_RECORD_OVER_NEWER = "no_record_over_a_newer_claim"
KEPT_NEVER_SENT = "paused_and_held_rows_never_sent"
STOP_HANDS_BACK = "a_stop_hands_back_its_claims"
OUTAGE_CHARGES_NOTHING = "an_outage_charges_nothing"
BREAKER_BOUND = "the_breakers_bound"
NO_TASK_DIES = "no_task_dies"
DEAD_STAY_DEAD = "a_stopped_replica_sends_nothing"
CREDENTIAL_RENEWED = "an_expired_credential_is_renewed"
NO_CLAIM_DROPPED = "no_claim_in_hand_is_dropped"
REASON_AGREES = "a_waiting_rows_reason_agrees_with_its_state"
STUCK_BY_THE_DATABASE = "stuck_only_by_the_databases_clock"
TERMINATING_SETTLED = "a_terminating_pod_is_confirmed_or_reported"
FORCED_ONLY_NODE_GONE = "a_pod_is_forced_only_once_its_node_is_gone"
SURGE_TRIPS = "a_surge_trips_the_breaker"
NO_CLAIM_PAST_TRIPPED = "no_claim_past_a_tripped_breaker"
GUARD_FLUSHED = "no_delete_before_the_standbys_flush_its_retire"
RECONCILE_SPARES = "the_reconciler_spares_the_young_and_the_active"
ORPHANS_SWEPT = "every_old_orphan_is_swept"
KEPT_TRANSACTION = "no_delete_of_a_kept_transaction"

NAMES: dict[str, str] = {
    UID_PRECONDITION: "every DELETE carries the UID of the row it was sent for",
    NO_ACTIVE_DELETED: "no DELETE removes the pod of a generation active when it was sent",
    DONE_ONCE: "every retire ends done exactly once (or dead with its reason), none lost, none done twice",
    NO_CHARGE_UNSENT: "no attempt is charged by a result whose request was never sent",
    NO_RECORD_OVER_NEWER: "no result is recorded over a claim newer than its own",
    KEPT_NEVER_SENT: "a row held or paused before its claim is never sent",
    STOP_HANDS_BACK: (
        "a replica whose database answered throughout (and before its drain's deadline) leaves no row claimed "
        "once its stop is done"
    ),
    OUTAGE_CHARGES_NOTHING: "no attempt is charged for a request sent in an outage before the server answers again",
    BREAKER_BOUND: "no more recorded deletes sent within a minute (since the last reset) than the ceiling",
    NO_TASK_DIES: "no task of a replica dies of an error",
    DEAD_STAY_DEAD: "a killed or stopped replica sends no request",
    CREDENTIAL_RENEWED: "a request whose credential hook ran beside no other of its replica's sends no expired token",
    NO_CLAIM_DROPPED: "a claim leaves a replica's hand only once a record statement carried its verdict",
    REASON_AGREES: "each open row's reason (core.waits, sql/row_waits.sql) is what the world knows keeps it",
    STUCK_BY_THE_DATABASE: "no pod is reported stuck or force-deleted before the stuck limit of the database's time "
    "since its DELETE was recorded",
    TERMINATING_SETTLED: "once healed, a pod left terminating is confirmed gone, or reported stuck past the limit "
    "and forced once its node is gone",
    FORCED_ONLY_NODE_GONE: "no pod is force-deleted while its node exists",
    SURGE_TRIPS: "retires arriving faster than the surge rule allows trip the breaker within the watch's interval",
    NO_CLAIM_PAST_TRIPPED: "no claim takes rows in a transaction whose read of the breaker found it tripped",
    GUARD_FLUSHED: "with the replication guard on, no DELETE goes out for a row whose retire a named standby "
    "has not flushed (a failover to it then could lose the retire)",
    RECONCILE_SPARES: "the reconciliation pass makes no pod a suspect, nor enqueues it, while it is younger than the "
    "min-age by the database's clock or its generation was active when the pass began; and enqueues none without "
    "a fresh GET of it, nor one whose generation was active before that GET",
    ORPHANS_SWEPT: "once healed, every labelled pod older than the min-age whose generation has no active row is "
    "deleted by a reconciled row, or left to the row the outbox already keeps for it",
    KEPT_TRANSACTION: "no DELETE goes out for a row of a host transaction at or over the transaction rule's threshold "
    "unless the on-call released that transaction first (or a reset let it go before any claim found it)",
}


@dataclass(frozen=True)
class Violation:
    name: str
    at: float  # virtual seconds
    step: int
    detail: str

    def __str__(self) -> str:
        return f"{self.name} (step {self.step}, t={self.at:.3f}): {self.detail}"


class Broken(AssertionError):
    """A run broke an invariant: the first violation, with the run's seed."""

    def __init__(self, seed: int, violation: Violation) -> None:
        super().__init__(f"seed {seed}: {violation}")
        self.seed, self.violation = seed, violation
