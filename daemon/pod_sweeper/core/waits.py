"""Why a row waits: every reason pod-sweeper keeps a retired pod's row from being swept, in one table.

Each reason was built in its own issue (a pause, a hold, the breaker, the replication guard, an outage,
a refusal, the schema gate, a start error, backoff, another replica's claim, dry run, no replica at
all); this module is the one place that says, for each, what it is, what ends it, what an operator
does about it, whether a replica that it stops stays ready, and which alert pages for it. Every surface
reads it: ``explain`` names a row's reason (``sql/row_waits.sql`` decides which, by the precedence
``ROW_ORDER`` states), ``status`` counts the rows each reason keeps per cluster, the metric
``pod_sweeper_waiting_rows{cluster, reason}`` and ``pod_sweeper_waiting{reason}`` carry the value,
``WaitLog`` logs when a reason starts and ends, and readiness fails for the reasons whose ``ready`` is
False. Pure data and pure functions: no I/O here.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


class Wait(enum.StrEnum):
    """A reason a row waits; its value is the metric's label value and what ``sql/row_waits.sql``
    returns."""

    CLAIMED = "claimed"
    HELD = "held"
    PAUSED = "paused"
    LARGE_TRANSACTION = "large_transaction"
    BREAKER = "breaker"
    REPLICATION_GUARD = "replication_guard"
    KUBE_UNREACHABLE = "kube_unreachable"
    KUBE_UNAUTHORIZED = "kube_unauthorized"
    NAMESPACE_REFUSED = "namespace_refused"
    SCHEMA = "schema"
    START_ERROR = "start_error"
    BACKOFF = "backoff"
    DRY_RUN = "dry_run"
    UNSWEPT = "unswept"


class Seen(enum.Enum):
    """Where a reason can be seen: on the row in the database (``explain``, ``status`` and the row
    gauge read it there), in the replica alone (its gauge, log and readiness), or both."""

    ROW = "row"
    REPLICA = "replica"
    BOTH = "both"


@dataclass(frozen=True)
class Rule:
    """What one reason is and how it ends, for people."""

    what: str  # what keeps the row, in a phrase
    ends: str  # what ends the wait
    act: str  # what an operator does (a command or a setting), or that nothing is needed
    ready: bool  # whether a replica this reason stops stays ready (docs/design.md, "Why a row waits")
    alert: str  # the alert that pages for it ("" when none should)
    seen: Seen
    # Routine: every row passes through it in ordinary work (a claim, a retry's backoff); its log is the
    # attempt's own line, so ``WaitLog`` says nothing of it.
    routine: bool = False


RULES: Mapping[Wait, Rule] = {
    Wait.CLAIMED: Rule(
        "a replica has claimed it: its DELETE is in flight or its result is being recorded",
        "the result is recorded, or the claim's lease ends and another replica takes it",
        "nothing; a claim older than its lease means its replica died or froze",
        True,
        "PodSweeperStuckClaim",
        Seen.ROW,
        routine=True,
    ),
    Wait.HELD: Rule(
        "an on-call's hold on the pod",
        "the hold's end",
        "`pod-sweeper release NAMESPACE/NAME --cluster CLUSTER`",
        True,
        "",
        Seen.ROW,
    ),
    Wait.PAUSED: Rule(
        "an on-call's pause of its cluster or namespace",
        "the pause's end",
        "`pod-sweeper unpause --cluster CLUSTER [--namespace NAMESPACE]`",
        True,
        "PodSweeperPausedLong",
        Seen.BOTH,
    ),
    Wait.LARGE_TRANSACTION: Rule(
        "the breaker's transaction rule: one host transaction retired so many that its rows are kept back "
        "as one batch, neither sent nor charged (the cluster's other rows sweep on)",
        "an on-call releases the transaction or discards its rows",
        "look at what retired them (`pod-sweeper status` names the transaction), then `pod-sweeper "
        "release-transaction ID` (a preview first) or `pod-sweeper discard-transaction ID --reason TEXT`",
        True,
        "PodSweeperLargeTransaction",
        Seen.ROW,
    ),
    Wait.BREAKER: Rule(
        "the blast-radius breaker of its cluster is tripped",
        "a person resets the breaker",
        "look at what retired so many, then `pod-sweeper reset-breaker --cluster CLUSTER`",
        False,
        "PodSweeperBreakerTripped",
        Seen.BOTH,
    ),
    Wait.REPLICATION_GUARD: Rule(
        "the replication guard: a standby it names has not flushed the retire's WAL, or is not connected",
        "every named standby has flushed past the retire (looked at again 50 ms to 5 s apart)",
        "check the standby (`pod-sweeper status` shows its lag); after a failover, point "
        "POD_SWEEPER_REPLICATION_GUARD at the new standby",
        True,
        "PodSweeperReplicationGuardHolding",
        Seen.BOTH,
    ),
    Wait.KUBE_UNREACHABLE: Rule(
        "the cluster's API server cannot be reached (or answers 5xx to everything)",
        "the first probe the API server answers",
        "restore the API server or the network to it; nothing to do in pod-sweeper",
        False,
        "PodSweeperKubeUnreachable",
        Seen.BOTH,
    ),
    Wait.KUBE_UNAUTHORIZED: Rule(
        "the API server refuses the daemon's credentials (401)",
        "the first answer that is not 401",
        "fix the token or kubeconfig the replica reads (POD_SWEEPER_KUBECONFIG, the ServiceAccount)",
        False,
        "PodSweeperNotReady",
        Seen.BOTH,
    ),
    Wait.NAMESPACE_REFUSED: Rule(
        "the API server refuses deletes in its namespace (403)",
        "the first answer in that namespace that is not 403",
        "grant the daemon 'delete' and 'get' on pods there, or lift the admission policy that refuses",
        True,
        "PodSweeperNamespaceRefused",
        Seen.BOTH,
    ),
    Wait.SCHEMA: Rule(
        "the replica may not run on the database's schema (a newer release's migration, or a schema behind)",
        "the schema and the release agree again",
        "roll the replicas out to the release the schema wants, or run `pod-sweeper migrate`",
        False,
        "PodSweeperNotReady",
        Seen.REPLICA,
    ),
    Wait.START_ERROR: Rule(
        "the replica cannot start (with ON_START_ERROR=wait, as the shipped manifests set it, it waits, not ready)",
        "the cause fixed; the replica tries again by itself",
        "read the replica's /readyz or log line: it names the setting or grant to fix",
        False,
        "PodSweeperNotReady",
        Seen.REPLICA,
    ),
    Wait.BACKOFF: Rule(
        "backoff after a failed DELETE",
        "its next attempt's time",
        "nothing; `pod-sweeper retry ID` sends it now",
        True,
        "",
        Seen.ROW,
        routine=True,
    ),
    Wait.DRY_RUN: Rule(
        "dry run: the replica records what it would delete and deletes nothing",
        "a run without dry run, which reopens the rows it would have deleted",
        "unset POD_SWEEPER_DRY_RUN (or take the namespace off POD_SWEEPER_DRY_RUN_NAMESPACES)",
        True,
        "",
        Seen.REPLICA,
    ),
    Wait.UNSWEPT: Rule(
        "claimable for over a minute with no other reason: no replica of its cluster claims it",
        "a replica of its cluster claims it",
        "start a replica for the cluster, or read the replicas' /readyz (a start error or the schema gate "
        "keeps them from claiming)",
        True,
        "PodSweeperClusterUnswept",
        Seen.ROW,
    ),
}

# The order in which sql/row_waits.sql gives a row its one reason, first first (a claimed row is
# claimed, whatever else holds; a hold outranks the cluster's breaker, which outranks the guard...).
# The replica-only reasons are not in it: the database cannot see them.
ROW_ORDER: tuple[Wait, ...] = (
    Wait.CLAIMED,
    Wait.HELD,
    Wait.PAUSED,
    Wait.LARGE_TRANSACTION,
    Wait.BREAKER,
    Wait.REPLICATION_GUARD,
    Wait.KUBE_UNREACHABLE,
    Wait.KUBE_UNAUTHORIZED,
    Wait.NAMESPACE_REFUSED,
    Wait.BACKOFF,
    Wait.UNSWEPT,
)
UNSWEPT_AFTER_SECONDS = 60.0  # a claimable row waits this long before it counts as unswept
DUE = "due"  # what sql/row_waits.sql returns for a row nothing keeps: the next claim takes it


def describe(wait: Wait, detail: str = "") -> str:
    """One line for a person: what keeps it (and the particulars), what ends it, what to do."""
    rule = RULES[wait]
    particulars = f" ({detail})" if detail else ""
    return f"waits [{wait.value}]: {rule.what}{particulars}; ends when {rule.ends}; to act: {rule.act}"


def unready(active: Mapping[Wait, str]) -> list[str]:
    """The readiness problems among the replica's active reasons (reason -> what its owner says)."""
    return [f"{detail} [{wait.value}]" for wait, detail in active.items() if not RULES[wait].ready]


@dataclass(frozen=True)
class Process:
    """What readiness needs of the process beside the reasons rows wait: a stop begun, the database's
    last answer (None: it answered), the schema checked, the listener (None: poll-only), the start done."""

    stopping: bool = False
    database_error: str | None = None
    schema_checked: bool = True
    listener_hearing: bool | None = None
    started: bool = True


def readiness(active: Mapping[Wait, str], process: Process) -> tuple[bool, str]:
    """Whether the replica is ready, and why not: the one decision ``/readyz``, ``pod_sweeper_ready``, the
    systemd status, the replica's row in pod_sweeper.replicas and the runner read (through
    ``Health.readiness``). Not ready while it stops, while the database does not answer, before the schema
    is checked, while a listener it has does not hear NOTIFY, for each active reason whose rule says not
    ready (``unready``), and until the start-up is done."""
    problems = ["stopping"] if process.stopping else []
    if process.database_error is not None:
        problems.append(f"database: {process.database_error}")
    if not process.schema_checked:
        problems.append("schema not checked")
    if process.listener_hearing is False:
        problems.append("listener not hearing NOTIFY")
    problems += unready(active)
    if not process.started:
        problems.append("starting")
    return (not problems, "; ".join(problems) or "ok")


class WaitLog:
    """The log's view of the reasons: ``update`` is given what holds now (reason and scope, e.g. a
    cluster or a namespace, to the particulars) and returns the lines to log, one when a reason starts
    and one when it ends, never one per claim or per refresh."""

    def __init__(self) -> None:
        self._active: dict[tuple[Wait, str], str] = {}

    def update(self, now: Mapping[tuple[Wait, str], str]) -> list[tuple[str, str]]:
        """``(level, line)`` pairs for what started and what ended since the last call."""
        lines: list[tuple[str, str]] = []
        now = {key: detail for key, detail in now.items() if not RULES[key[0]].routine}
        for key in sorted(set(now) - set(self._active)):
            wait, scope = key
            where = f" ({scope})" if scope else ""
            lines.append(("WARNING", f"waiting started{where}: " + describe(wait, now[key])))
        for key in sorted(set(self._active) - set(now)):
            wait, scope = key
            where = f" ({scope})" if scope else ""
            lines.append(("INFO", f"waiting ended{where}: [{wait.value}] {RULES[wait].what}"))
        self._active = dict(now)
        return lines

    @property
    def active(self) -> Iterable[tuple[Wait, str]]:
        return tuple(self._active)
