"""Every setting pod-sweeper reads, typed, validated and documented in one place.

Values come from ``POD_SWEEPER_*`` environment variables, then from an optional TOML file named by
``POD_SWEEPER_CONFIG_FILE`` (or ``--config``), then from the defaults below; the environment wins. Each
field's description gives its unit, default and the reason for it; the settings table of docs/operations.md is
generated from the same descriptions (``pod-sweeper settings``), so the two cannot drift apart.
"""

from __future__ import annotations

import functools
import os
import re
import socket
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from pod_sweeper.core import failpoints
from pod_sweeper.core.backoff import describe_duration, retry_span
from pod_sweeper.core.errors import ConfigError

ENV_PREFIX = "POD_SWEEPER_"
# The cluster of every row whose table was attached without one, and of a replica without a setting.
DEFAULT_CLUSTER = "default"
CONFIG_FILE_ENV = "POD_SWEEPER_CONFIG_FILE"
# Read by the test suite, not settings; listed so that they are not reported as typos.
_FOREIGN_ENV = {
    CONFIG_FILE_ENV,
    "POD_SWEEPER_TEST_DATABASE_URL",
    "POD_SWEEPER_KUBE_BINDIR",  # harness.kubeapiserver: the real API server the tests run
    "POD_SWEEPER_UPDATE_REFERENCE",
}

Seconds = Annotated[float, Field(gt=0)]
# A Kubernetes label key: an optional DNS subdomain prefix and a name of at most 63 characters.
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_LABEL_KEY = rf"^({_DNS_LABEL}(\.{_DNS_LABEL})*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{{0,61}}[A-Za-z0-9])?$"


# The retry defaults, and what they span (computed, never claimed: tests/unit/test_settings.py holds the
# descriptions below to retry_span). A row's own trouble gets at least an hour before it goes dead; an API
# server that cannot be reached charges nothing (docs/design.md, "What an answer to DELETE means").
DEFAULT_MAX_ATTEMPTS = 34
DEFAULT_BACKOFF_BASE = 1.0
DEFAULT_BACKOFF_MAX = 300.0
DEFAULT_SPAN = retry_span(DEFAULT_BACKOFF_BASE, DEFAULT_BACKOFF_MAX, DEFAULT_MAX_ATTEMPTS)


def _default_replica_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def _names(value: Any, when_empty: str) -> Any:
    """A comma-separated list (as an environment variable gives it) as a list of its non-empty names; a
    list as it is; an empty one refused with ``when_empty``."""
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list | tuple | set | frozenset) and not value:
        raise ValueError(when_empty)
    return value


class Settings(BaseSettings):
    """pod-sweeper's settings; see each field's description."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        extra="forbid",
        frozen=True,
        validate_default=True,
    )

    database_url: SecretStr | None = Field(
        default=None,
        description="libpq connection URL or key=value string of the database holding the outbox. "
        "No default: every command but `demo` needs it. Never logged with its password.",
    )
    kubeconfig: Path | None = Field(
        default=None,
        description="Path of a kubeconfig file. Default: unset, meaning the in-cluster service account "
        "when running in a pod, else the usual lookup ($KUBECONFIG, then ~/.kube/config).",
    )
    cluster: str = Field(
        default=DEFAULT_CLUSTER,
        pattern=r"^[a-z0-9]([-a-z0-9._]{0,48}[a-z0-9])?$",
        description="The Kubernetes cluster this replica serves: it claims that cluster's rows only (those "
        "`attach --cluster` or a cluster column gave that name) and is woken by its retires only. Run a "
        "replica set per cluster, each with that cluster's kubeconfig. Default `default`: the cluster of "
        "every table attached without one, so a single-cluster installation sets nothing.",
    )
    namespaces: Annotated[frozenset[str] | None, NoDecode] = Field(
        default=None,
        description="Comma-separated namespaces the daemon may delete pods in; a row naming any other "
        "ends `dead` at once with the reason, and no request is sent. Default unset: every namespace "
        "except Kubernetes' own (kube-system, kube-public, kube-node-lease), which must be named to be "
        "reached. RBAC is the other wall; this one also holds under a kubeconfig that reaches everything. "
        "The shipped manifests set it to their namespace.",
    )
    dry_run_namespaces: Annotated[frozenset[str] | None, NoDecode] = Field(
        default=None,
        description="Comma-separated namespaces swept in dry run while the others are swept for real (a "
        "staged rollout): their DELETEs go with dryRun=All and their rows end `would_delete`, as with "
        "`dry_run`. A namespace taken off the list has its `would_delete` rows reopened at the next start. "
        "Default unset: none.",
    )
    replication_guard: Annotated[frozenset[str] | None, NoDecode] = Field(
        default=None,
        description="Comma-separated `application_name`s of standbys (as `pg_stat_replication` shows "
        "them): a row is claimed only once the WAL of its retire is flushed on every one of them, so a "
        "failover to one of them can never leave a pod deleted for a retire it lacks. For asynchronous "
        "standbys; a named standby that is not connected holds every claim. The runtime role needs "
        "`pg_read_all_stats` (or `pg_monitor`) to read their positions. Default unset: off.",
    )
    kube_context: str | None = Field(
        default=None,
        description="Context to use from the kubeconfig. Default: the kubeconfig's current context.",
    )
    poll_interval: Seconds = Field(
        default=5.0,
        description="Seconds between backstop polls when no NOTIFY arrives. Default 5: NOTIFY wakes the "
        "daemon at once; the poll only bounds the delay when a notification is lost.",
    )
    gather_seconds: Annotated[float, Field(ge=0, le=1)] = Field(
        default=0.0,
        description="Seconds (at most 1) a listening replica that has just claimed rows waits, awake, before it "
        "claims again; that claim clears the wakeup flag, so the retires after it send no NOTIFY (each one "
        "a transaction of every listener's) and are taken a pause's worth at a time. Default 0 (off): a "
        "sleeping replica claims each retire as its NOTIFY arrives, a quiet system's wake in milliseconds. "
        "0.05 at 100 retires a second with three replicas: about 0.9 transactions added a retire instead "
        "of 4.3 and the sweep's PostgreSQL CPU a quarter to a third less, but a retire that follows another "
        "within the pause waits for its end (docs/performance.md). No effect on a poll-only replica.",
    )
    lease_seconds: Annotated[float, Field(ge=5)] = Field(
        default=60.0,
        description="Seconds a claim stays owned before another replica may take it over. Default 60: "
        "far longer than one DELETE, short enough that a crashed replica's rows resume within a minute.",
    )
    concurrency: Annotated[int, Field(ge=1, le=1024)] = Field(
        default=16,
        description="Deletes in flight at once per process (and the HTTP connection pool size). "
        "Default 16: enough to hide API latency without crowding the API server.",
    )
    batch_size: Annotated[int, Field(ge=1, le=10_000)] = Field(
        default=100,
        description="Rows taken per claim transaction. Default 100: amortises the round trip while "
        "keeping each claim transaction short.",
    )
    max_attempts: Annotated[int, Field(ge=1, le=1000)] = Field(
        default=DEFAULT_MAX_ATTEMPTS,
        description="Attempts a row may take before it goes `dead` with its last error. Charged only for "
        "answers about the row itself (its own 5xx or timeout while the API server answers, a lease taken "
        "over after a crash); an API server that cannot be reached, a 429, a 401 or a 403 charges nothing. "
        f"Default {DEFAULT_MAX_ATTEMPTS}: with the default backoff, {DEFAULT_SPAN.retries} retries spanning "
        f"{describe_duration(DEFAULT_SPAN.shortest)} to {describe_duration(DEFAULT_SPAN.longest)}, so a row's "
        "own trouble gets at least an hour (`pod-sweeper check` says what the values in use span).",
    )
    request_timeout: Seconds = Field(
        default=10.0,
        description="Seconds one Kubernetes request may take, connect and read together; always "
        "capped below what is left of the claim's lease. Default 10.",
    )
    backoff_base: Seconds = Field(
        default=DEFAULT_BACKOFF_BASE,
        description="Seconds of the first retry delay's ceiling; the ceiling doubles per attempt up to "
        "`backoff_max`, and each delay is drawn between half and all of it (equal jitter). Default 1.",
    )
    backoff_max: Seconds = Field(
        default=DEFAULT_BACKOFF_MAX,
        description="Cap, in seconds, of one retry delay (also of a refused namespace's wait). Default 300: a "
        "row is retried at least every five minutes while its attempts last.",
    )
    rate_limit_qps: Annotated[float, Field(ge=0)] = Field(
        default=50.0,
        description="Kubernetes requests per second per process (token bucket, like client-go's QPS); "
        "0 turns the limit off. Default 50: protects the API server from a burst of retires.",
    )
    rate_limit_burst: Annotated[int, Field(ge=1)] = Field(
        default=100,
        description="Requests the token bucket may send at once above the rate. Default 100.",
    )
    events: bool = Field(
        default=True,
        description="Record a Kubernetes Event (reason `Retired`, from component `pod-sweeper`) on each pod "
        "the daemon deletes, so that `kubectl get events` says why it went. Best effort: a failed Event never "
        "delays or retries its row. Needs `create` on events (deploy/role.yaml). Default true.",
    )
    events_qps: Annotated[float, Field(gt=0)] = Field(
        default=5.0,
        description="Events per second per process, with a burst of five seconds' worth; a burst of deletions "
        "beyond what that lets through within a thousand queued Events is not recorded (counted in "
        'pod_sweeper_events_total{result="dropped"}). Default 5: the pace of client-go\'s recorder.',
    )
    transaction_pooler: bool = Field(
        default=False,
        description="Say true when `database_url` goes through a transaction pooler (PgBouncer with "
        "pool_mode=transaction, RDS Proxy, pgcat, Supavisor). LISTEN cannot work through one, so the "
        "daemon then polls every poll_interval unless `listen_database_url` gives a direct route for the "
        "listener, and psycopg prepares no server-side statements (the pooler would share or drop them). "
        "Everything else pod-sweeper does is pooler-safe either way. Default false.",
    )
    listen_database_url: SecretStr | None = Field(
        default=None,
        description="Connection URL used by the LISTEN connection alone, straight to the PostgreSQL "
        "server (not through a transaction pooler), so that NOTIFY wakeups keep working behind one. "
        "Default unset: the listener uses `database_url` (or, with `transaction_pooler`, does not run).",
    )
    listen: bool = Field(
        default=True,
        description="Use LISTEN/NOTIFY for wakeups; false polls every poll_interval. Default true (and "
        "ignored, as if false, with `transaction_pooler` unless `listen_database_url` is set).",
    )
    notify_check_interval: Seconds = Field(
        default=30.0,
        description="Seconds without any notification heard after which the listener proves it still hears "
        "with a NOTIFY round trip of its own (any notification heard proves it as well, so replicas that hear "
        "each other's send about one between them). Default 30.",
    )
    http_host: str = Field(
        default="0.0.0.0",
        description="Address the metrics and health server binds. Default 0.0.0.0 (probes and "
        "scrapes come from outside the pod).",
    )
    http_port: Annotated[int, Field(ge=0, le=65535)] = Field(
        default=9464,
        description="Port of /metrics, /livez and /readyz; 0 turns the server off. Default 9464.",
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="`text` for people at a terminal, `json` (one object per line) for journald and "
        "log shippers. Default text.",
    )
    log_level: Literal["TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR", "CRITICAL"] = Field(
        default="INFO",
        description="Lowest level logged. Default INFO.",
    )
    retention: timedelta = Field(
        default=timedelta(days=7),
        description="How long `done` rows are kept, in seconds or as an ISO 8601 duration (P7D). "
        "Default 7 days: long enough to answer 'what happened to that pod' after a weekend.",
    )
    audit_retention: timedelta = Field(
        default=timedelta(days=365),
        description="How long rows of the audit trail (`pod_sweeper.audit`) are kept, in seconds or as an ISO "
        "8601 duration (P365D); at least 30 days, which the database itself enforces. Default 365 days: "
        "far longer than done rows, since the trail is what answers 'who stopped it, and when'.",
    )
    shutdown_timeout: Seconds = Field(
        default=20.0,
        description="Seconds in-flight deletes get to finish after SIGTERM before the process hands "
        "back its claims and exits. Default 20: under Kubernetes' 30 s termination grace period.",
    )
    on_start_error: Literal["exit", "wait"] = Field(
        default="exit",
        description="What `run` does with a start-up error a person must fix (a bad setting, the schema "
        "behind or too new, the role not granted yet, an unreadable kubeconfig, no database URL). `exit`: "
        "one line and exit 2 or 3, which the systemd unit does not restart. `wait`: the process stays up, "
        "`/livez` answers, `/readyz` and `pod_sweeper_start_error` say why, the ERROR line repeats and the "
        "step is tried again, so that a sidecar never keeps its pod's other containers from starting and a "
        "first install needs no restart (deploy/sidecar, deploy/deployment.yaml and the chart set it). "
        "Default exit.",
    )
    migrate_lock_timeout: Annotated[float, Field(gt=0, le=60)] = Field(
        default=0.5,
        description="Seconds each lock `pod-sweeper migrate` asks for may wait. A lock it cannot have by "
        "then (another transaction holds a conflicting one: a DBA's open session, a long report) is given "
        "up, the migration rolled back and tried again later, so no write of the host queues behind a "
        "migration for longer than this. Default 0.5.",
    )
    migrate_deadline: Seconds = Field(
        default=600.0,
        description="Seconds `pod-sweeper migrate` keeps retrying a migration whose locks are taken, with "
        "a growing pause (up to 10 s) between tries, before it gives up: exit 1, one line naming the oldest "
        "transaction that held a lock on pod-sweeper's tables. Default 600.",
    )
    connect_timeout: Annotated[int, Field(ge=1, le=300)] = Field(
        default=5,
        description="Seconds to wait for a database connection. Default 5.",
    )
    max_deletes_per_minute: Annotated[int, Field(ge=0)] = Field(
        default=0,
        description="Blast-radius breaker, an exact ceiling: deletes allowed per minute in one cluster, "
        "counted across all of its replicas from the attempt history, the cluster's breaker row locked for "
        "each claim; past it the cluster's deletes stop until `pod-sweeper reset-breaker --cluster NAME`. "
        "The count costs each claim a read of the last minute's deletes, which at 100 retires a second is "
        "what the claims spend most on (bench/README.md, step busy), and serializes the replicas' claims. "
        "The surge and transaction rules below trip on what a bad migration or script looks like without "
        "either. Default 0: off.",
    )
    breaker_surge_factor: Annotated[float, Field(ge=0)] = Field(
        default=4.0,
        description="Blast-radius breaker, the surge rule: the cluster's breaker trips when its host "
        "retires of the last 2 s arrive faster than this many times its own recent rate (an average over "
        "about 10 minutes, read from the outbox at start and followed since) and faster than "
        "`POD_SWEEPER_BREAKER_SURGE_FLOOR`. Steady churn, or churn that grows over minutes, never trips "
        "it; a script retiring thousands in seconds does. 0 turns the rule off. Default 4.",
    )
    breaker_surge_floor: Annotated[float, Field(gt=0)] = Field(
        default=200.0,
        description="Retires a second below which the surge rule never trips, whatever the recent rate "
        "(a quiet cluster's rate is near 0, so any retire would be a surge). Default 200: twice the "
        "~100 a second SIG Scalability plans for one cluster, and low enough that a script retiring "
        "5,000 over 10 s trips it within 1 s.",
    )
    breaker_transaction_rows: Annotated[int, Field(ge=0)] = Field(
        default=500,
        description="Blast-radius breaker, the transaction rule: one host transaction that retires this many "
        "executions of a cluster (its rows share the transaction's time) is kept back, its rows neither sent nor "
        "charged until an on-call releases or discards it, while the cluster's other rows sweep on; found by "
        "the first claim of its rows, which is rolled back: none of them is sent. Backfill and "
        "reconciliation rows do not count. 0 turns the rule off. "
        "Default 500: a control plane retires executions one or a few at a time; a migration or a "
        "script's UPDATE retires them by the thousand.",
    )
    stuck_terminating_seconds: Seconds = Field(
        default=900.0,
        description="Seconds after its DELETE a pod may still be terminating before it is reported "
        "stuck (log, metric, `status`). Default 900: well past any sane grace period.",
    )
    force_stuck: bool = Field(
        default=False,
        description="Force-delete (gracePeriodSeconds=0, still under the UID precondition) a stuck pod "
        "whose node no longer exists, where no kubelet will ever finish it. Default false: never force.",
    )
    reconcile_sandbox_label: str | None = Field(
        default=None,
        pattern=_LABEL_KEY,
        description="Label key whose value on a pod is its execution's sandbox_id. The reconciliation "
        "pass runs only when this and `reconcile_generation_label` are both set. Default unset: no pass.",
    )
    reconcile_generation_label: str | None = Field(
        default=None,
        pattern=_LABEL_KEY,
        description="Label key whose value on a pod is its execution's generation (an integer). "
        "Default unset: no reconciliation pass.",
    )
    reconcile_namespace: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        max_length=63,
        description="Namespace the reconciliation pass lists pods in; required when the labels are set "
        "(the Role in deploy/ grants list there only). Default unset.",
    )
    reconcile_interval: Seconds = Field(
        default=300.0,
        description="Seconds between reconciliation passes, counted across all replicas (one replica at a "
        "time runs it, holding the lease row in pod_sweeper.reconcile_state). Default 300: a backstop, not the "
        "fast path.",
    )
    reconcile_quarantine: Seconds = Field(
        default=600.0,
        description="Seconds a suspect pod must stay a suspect, seen again on a later pass, before it is "
        "confirmed and enqueued. Default 600: longer than a control plane's slowest retire.",
    )
    reconcile_min_age: Seconds = Field(
        default=900.0,
        description="Seconds a pod must have existed before the pass looks at it, so that a create whose "
        "execution row is not written yet is never a suspect. Default 900.",
    )
    reconcile_page_size: int = Field(
        default=500,
        ge=1,
        le=5000,
        description="Pods per list request (`limit`, then `continue`). Default 500: bounded memory and "
        "API server load, few round trips.",
    )
    dry_run: bool = Field(
        default=False,
        description="Run the whole pipeline (claims, re-check, fencing) but send every DELETE with "
        "dryRun=All: nothing is deleted and rows end `would_delete`, which the next real run reopens. "
        "Default false. Do not mix dry-run and real replicas on one outbox.",
    )
    replica_id: str = Field(
        default_factory=_default_replica_id,
        min_length=1,
        max_length=200,
        description="Name recorded as claimed_by on the rows this process claims. Default hostname-pid.",
    )
    failpoints: str = Field(
        default="",
        description="For the chaos tests only: places where the daemon kills, raises in or stalls itself "
        "on purpose (`after_claim`, `after_answer`, `during_record`, `listener`; e.g. `after_answer=kill@3`, "
        "docs/design.md). Default empty: none. Armed ones are logged as a WARNING at start and set "
        "`pod_sweeper_failpoints_armed`; never set it in production.",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get(CONFIG_FILE_ENV)
        if config_file:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=Path(config_file)))
        return tuple(sources)

    @field_validator("namespaces", "dry_run_namespaces", mode="before")
    @classmethod
    def _namespace_list(cls, value: Any) -> Any:
        value = _names(value, "names no namespace; leave it unset for the default scope")
        if isinstance(value, list | tuple | set | frozenset):
            bad = [ns for ns in value if not isinstance(ns, str) or not re.fullmatch(_DNS_LABEL, ns) or len(ns) > 63]
            if bad:
                raise ValueError(f"{', '.join(repr(ns) for ns in bad)}: not a Kubernetes namespace name")
        return value

    @field_validator("replication_guard", mode="before")
    @classmethod
    def _standby_list(cls, value: Any) -> Any:
        return _names(value, "names no standby; leave it unset to turn the guard off")

    @field_validator("failpoints")
    @classmethod
    def _failpoints_read(cls, value: str) -> str:
        failpoints.parse(value)
        return value

    @field_validator("retention", "audit_retention", mode="before")
    @classmethod
    def _seconds_or_iso8601(cls, value: Any) -> Any:
        # The environment gives strings; a bare number there means seconds, as it does in TOML.
        if isinstance(value, str) and re.fullmatch(r"\s*-?\d+(\.\d+)?\s*", value):
            return float(value)
        return value

    @field_validator("retention")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError("retention must be positive")
        return value

    @field_validator("audit_retention")
    @classmethod
    def _a_month_at_least(cls, value: timedelta) -> timedelta:
        if value < timedelta(days=30):
            raise ValueError("the audit trail is kept 30 days at least")
        return value

    @field_validator("database_url", "listen_database_url")
    @classmethod
    def _parse_database_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        try:
            conninfo_to_dict(value.get_secret_value())
        except psycopg.ProgrammingError:
            # libpq's message may quote the URL, password included: say only what is wrong.
            raise ValueError("not a valid libpq connection string or postgresql:// URL") from None
        return value

    @model_validator(mode="after")
    def _check_relations(self) -> Settings:
        if self.request_timeout >= self.lease_seconds:
            raise ValueError(
                f"request_timeout ({self.request_timeout:g} s) must be shorter than "
                f"lease_seconds ({self.lease_seconds:g} s)"
            )
        if self.backoff_base > self.backoff_max:
            raise ValueError("backoff_base must not exceed backoff_max")
        labels = (self.reconcile_sandbox_label, self.reconcile_generation_label)
        if (labels[0] is None) != (labels[1] is None):
            raise ValueError("reconcile_sandbox_label and reconcile_generation_label are set together or not at all")
        if labels[0] is not None and labels[0] == labels[1]:
            raise ValueError("reconcile_sandbox_label and reconcile_generation_label must differ")
        if self.reconcile and self.reconcile_namespace is None:
            raise ValueError("reconcile_namespace is required when the reconcile labels are set")
        return self

    @property
    def reconcile(self) -> bool:
        """Whether the reconciliation pass runs (both label keys set)."""
        return self.reconcile_sandbox_label is not None and self.reconcile_generation_label is not None

    @property
    def listens(self) -> bool:
        """Whether the LISTEN connection runs: asked for, and with a route that is not a pooler."""
        return self.listen and (self.listen_database_url is not None or not self.transaction_pooler)

    @property
    def guard_standbys(self) -> list[str] | None:
        """The standbys the replication guard names, sorted, as the statements take them (None: off)."""
        return sorted(self.replication_guard) if self.replication_guard else None

    @property
    def breaker_on(self) -> bool:
        """Whether any of the breaker's rules is on (the claim then reads the cluster's breaker row)."""
        return bool(self.max_deletes_per_minute or self.breaker_surge_factor or self.breaker_transaction_rows)

    def wakeup_mode(self) -> str:
        """How a replica with these settings wakes up, in words (the start-up line, ``check``)."""
        if self.listens:
            route = " (direct, listen_database_url)" if self.listen_database_url is not None else ""
            return f"LISTEN/NOTIFY{route} with poll backstop"
        if self.listen:
            return "poll only (transaction_pooler and no listen_database_url)"
        return "poll only (listen=false)"

    def listen_conninfo(self) -> str:
        """The connection string of the LISTEN connection."""
        if self.listen_database_url is not None:
            return self.listen_database_url.get_secret_value()
        return self.require_database_url()

    def require_database_url(self) -> str:
        """The connection string; raises ConfigError when it is not set."""
        if self.database_url is None:
            raise ConfigError(f"{ENV_PREFIX}DATABASE_URL is not set: say which database holds the outbox")
        return self.database_url.get_secret_value()

    def redacted_database_url(self) -> str:
        """The connection string with any password replaced, safe to log."""
        if self.database_url is None:
            return "(unset)"
        return redact_conninfo(self.database_url.get_secret_value())


@functools.cache
def secret_keywords() -> frozenset[str]:
    """The libpq connection keywords that can hold a secret: those libpq itself marks as passwords (its
    ``dispchar`` ``*``: password, sslpassword, oauth_client_secret), and the SCRAM keys it passes through
    (scram_client_key, scram_server_key). Read from the libpq psycopg runs on, so a newer libpq's are
    masked too; the first three always are."""
    marked = {
        option.keyword.decode()
        for option in pq.Conninfo.get_defaults()
        if option.dispchar == b"*" or option.keyword.startswith(b"scram_")
    }
    return frozenset(marked | {"password", "sslpassword", "oauth_client_secret"})


def redact_conninfo(conninfo: str) -> str:
    """``conninfo`` (a URL or key=value) with every secret masked, for logs, errors and output."""
    params = {k: str(v) for k, v in conninfo_to_dict(conninfo).items() if v is not None}
    for keyword in secret_keywords() & params.keys():
        params[keyword] = "***"
    return make_conninfo("", **params)


def load_settings(**overrides: Any) -> Settings:
    """Read the settings; raises ConfigError with one line naming the first bad setting."""
    config_file = os.environ.get(CONFIG_FILE_ENV)
    if config_file and not Path(config_file).is_file():
        raise ConfigError(f"{CONFIG_FILE_ENV}: config file {config_file} does not exist")
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc)) from None
    except (OSError, ValueError) as exc:  # a TOML file that does not parse
        raise ConfigError(f"{CONFIG_FILE_ENV}: cannot read {config_file}: {exc}") from None


def describe_validation_error(exc: ValidationError) -> str:
    """One line naming the first invalid setting and what is wrong with it (never its value)."""
    error = exc.errors()[0]
    field = ".".join(str(part) for part in error["loc"])
    message = error["msg"].removeprefix("Value error, ")
    more = len(exc.errors()) - 1
    suffix = f" (and {more} more)" if more else ""
    if not field:  # a rule that ties several settings together
        return f"invalid settings: {message}{suffix}"
    return f"invalid setting {ENV_PREFIX}{field.upper()}: {message}{suffix}"


def unknown_environment() -> list[str]:
    """``POD_SWEEPER_*`` variables that name no setting: most likely typos worth a warning."""
    known = {f"{ENV_PREFIX}{name.upper()}" for name in Settings.model_fields} | _FOREIGN_ENV
    return sorted(k for k in os.environ if k.startswith(ENV_PREFIX) and k not in known)
