"""The log line of a row's round, one wording wherever the round was decided (at the claim or after
its DELETE): nothing for a row that is done or handed back, INFO for a retry, ERROR for a dead row.
"""

from __future__ import annotations

from loguru import logger

from pod_sweeper.core.states import Result
from pod_sweeper.store.rows import Claim, Verdict


def log_verdict(claim: Claim, verdict: Verdict) -> None:
    """One line for a row that waits for a retry, or is dead."""
    if verdict.result is Result.RETRY:
        logger.info(
            "row {id} will be retried in {delay:.1f} s: {error}", id=claim.id, delay=verdict.delay, error=verdict.error
        )
    elif verdict.result is Result.DEAD:
        logger.error(
            "row {id} ({ns}/{pod}) is dead after {n} attempt(s): {error}",
            id=claim.id,
            ns=claim.pod_namespace,
            pod=claim.pod_name,
            n=claim.attempts if verdict.charged else claim.attempts - 1,
            error=verdict.error,
        )
