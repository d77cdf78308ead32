"""The answer table of docs/design.md, row by row, as ``tasks.rules.verdicts`` applies it: no database, no
thread, no server. Every row of the table has a case here, keyed by its first column, and a test holds
the two to each other: a row added to the page without a case, or a case whose row was removed, fails."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

import pytest

from pod_sweeper.core.backoff import Backoff
from pod_sweeper.core.states import Outcome, Result, Status, exhausted
from pod_sweeper.kube.answer import Answer
from pod_sweeper.store.rows import Claim, Recheck, Verdict
from pod_sweeper.tasks.rules import verdicts
from pod_sweeper.tasks.rules.gates import Refusal
from pod_sweeper.tasks.rules.verdicts import CONFIRM_MARGIN_SECONDS, Policy, Sent, decide

MAX = 10
BACKOFF = Backoff(1.0, 300.0, rng=random.Random(7))
POLICY = Policy(MAX, BACKOFF)
UID = UUID("6b1c3c4e-0d1a-4f7e-9a57-2a3d1f0c9b10")
OTHER_UID = "0f0f0f0f-0000-4000-8000-000000000001"
NOTHING_CHECKED = Recheck(frozenset(), {}, {})


def claim(attempts: int = 3, *, lease_expired_from: str | None = None) -> Claim:
    return Claim(7, 2, 1, "sandbox-a", 1, "sandboxes", "p", UID, attempts, "retired", lease_expired_from)


def sent(answer: Answer) -> Sent:
    return Sent(datetime.now(UTC), 0.0, 0.01, answer)


def after(
    answer: Answer, *, unreachable: str | None = None, refusal: Refusal | None = None
) -> Callable[[Claim], Verdict]:
    """The row's end after its DELETE came back with ``answer`` (and what the gates said of it)."""
    return lambda c: decide(c, sent(answer), POLICY, unreachable=unreachable, refusal=refusal)


def refused(status: int) -> Callable[[Claim], Verdict]:
    return after(Answer.of(status, "Refused", f"{status} Refused"), refusal=Refusal(4.0, "refused"))


def at_the_claim(recheck: Recheck, *, lease_expired_from: str | None = None) -> Callable[[Claim], Verdict]:
    def end(c: Claim) -> Verdict:
        if lease_expired_from is not None:
            c = claim(c.attempts, lease_expired_from=lease_expired_from)
        verdict = verdicts.at_claim(c, recheck, POLICY)
        assert verdict is not None
        return verdict

    return end


@dataclass(frozen=True)
class Row:
    """One row of the table: how the row ends (``verdict``), and what that must be."""

    verdict: Callable[[Claim], Verdict]
    result: Result
    charged: bool = True
    dead_when_used_up: bool = False  # with its attempts used up the row goes dead instead


DOWN = "the Kubernetes API server cannot be reached: connection refused"

ROWS: dict[str, Row] = {
    "200 / 202": Row(after(Answer.of(200)), Result.DELETED),
    "200 / 202 in a dry run": Row(after(Answer.of(200, dry_run=True)), Result.WOULD_DELETE),
    "404 NotFound": Row(after(Answer.of(404, "NotFound")), Result.ABSENT),
    "409 Conflict, then the GET finds another UID": Row(
        after(Answer.of(409, "Conflict", holder_uid=OTHER_UID)), Result.REPLACED
    ),
    "409 Conflict, then the GET finds nothing": Row(after(Answer.of(409, "Conflict", holder_uid=None)), Result.ABSENT),
    "409 Conflict, then the GET finds the row's own UID": Row(
        after(Answer.of(409, "Conflict", holder_uid=str(UID))), Result.RETRY, dead_when_used_up=True
    ),
    "500, 502, 503, 504, a timeout or no answer, while the API server shows it is up": Row(
        after(Answer.of(503, "ServiceUnavailable", "503 ServiceUnavailable")),
        Result.RETRY,
        dead_when_used_up=True,
    ),
    "the same, and the API server answers neither another request since nor its probe": Row(
        after(Answer.none("connection refused"), unreachable=DOWN), Result.HANDED_BACK, charged=False
    ),
    "429": Row(
        after(Answer.of(429, "TooManyRequests", "429", retry_after=2.0)),
        Result.HANDED_BACK,
        charged=False,
    ),
    "401": Row(refused(401), Result.HANDED_BACK, charged=False),
    "403": Row(refused(403), Result.HANDED_BACK, charged=False),
    "(not sent) the credential hook failed": Row(
        after(Answer.unsent(ConnectionRefusedError("the IdP")), refusal=Refusal(4.0, "no credentials")),
        Result.HANDED_BACK,
        charged=False,
    ),
    "any other 4xx (400, 410, 422, ...)": Row(after(Answer.of(422, "Invalid", "422 Invalid")), Result.DEAD),
    "an error nobody foresaw": Row(
        after(Answer.unforeseen(RuntimeError("a bug"))), Result.RETRY, dead_when_used_up=True
    ),
    "(at the claim) the execution row is active again": Row(
        at_the_claim(Recheck(frozenset({7}), {}, {})), Result.SKIPPED_ACTIVE
    ),
    "(at the claim) the re-check cannot be made": Row(
        at_the_claim(Recheck(frozenset(), {7: "re-check failed: relation gone"}, {})),
        Result.RETRY,
        dead_when_used_up=True,
    ),
    "(at the claim) its lease expired once more than it has attempts": Row(
        lambda c: (
            verdicts.at_claim(claim(MAX + 1, lease_expired_from="crashed"), NOTHING_CHECKED, POLICY)
            or pytest.fail("not decided")
        ),
        Result.DEAD,
        charged=False,
    ),
    "(not sent) a name Kubernetes could not hold, or a namespace outside the scope": Row(
        lambda c: verdicts.unsendable(c, "a name no pod can have"), Result.DEAD
    ),
    "(not sent) a gate holds it back, its lease ran short, or the stop": Row(
        lambda c: verdicts.handed_back(c, error="the breaker"), Result.HANDED_BACK, charged=False
    ),
}


def design_table(column: int = 1) -> list[str]:
    """A column of design.md's answer table (1: what happened, 2: the result), one cell per row."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "design.md").read_text()
    section = text.split("## What an answer means for a row", 1)[1].split("\n#", 1)[0]  # to the next heading
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    return [row.split("|")[column].strip().replace("`", "") for row in rows[1:]]  # rows[0]: the header


def test_every_row_of_the_design_table_has_a_case_and_every_case_a_row() -> None:
    assert design_table() == list(ROWS)


@pytest.mark.parametrize("what", list(ROWS))
def test_each_row_of_the_answer_table(what: str) -> None:
    row = ROWS[what]
    verdict = row.verdict(claim(attempts=3))
    assert (verdict.result, verdict.charged) == (row.result, row.charged)
    assert (verdict.id, verdict.epoch) == (7, 2)
    assert verdict.status is row.result.status
    assert verdict.outcome == (Outcome(row.result.value) if row.result.status is Status.DONE else None)
    used_up = row.verdict(claim(attempts=MAX))
    assert used_up.result is (Result.DEAD if row.dead_when_used_up else row.result)
    if row.result is Result.DEAD or used_up.result is Result.DEAD:
        assert (verdict if row.result is Result.DEAD else used_up).error  # a dead row says why


def test_the_result_gives_the_status_and_outcome_the_record_writes() -> None:
    assert {r: r.status for r in Result if r.status is not Status.DONE} == {
        Result.RETRY: Status.PENDING,
        Result.HANDED_BACK: Status.PENDING,
        Result.DEAD: Status.DEAD,
    }
    # Every outcome but the operator's discard is a result the daemon's answer table can reach.
    assert {r.outcome for r in Result if r.outcome is not None} == set(Outcome) - {Outcome.DISCARDED}


def test_used_up_is_written_once() -> None:
    assert not exhausted(MAX - 1, MAX) and exhausted(MAX, MAX) and exhausted(MAX + 1, MAX)


def test_a_pod_left_terminating_is_looked_at_again_after_its_grace() -> None:
    assert after(Answer.of(200))(claim()).confirm_in is None
    assert after(Answer.of(200, grace_seconds=30))(claim()).confirm_in == 30 + CONFIRM_MARGIN_SECONDS


@pytest.mark.parametrize(
    "answer",
    [
        Answer.of(500, "InternalError", "500 InternalError"),
        Answer.of(502, "BadGateway", "502 BadGateway"),
        Answer.of(504, "Timeout", "504 Timeout"),
        Answer.none("read timed out", kind="ReadTimeoutError"),  # a timeout or a connection error
    ],
    ids=["500", "502", "504", "timeout"],
)
def test_the_rows_own_trouble_waits_its_backoff_and_keeps_the_answer(answer: Answer) -> None:
    assert answer.needs_probe
    retry = after(answer)(claim(attempts=3))
    assert retry.result is Result.RETRY and BACKOFF.ceiling(3) / 2 <= retry.delay <= BACKOFF.ceiling(3)
    assert (retry.http_status, retry.error) == (answer.status, str(answer))
    assert after(answer, unreachable=DOWN)(claim(attempts=MAX)).result is Result.HANDED_BACK  # never dead


def test_a_429_waits_at_least_its_retry_after() -> None:
    answer = Answer.of(429, "TooManyRequests", "429", retry_after=120.0)
    assert not answer.needs_probe  # an answer: the server is up
    held = after(answer)(claim(attempts=MAX))
    assert (held.result, held.http_status) == (Result.HANDED_BACK, 429) and held.delay >= 120.0


def test_a_refusal_waits_as_long_as_its_gate_says() -> None:
    held = refused(403)(claim())
    assert (held.delay, held.error, held.http_status) == (4.0, "refused", 403)


def test_a_lease_that_expired_with_attempts_left_is_sent_again() -> None:
    assert verdicts.at_claim(claim(MAX, lease_expired_from="crashed"), NOTHING_CHECKED, POLICY) is None
    assert verdicts.at_claim(claim(3), NOTHING_CHECKED, POLICY) is None


def test_a_409_that_is_not_the_preconditions_is_a_rejection() -> None:
    """Only a 409 whose reason is ``Conflict`` is the UID precondition's; another (``AlreadyExists``)
    says the request itself was wrong."""
    assert after(Answer.of(409, "AlreadyExists", "409 AlreadyExists"))(claim()).result is Result.DEAD


def test_the_attempt_history_keeps_the_reason_and_the_answer_label() -> None:
    assert sent(Answer.none("refused", kind="ConnectionRefusedError")).attempt.reason == "ConnectionRefusedError"
    assert sent(Answer.of(409, "Conflict", holder_uid=None)).attempt.reason == "Conflict"
    assert sent(Answer.of(422, "Invalid", "422")).attempt.reason == "Invalid"
    assert sent(Answer.unforeseen(RuntimeError("x"))).attempt.reason == "RuntimeError"


def test_the_design_tables_result_column_is_the_code_s() -> None:
    assert [ROWS[what].result.value for what in ROWS] == [cell.split()[0] for cell in design_table(column=2)]


def test_a_request_the_credential_hook_kept_off_the_wire_leaves_no_attempt_row() -> None:
    """Nothing reached the server: the attempt history gets no row for it (a 401 keeps its own)."""
    refusal = Refusal(4.0, "no credentials")
    unsent = after(Answer.unsent(RuntimeError("invalid_grant")), refusal=refusal)(claim())
    assert (unsent.attempt, unsent.delay, unsent.error) == (None, 4.0, "no credentials")
    assert refused(401)(claim()).attempt is not None
