"""The answer table of docs/design.md, row by row, as ``outcomes.decide`` applies it: no database, no
thread, no server."""

from __future__ import annotations

import random

import pytest

from pod_sweeper.core.backoff import Backoff
from pod_sweeper.core.errors import KubeConflict, KubeRejected, KubeRetryable, KubeUnauthorized
from pod_sweeper.core.outcome import Outcome
from pod_sweeper.kube.api import Answer
from pod_sweeper.tasks.outcomes import CONFIRM_MARGIN_SECONDS, Verdict, answer_label, decide, needs_probe

BACKOFF = Backoff(1.0, 300.0, rng=random.Random(7))


def ruling(result: Answer | BaseException, attempts: int = 1, max_attempts: int = 10) -> tuple[object, ...]:
    d = decide(result, attempts=attempts, max_attempts=max_attempts, backoff=BACKOFF)
    return (d.verdict, d.outcome, d.http_status, d.reason)


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        (Answer(Outcome.DELETED, 200), Outcome.DELETED),  # 200 / 202
        (Answer(Outcome.ABSENT, 404), Outcome.ABSENT),  # 404, or a 409 whose GET finds nothing
        (Answer(Outcome.REPLACED, 409), Outcome.REPLACED),  # 409 whose GET finds another UID
        (Answer(Outcome.WOULD_DELETE, 200), Outcome.WOULD_DELETE),  # dry run
    ],
)
def test_an_answer_ends_the_row_done_with_its_outcome(answer: Answer, outcome: Outcome) -> None:
    assert ruling(answer) == (Verdict.DONE, outcome, answer.http_status, None)
    assert decide(answer, attempts=1, max_attempts=10, backoff=BACKOFF).confirm_in is None


def test_a_pod_left_terminating_is_looked_at_again_after_its_grace() -> None:
    d = decide(Answer(Outcome.DELETED, 200, grace_seconds=30), attempts=1, max_attempts=10, backoff=BACKOFF)
    assert (d.verdict, d.confirm_in) == (Verdict.DONE, 30 + CONFIRM_MARGIN_SECONDS)


@pytest.mark.parametrize(
    "error",
    [
        KubeRetryable("500 InternalError", status=500, reason="InternalError"),
        KubeRetryable("503 ServiceUnavailable", status=503, reason="ServiceUnavailable"),
        KubeRetryable("504 Timeout", status=504, reason="Timeout"),
        KubeRetryable("read timed out"),  # a timeout or a connection error: no status
    ],
    ids=["500", "503", "504", "timeout"],
)
def test_the_rows_own_trouble_is_retried_with_backoff_until_the_attempts_run_out(error: KubeRetryable) -> None:
    """No answer or a 5xx while the API server shows it is up (server_down False): the row's own."""
    assert needs_probe(error)
    retry = decide(error, attempts=3, max_attempts=10, backoff=BACKOFF)
    assert retry.verdict is Verdict.RETRY and BACKOFF.ceiling(3) / 2 <= retry.delay <= BACKOFF.ceiling(3)
    assert retry.http_status == error.status and retry.error == str(error)
    dead = decide(error, attempts=10, max_attempts=10, backoff=BACKOFF)
    assert (dead.verdict, dead.exhausted, dead.error) == (Verdict.DEAD, True, str(error))


@pytest.mark.parametrize(
    "error",
    [KubeRetryable("connection refused"), KubeRetryable("503", status=503, reason="ServiceUnavailable")],
    ids=["no-answer", "503"],
)
def test_an_api_server_found_down_holds_the_row_uncharged_whatever_its_attempts(error: KubeRetryable) -> None:
    held = decide(error, attempts=10, max_attempts=10, backoff=BACKOFF, server_down=True)
    assert (held.verdict, held.delay, held.http_status) == (Verdict.HELD, 0.0, error.status)  # never dead


def test_a_429_is_the_servers_load_not_the_row_so_it_waits_uncharged_at_least_as_asked() -> None:
    error = KubeRetryable("429 TooManyRequests", status=429, reason="TooManyRequests", retry_after=None)
    assert not needs_probe(error)  # an answer: the server is up
    held = decide(error, attempts=10, max_attempts=10, backoff=BACKOFF)
    assert (held.verdict, held.http_status, held.reason) == (Verdict.HELD, 429, "TooManyRequests")
    assert held.delay <= BACKOFF.cap


def test_retry_after_is_a_floor_for_the_wait() -> None:
    error = KubeRetryable("429", status=429, reason="TooManyRequests", retry_after=120.0)
    assert decide(error, attempts=1, max_attempts=10, backoff=BACKOFF).delay >= 120.0


def test_a_transport_error_is_recorded_by_its_kind() -> None:
    error = KubeRetryable("connection refused")
    error.__cause__ = ConnectionRefusedError()
    assert ruling(error)[3] == "ConnectionRefusedError"


@pytest.mark.parametrize("status", [401, 403])
def test_401_and_403_are_the_daemons_fault_not_the_rows(status: int) -> None:
    error = KubeUnauthorized(f"{status}", status=status, reason="Forbidden" if status == 403 else "Unauthorized")
    assert ruling(error, attempts=10, max_attempts=10)[:3] == (Verdict.REFUSED, None, status)  # never dead


@pytest.mark.parametrize("status", [400, 410, 422])
def test_any_other_4xx_is_dead_at_once(status: int) -> None:
    d = decide(
        KubeRejected(f"{status} Invalid", status=status, reason="Invalid"), attempts=1, max_attempts=10, backoff=BACKOFF
    )
    assert (d.verdict, d.exhausted, d.http_status) == (Verdict.DEAD, False, status)


def test_only_no_answer_or_a_5xx_needs_the_probe() -> None:
    assert not needs_probe(Answer(Outcome.DELETED, 200))
    assert not needs_probe(KubeRejected("422", status=422, reason="Invalid"))
    assert not needs_probe(KubeUnauthorized("401", status=401, reason="Unauthorized"))
    assert not needs_probe(RuntimeError("a bug"))  # a bug is no news about the server


def test_an_unforeseen_error_is_uncertain_so_the_row_is_kept() -> None:
    assert ruling(RuntimeError("a bug"))[0] is Verdict.RETRY
    assert ruling(KubeConflict("409 resolved elsewhere", status=409, reason="Conflict"))[0] is Verdict.RETRY
    assert decide(RuntimeError("a bug"), attempts=10, max_attempts=10, backoff=BACKOFF).verdict is Verdict.DEAD


def test_the_answer_label() -> None:
    assert answer_label(Answer(Outcome.DELETED, 200)) == "200"
    assert answer_label(KubeRetryable("503", status=503)) == "503"
    assert answer_label(KubeRetryable("timed out")) == "none"
    assert answer_label(RuntimeError("x")) == "none"
