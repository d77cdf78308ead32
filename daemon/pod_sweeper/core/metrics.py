"""Prometheus metrics: one registry per process, counters moved by the sweeper as it works, and
gauges read from the database by one query on a timer (never on a scrape, so a scrape storm cannot
load the database and a slow database cannot stall a scrape).

Names carry the ``pod_sweeper_`` prefix (a contract, like the table names); docs/operations.md lists
every one with its meaning.
"""

from __future__ import annotations

import functools

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from pod_sweeper import __version__
from pod_sweeper.core.settings import DEFAULT_CLUSTER
from pod_sweeper.core.states import Outcome, Result

# Label values whose series exist from the first scrape, at 0: an alert or a panel that reads
# ``rate(pod_sweeper_outcomes_total[10m])`` must see 0 on a replica that has just started, not nothing
# (``sum(...) == 0`` over no series is empty, so an alert on it could never fire after a restart).
OUTCOMES = tuple(outcome.value for outcome in Outcome)
STATUSES = ("pending", "claimed", "dead")
ANSWERS = ("200", "404", "409", "429", "500", "503", "none")  # codes the outcome table names; others appear when seen
WAKEUP_SOURCES = ("start", "poll", "notify", "listen", "retry")
PASS_RESULTS = ("complete", "partial")
UNSENDABLE = ("invalid_name", "out_of_scope")
EVENT_RESULTS = ("sent", "failed", "dropped")


class Metrics:
    def __init__(self, *, listening: bool = True, cluster: str = DEFAULT_CLUSTER) -> None:
        """``listening``: whether this process runs a LISTEN connection; without one the listener's
        health gauge is not exported at all (a poll-only replica's 0 would read as a failure).
        ``cluster``: the pod cluster this replica serves, on ``pod_sweeper_build_info``, through which
        an alert on one replica's series names its cluster (``* on (instance) group_left (pod_cluster)``)."""
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.outbox_rows = Gauge(
            "pod_sweeper_outbox_rows",
            "Open and dead outbox rows by status (done rows are not counted: that would scan the history)",
            ["status"],
            registry=r,
        )
        self.lag = Gauge("pod_sweeper_lag_seconds", "Age of the oldest claimable outbox row", registry=r)
        self.backoff_rows = Gauge("pod_sweeper_backoff_rows", "Pending rows parked in retry backoff", registry=r)
        self.oldest_backoff = Gauge(
            "pod_sweeper_oldest_backoff_seconds", "Age of the oldest row parked in backoff", registry=r
        )
        # Every cluster's, read by every replica: a cluster whose own replicas are all down still shows.
        # The label is not `cluster`, which multi-cluster Prometheus set-ups often set themselves.
        self.cluster_lag = Gauge(
            "pod_sweeper_cluster_lag_seconds",
            "Age of the oldest claimable outbox row of each pod cluster (0: none waits)",
            ["pod_cluster"],
            registry=r,
        )
        self.cluster_pending = Gauge(
            "pod_sweeper_cluster_pending_rows", "Pending outbox rows of each pod cluster", ["pod_cluster"], registry=r
        )
        self.cluster_dead = Gauge(
            "pod_sweeper_cluster_dead_rows", "Dead outbox rows of each pod cluster", ["pod_cluster"], registry=r
        )
        self.cluster_oldest_claim = Gauge(
            "pod_sweeper_cluster_oldest_claim_seconds",
            "Age of the oldest claim on a row of each pod cluster (0: none)",
            ["pod_cluster"],
            registry=r,
        )
        self.large_transactions = Counter(
            "pod_sweeper_large_transactions_kept_back",
            "Large host transactions this replica's claims found and kept back (the breaker's transaction rule)",
            registry=r,
        )
        self.cluster_large_transactions = Gauge(
            "pod_sweeper_cluster_large_transactions",
            "Large host transactions of each pod cluster kept back (not released nor discarded) (their rows wait)",
            ["pod_cluster"],
            registry=r,
        )
        self.cluster_large_transaction_rows = Gauge(
            "pod_sweeper_cluster_large_transaction_rows",
            "Open rows of each pod cluster kept back in large host transactions not released",
            ["pod_cluster"],
            registry=r,
        )
        self.cluster_live_replicas = Gauge(
            "pod_sweeper_cluster_live_replicas",
            "Live replicas of each pod cluster, as pod_sweeper.replicas knows them (their heartbeats)",
            ["pod_cluster"],
            registry=r,
        )
        self.cluster_no_live_replica = Gauge(
            "pod_sweeper_cluster_no_live_replica",
            "1 while a pod cluster has open rows and no live replica (and none of an older release seen at work)",
            ["pod_cluster"],
            registry=r,
        )
        self.cluster_rejected = Gauge(
            "pod_sweeper_cluster_rejected_retires",
            "Retires of each pod cluster recorded in pod_sweeper.rejects (up to 1,000; '(none)': no cluster named)",
            ["pod_cluster"],
            registry=r,
        )
        self.cluster_arrival_rate = Gauge(
            "pod_sweeper_cluster_arrival_rate",
            "Outbox rows a second enqueued in each pod cluster over the last minute",
            ["pod_cluster"],
            registry=r,
        )
        self.cluster_sweep_rate = Gauge(
            "pod_sweeper_cluster_sweep_rate",
            "Outbox rows a second ended done in each pod cluster over the last minute",
            ["pod_cluster"],
            registry=r,
        )
        self.xmin_horizon_seconds = Gauge(
            "pod_sweeper_xmin_horizon_seconds",
            "Seconds the oldest open transaction of the database has pinned its xmin horizon (0: none; a slot "
            "or a standby counts in pod_sweeper_xmin_horizon_age_xids only)",
            registry=r,
        )
        self.xmin_horizon_age = Gauge(
            "pod_sweeper_xmin_horizon_age_xids",
            "Transactions since the database's xmin horizon: how far back vacuum is pinned (by a transaction, "
            "a replication slot, a prepared transaction or a standby's feedback)",
            registry=r,
        )
        self.dead_rows = Gauge("pod_sweeper_dead_rows", "Rows that went dead and wait for an operator", registry=r)
        self.rejected = Gauge(
            "pod_sweeper_rejected_retires",
            "Retires recorded in pod_sweeper.rejects: they named no pod the outbox can hold (NULL or empty"
            " fields, a malformed UID), so nothing was enqueued",
            registry=r,
        )
        self.oldest_claim = Gauge("pod_sweeper_oldest_claim_seconds", "Age of the oldest claim", registry=r)
        self.gauges_refreshed = Gauge(
            "pod_sweeper_gauges_refreshed_timestamp_seconds", "When the database gauges were last read", registry=r
        )
        self.outcomes = Counter("pod_sweeper_outcomes", "Rows recorded done, by outcome", ["outcome"], registry=r)
        self.retries = Counter("pod_sweeper_retries", "Rows put back in backoff after a transient failure", registry=r)
        self.dead = Counter("pod_sweeper_dead", "Rows that went dead in this process", registry=r)
        self.handed_back = Counter(
            "pod_sweeper_claims_handed_back", "Claims handed back without charging an attempt", registry=r
        )
        self.fenced = Counter(
            "pod_sweeper_results_fenced", "Results refused because the lease had been taken over", registry=r
        )
        self.claimed = Counter("pod_sweeper_claimed_rows", "Rows claimed", registry=r)
        self.kube_responses = Counter(
            "pod_sweeper_kube_responses",
            "Kubernetes answers to DELETE by status code ('none': no answer)",
            ["code"],
            registry=r,
        )
        self.delete_latency = Histogram(
            "pod_sweeper_delete_duration_seconds",
            "Time of one DELETE request (and its GET after a 409)",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.wakeups = Counter("pod_sweeper_wakeups", "Claimer wakeups by source", ["source"], registry=r)
        self.handed_on = Counter(
            "pod_sweeper_wakeups_handed_on",
            "Times this replica had more rows in hand than it could send soon and handed the wakeups on to every"
            " replica (the wakeup flag no longer names it)",
            registry=r,
        )
        self.arm_deferred = Counter(
            "pod_sweeper_wakeup_arm_deferred",
            "Times the claimer could not arm the wakeup flag (a retire's transaction was open) and polled"
            " again soon instead of sleeping",
            registry=r,
        )
        self.listener_healthy = (
            Gauge("pod_sweeper_listener_healthy", "1 while the LISTEN connection hears its own pings", registry=r)
            if listening
            else None
        )
        self.db_errors = Counter(
            "pod_sweeper_db_errors", "Database errors in the claim or record path (each one reconnects)", registry=r
        )
        self.listener_reconnects = Counter(
            "pod_sweeper_listener_reconnects", "Times the LISTEN connection was replaced", registry=r
        )
        self.ready = Gauge("pod_sweeper_ready", "1 while /readyz answers 200", registry=r)
        self.schema_version = Gauge(
            "pod_sweeper_schema_version",
            "Schema versions: the database's (of=database, read every half minute) and the newest this replica"
            " ships (of=replica); the database's may be newer while a newer release's migration declares it readable",
            ["of"],
            registry=r,
        )
        self.schema_incompatible = Gauge(
            "pod_sweeper_schema_incompatible",
            "1 while the database's schema is one this replica may not run on (behind it, or a newer release's that"
            " declares it too old): it claims nothing",
            registry=r,
        )
        self.guard_keeping_back = Gauge(
            "pod_sweeper_replication_guard_holding",
            "1 while the replication guard keeps rows of the replica's cluster back: a standby it names has not yet"
            " flushed their retires (connected but behind, or not connected at all), or this role may not read"
            " their positions (POD_SWEEPER_REPLICATION_GUARD; 0 when off)",
            registry=r,
        )
        self.guard_kept_back_rows = Gauge(
            "pod_sweeper_replication_guard_held_rows",
            "Open rows of the replica's cluster the replication guard keeps back now (0 when off)",
            registry=r,
        )
        self.guard_oldest_kept_back = Gauge(
            "pod_sweeper_replication_guard_oldest_held_seconds",
            "Seconds since the retire of the oldest row the replication guard keeps back (0: none; what"
            " PodSweeperReplicationGuardHolding alerts on)",
            registry=r,
        )
        self.guard_missing = Gauge(
            "pod_sweeper_replication_guard_standbys_missing",
            "Standbys the replication guard names that are not connected to the primary: while one is, every"
            " row is kept back (0 when off)",
            registry=r,
        )
        self.guard_lag = Gauge(
            "pod_sweeper_replication_guard_lag_bytes",
            "How far the slowest connected standby the replication guard names is behind in flushing WAL: a"
            " retire waits about this long to be claimable (0 when off or unknown; a standby that is not"
            " connected is counted in pod_sweeper_replication_guard_standbys_missing, not here)",
            registry=r,
        )
        self.guard_lag_seconds = Gauge(
            "pod_sweeper_replication_guard_lag_seconds",
            "The same standby's flush lag in seconds, as the primary measures it (pg_stat_replication)",
            registry=r,
        )
        self.attached_tables = Gauge(
            "pod_sweeper_attached_tables",
            "Attached tables that can enqueue rows of the replica's cluster (0: nothing will ever be swept)",
            registry=r,
        )
        self.start_error = Gauge(
            "pod_sweeper_start_error",
            "1 while a start-up error a person must fix holds the replica (POD_SWEEPER_ON_START_ERROR=wait), by"
            " kind: settings, kubeconfig, database_url, schema, privileges",
            ["kind"],
            registry=r,
        )
        self.kube_refusing = Gauge(
            "pod_sweeper_kube_refusing", "1 while Kubernetes refuses the daemon's credentials (401)", registry=r
        )
        self.namespace_refused = Gauge(
            "pod_sweeper_namespace_refused",
            "1 while Kubernetes answers 403 in the pod namespace (its rows wait; the others go on)",
            # Not `namespace`: prometheus-operator gives every scraped series the scraped pod's own.
            ["pod_namespace"],
            registry=r,
        )
        self.events = Counter(
            "pod_sweeper_events",
            "Kubernetes Events on deleted pods: sent, failed (refused or no answer), dropped (the queue was full)",
            ["result"],
            registry=r,
        )
        self.unsendable = Counter(
            "pod_sweeper_unsendable_rows",
            "Rows ended dead before any request: a name Kubernetes could not hold, or a namespace outside the scope",
            ["why"],
            registry=r,
        )
        self.breaker_surge_threshold = Gauge(
            "pod_sweeper_breaker_surge_threshold",
            "Retires a second of the replica's cluster above which the breaker's surge rule trips now",
            ["pod_cluster"],
            registry=r,
        )
        self.waiting = Gauge(
            "pod_sweeper_waiting",
            "1 while this replica knows the reason keeps rows (core.waits; docs/operations.md, 'Why a row waits'):"
            " its gates, its start and schema, a pause or the replication guard in its cluster; every reason is"
            " exported, 0 while it does not hold",
            ["reason"],
            registry=r,
        )
        self.waiting_rows = Gauge(
            "pod_sweeper_waiting_rows",
            "Open rows of each cluster that each reason keeps now, one reason a row (sql/row_waits.sql); rows"
            " nothing keeps are not counted",
            ["pod_cluster", "reason"],
            registry=r,
        )
        self.breaker_tripped = Gauge(
            "pod_sweeper_breaker_tripped",
            "1 while the blast-radius breaker of the replica's cluster holds that cluster's deletes back",
            ["pod_cluster"],
            registry=r,
        )
        self.paused = Gauge(
            "pod_sweeper_paused_seconds",
            "Seconds a pause in force in the replica's cluster has lasted (pod_namespace * : the whole cluster)",
            ["pod_cluster", "pod_namespace"],
            registry=r,
        )
        self.holds = Gauge(
            "pod_sweeper_holds",
            "Pods of the replica's cluster held now (`pod-sweeper hold`)",
            ["pod_cluster"],
            registry=r,
        )
        self.kube_unreachable = Gauge(
            "pod_sweeper_kube_unreachable",
            "1 while the replica's cluster's API server cannot be reached (its rows wait, uncharged)",
            ["pod_cluster"],
            registry=r,
        )
        self.confirmed = Counter(
            "pod_sweeper_confirmed_gone", "Terminating pods seen gone after their grace", registry=r
        )
        self.stuck = Counter(
            "pod_sweeper_stuck_terminating", "Pods reported still terminating past the limit", registry=r
        )
        self.forced = Counter(
            "pod_sweeper_force_deleted", "Stuck pods force-deleted because their node is gone", registry=r
        )
        self.reconcile_passes = Counter(
            "pod_sweeper_reconcile_passes",
            "Reconciliation passes run by this process ('partial': the listing stopped early)",
            ["result"],
            registry=r,
        )
        self.reconcile_suspects = Gauge(
            "pod_sweeper_reconcile_suspects", "Suspect pods in quarantine after the last pass", registry=r
        )
        self.reconcile_enqueued = Counter(
            "pod_sweeper_reconcile_enqueued", "Confirmed suspects enqueued with reason 'reconciled'", registry=r
        )
        self.build_info = Gauge(
            "pod_sweeper_build_info",
            "Build information, and the pod cluster the replica serves",
            ["version", "pod_cluster"],
            registry=r,
        )
        self.build_info.labels(__version__, cluster).set(1)
        self.failpoints_armed = Gauge(
            "pod_sweeper_failpoints_armed",
            "Failpoints armed in this process (chaos tests only: it kills, raises in or stalls itself on purpose)",
            registry=r,
        )
        self.pruned = Counter("pod_sweeper_pruned_rows", "Done rows deleted by the retention pass", registry=r)
        for labelled, values in (
            (self.outcomes, OUTCOMES),
            (self.outbox_rows, STATUSES),
            (self.kube_responses, ANSWERS),
            (self.wakeups, WAKEUP_SOURCES),
            (self.reconcile_passes, PASS_RESULTS),
            (self.unsendable, UNSENDABLE),
            (self.events, EVENT_RESULTS),
        ):
            for value in values:
                labelled.labels(value)
        # The two labelled counters moved once per row, each child looked up once per label value
        # (``labels()`` takes a lock and builds a key on every call).
        self.finished = functools.cache(self.outcomes.labels)
        self.answered = functools.cache(self.kube_responses.labels)
        # What each Result counts as once it is recorded (see ``recorded``).
        self._by_result = {
            result: self.finished(outcome)
            if (outcome := result.outcome) is not None
            else {Result.DEAD: self.dead, Result.HANDED_BACK: self.handed_back, Result.RETRY: self.retries}[result]
            for result in Result
        }

    def recorded(self, result: Result) -> None:
        """A row's round was recorded as ``result``: the counter that ``Result`` moves (an outcome, a
        retry, a hand-back, a dead row), read from the same value the record was written from."""
        self._by_result[result].inc()

    def value(self, name: str, **labels: str) -> float:
        """A sample's current value (0 when absent): for tests and the systemd STATUS line."""
        sample = self.registry.get_sample_value(name, labels)
        return 0.0 if sample is None else sample
