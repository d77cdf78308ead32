"""What the API server said, read by the one function (``kube.answer.said``) into one shape: every status
class, and what each kind tells the gates (``needs_probe``, ``answered``, ``past_authorization``)."""

from __future__ import annotations

import pytest

from pod_sweeper.kube.answer import Answer, Said, said


@pytest.mark.parametrize(
    ("status", "reason", "kind"),
    [
        (200, "", Said.DONE),
        (202, "", Said.DONE),
        (404, "NotFound", Said.NOT_FOUND),
        (409, "Conflict", Said.CONFLICT),
        (409, "AlreadyExists", Said.REJECTED),
        (401, "Unauthorized", Said.UNAUTHORIZED),
        (403, "Forbidden", Said.FORBIDDEN),
        (429, "TooManyRequests", Said.THROTTLED),
        (400, "BadRequest", Said.REJECTED),
        (410, "Expired", Said.REJECTED),
        (422, "Invalid", Said.REJECTED),
        (500, "InternalError", Said.SERVER_ERROR),
        (503, "ServiceUnavailable", Said.SERVER_ERROR),
        (504, "Timeout", Said.SERVER_ERROR),
        (None, "", Said.NO_ANSWER),
        (0, "", Said.NO_ANSWER),
    ],
)
def test_one_function_reads_every_status(status: int | None, reason: str, kind: Said) -> None:
    assert said(status, reason) is kind


# kind: (needs the outage watch's probe, an answer about the request, got past authorization)
WHAT_EACH_KIND_TELLS = {
    Said.DONE: (False, True, True),
    Said.NOT_FOUND: (False, True, True),
    Said.CONFLICT: (False, True, True),
    Said.REJECTED: (False, True, True),
    Said.UNAUTHORIZED: (False, True, False),
    Said.FORBIDDEN: (False, True, False),
    Said.THROTTLED: (False, True, False),  # Priority and Fairness answers before authorization
    Said.SERVER_ERROR: (True, False, False),
    Said.NO_ANSWER: (True, False, False),
    Said.UNFORESEEN: (False, False, False),  # a bug is no news about the server
    Said.UNSENT: (False, False, False),  # never sent: no news about the server
}


def test_what_each_kind_tells_the_gates() -> None:
    assert set(WHAT_EACH_KIND_TELLS) == set(Said)
    for kind, told in WHAT_EACH_KIND_TELLS.items():
        answer = Answer(kind)
        assert (answer.needs_probe, answer.answered, answer.past_authorization) == told, kind


def test_the_label_and_the_line() -> None:
    assert Answer.of(200).label == "200" and Answer.none("refused").label == "none"
    assert str(Answer.none("timed out")) == "no answer from the API server: timed out"
    assert str(Answer.of(404, "NotFound")) == "404 NotFound"
    assert str(Answer.unforeseen(KeyError("x"))) == "KeyError: 'x'"
    unsent = Answer.unsent(ConnectionRefusedError("the token endpoint"))
    assert unsent.label == "unsent"
    assert str(unsent) == "not sent, no credentials: ConnectionRefusedError: the token endpoint"


def test_an_unsent_answer_keeps_the_hooks_words_but_not_the_credentials() -> None:
    """A hook may quote the token it failed to renew: each credential the client holds is cut out, the
    whole prefixed key before the bare token, and an empty one cuts nothing."""
    failure = RuntimeError("renewing 'bearer tok-123' failed; tok-123 expired, password hunter2 refused")
    unsent = Answer.unsent(failure, secrets=["tok-123", "bearer tok-123", "hunter2", ""])
    assert str(unsent) == (
        "not sent, no credentials: RuntimeError: renewing '[redacted]' failed; [redacted] expired,"
        " password [redacted] refused"
    )
