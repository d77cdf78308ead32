"""The breaker's two rules for telling a bad migration or script from steady churn, free of I/O.

An absolute count of deletes cannot tell a busy day from a bad script: 60 retires a second is 3,600 a
minute of honest churn, and a script retiring 5,000 at once may be the first thing a quiet cluster sees
all day. What a mistake looks like is a departure from the cluster's own recent rate, or one host
transaction retiring many executions at once. Both are read from the outbox before the rows are
deleted, which an after-the-fact count of deletes cannot do: the surge by the surge watch
(tasks/loops/surge.py), the transaction by the claim that takes its first rows (store/sweep/outbox.py), in
the claim's own transaction, so none of them is sent.

``judge`` says whether what arrived trips the breaker, and why; ``transaction_reason`` says it of one
transaction the claim found; ``Baseline`` is the cluster's recent
rate that the surge rule compares with, an average over about ten minutes that follows churn as it
grows and forgets a quiet night. The numbers behind the defaults are in docs/operations.md ("The
blast-radius breaker").
"""

from __future__ import annotations

from dataclasses import dataclass

from pod_sweeper.core.settings import Settings
from pod_sweeper.store.sweep.rates import Arrivals

# Seconds of arrivals the surge rule looks at, and seconds between looks. A short window sees a script
# within a second of its start; two seconds of a steady 100 a second is 200 rows, far from noise.
SURGE_WINDOW = 2.0
SURGE_INTERVAL = 0.5
# Seconds over which the recent rate forgets: long enough that a surge of a minute moves it little,
# short enough that a platform's daily rise (minutes to hours) is followed.
BASELINE_SECONDS = 600.0


@dataclass(frozen=True)
class SurgeRules:
    """The rules as the settings have them; 0 turns a rule off."""

    factor: float  # the surge rule: times the recent rate
    floor: float  # retires a second below which the surge rule never trips
    transaction_rows: int  # the transaction rule: rows of one host transaction

    @classmethod
    def of(cls, settings: Settings) -> SurgeRules:
        return cls(settings.breaker_surge_factor, settings.breaker_surge_floor, settings.breaker_transaction_rows)

    @property
    def watched(self) -> bool:
        """Whether the surge watch has a rule to apply (the transaction rule is the claim's)."""
        return bool(self.factor)

    def threshold(self, recent_rate: float) -> float:
        """Retires a second above which the surge rule trips now."""
        return max(self.floor, self.factor * recent_rate)


class Baseline:
    """The cluster's recent arrival rate: an exponentially weighted average over ``BASELINE_SECONDS``."""

    def __init__(self, rate: float = 0.0, horizon: float = BASELINE_SECONDS) -> None:
        self.rate = rate
        self._horizon = horizon

    def learn(self, rate: float, seconds: float) -> None:
        """Fold ``rate``, seen for ``seconds``, into the average."""
        weight = min(1.0, max(0.0, seconds) / self._horizon)
        self.rate += weight * (rate - self.rate)


def _reset(cluster: str) -> str:
    return f"check what retired them, then run `pod-sweeper reset-breaker --cluster {cluster}`"


def transaction_reason(size: int, rules: SurgeRules, cluster: str) -> str:
    """Why the transaction rule holds one host transaction of at least ``size`` rows (those a claim took
    and those still pending: 'at least', since rows already swept are not counted)."""
    return (
        f"cluster {cluster}: one host transaction retired at least {size} executions "
        f"(POD_SWEEPER_BREAKER_TRANSACTION_ROWS={rules.transaction_rows}); check what retired them, then "
        "`pod-sweeper release-transaction ID` or `pod-sweeper discard-transaction ID --reason TEXT`"
    )


def judge(rules: SurgeRules, arrivals: Arrivals, recent_rate: float, cluster: str) -> str | None:
    """Why the surge rule trips the cluster's breaker now (None: it does not)."""
    reset = _reset(cluster)
    if rules.factor and arrivals.rate > rules.threshold(recent_rate):
        return (
            f"cluster {cluster}: {arrivals.arrived} retires in {arrivals.window:g} s ({arrivals.rate:.0f}/s) "
            f"against a recent rate of {recent_rate:.1f}/s (POD_SWEEPER_BREAKER_SURGE_FACTOR="
            f"{rules.factor:g}, POD_SWEEPER_BREAKER_SURGE_FLOOR={rules.floor:g}/s); {reset}"
        )
    return None
