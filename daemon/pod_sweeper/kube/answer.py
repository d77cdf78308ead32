"""What the API server said, in one shape: an ``Answer`` whose ``said`` is decided by one function
(``said``) from the HTTP status and the Status ``reason``, or from there being no answer at all.

Every request the daemon makes ends in an ``Answer``: the sweep's DELETE and the outage watch's probe
return it whatever it says (no answer and, for the DELETE, a failure nobody foresaw included), the
other calls return it when they succeed (a force delete, an Event) and raise it inside a
``kube.errors.KubeError`` when they do not (kube/interface.py says which the sweep makes). What an
answer means for a row is not said here (that is the answer table, ``tasks.rules.verdicts``); what it
says about the server and the credentials is, as properties every reader shares (``needs_probe``,
``answered``, ``past_authorization``), so nobody looks at a status code again. No I/O: every status is
a unit test (tests/unit/test_kube_answer.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from pod_sweeper.core.text import redacted


class Said(StrEnum):
    """The kinds of answer, by what they mean rather than by their number."""

    DONE = "done"  # 2xx: deleted, or left terminating (the grace in ``grace_seconds``)
    NOT_FOUND = "not_found"  # 404
    CONFLICT = "conflict"  # 409 Conflict: a precondition (the UID) did not hold
    UNAUTHORIZED = "unauthorized"  # 401: the credentials are refused
    FORBIDDEN = "forbidden"  # 403: RBAC or an admission policy refuses us (in one namespace)
    THROTTLED = "throttled"  # 429: Priority and Fairness, or a rate limit (``retry_after``)
    SERVER_ERROR = "server_error"  # 5xx
    REJECTED = "rejected"  # any other 4xx: the request itself is wrong, and repeating it cannot help
    NO_ANSWER = "no_answer"  # no HTTP answer: a timeout, a refused connection, a TLS failure
    UNFORESEEN = "unforeseen"  # a failure of ours nobody foresaw (a bug): no news about the server
    UNSENT = "unsent"  # the client failed before the request went on the wire (its credential hook)


# The 4xx statuses with a meaning of their own; any other 4xx is a rejection.
_CLIENT_ERRORS = {404: Said.NOT_FOUND, 401: Said.UNAUTHORIZED, 403: Said.FORBIDDEN, 429: Said.THROTTLED}


def said(status: int | None, reason: str = "") -> Said:
    """The one reading of an HTTP status (None or 0: no answer). A 409 is a precondition's conflict only
    with the reason ``Conflict``; the API server's other 409 (``AlreadyExists``) is not the DELETE's."""
    if not status:
        return Said.NO_ANSWER
    if status < 300:
        return Said.DONE
    if status >= 500:
        return Said.SERVER_ERROR
    if status == 409 and reason == "Conflict":
        return Said.CONFLICT
    return _CLIENT_ERRORS.get(status, Said.REJECTED)


@dataclass(frozen=True)
class Answer:
    """One request's answer. For a DELETE under the pod's UID, ``grace_seconds`` (> 0: the pod was left
    terminating this long) and, after a 409, ``holder_uid`` (the UID the GET found holding the name;
    None: nobody) complete it."""

    said: Said
    status: int | None = None  # the HTTP status; None when there was none
    reason: str | None = None  # the Status reason (``NotFound``), or the failure's kind (``ConnectionRefusedError``)
    message: str = ""  # one line for the row's last_error and the log
    retry_after: float | None = None  # a 429's or 5xx's Retry-After, in seconds
    grace_seconds: int = 0
    holder_uid: str | None = None
    dry_run: bool = False  # the DELETE went with dryRun=All: validated, nothing changed
    # When the request went on the wire, on the client's clock (time.monotonic in the daemon, the outage
    # watch's): after the credential hook, which may take seconds to renew a token. None when it never
    # left, or the client does not know. Not part of what was said, so not of equality.
    left: float | None = field(default=None, compare=False)

    @classmethod
    def of(
        cls,
        status: int,
        reason: str | None = None,
        message: str = "",
        *,
        retry_after: float | None = None,
        grace_seconds: int = 0,
        holder_uid: str | None = None,
        dry_run: bool = False,
        left: float | None = None,
    ) -> Answer:
        """An answer with an HTTP status; its kind is the one function's."""
        return cls(
            said(status, reason or ""), status, reason, message, retry_after, grace_seconds, holder_uid, dry_run, left
        )

    @classmethod
    def none(cls, why: str, *, kind: str | None = None) -> Answer:
        """No HTTP answer (``kind``: the transport failure's type, for the attempt history)."""
        return cls(Said.NO_ANSWER, reason=kind, message=f"no answer from the API server: {why}"[:500])

    @classmethod
    def unforeseen(cls, exc: BaseException) -> Answer:
        """A failure nobody foresaw while asking (a bug)."""
        return cls(Said.UNFORESEEN, reason=type(exc).__name__, message=f"{type(exc).__name__}: {exc}"[:500])

    @classmethod
    def unsent(cls, exc: BaseException, *, secrets: Iterable[str] = ()) -> Answer:
        """The request never went on the wire: the client's credential hook failed before it (an OIDC or
        GCP auth provider's refresh that cannot get a token). The daemon's trouble, not the row's nor the
        server's: no news about either. The hook's own words go to logs and the row's ``last_error``, so
        each of ``secrets`` (the credentials the client holds) is cut out of them first: a plugin may
        quote the token it failed to renew."""
        why = redacted(f"{type(exc).__name__}: {exc}", secrets)
        return cls(Said.UNSENT, reason=type(exc).__name__, message=f"not sent, no credentials: {why}"[:500])

    @property
    def needs_probe(self) -> bool:
        """Whether this could be the API server's trouble rather than the row's (no answer, or a 5xx):
        only the outage watch can tell."""
        return self.said in (Said.NO_ANSWER, Said.SERVER_ERROR)

    @property
    def answered(self) -> bool:
        """Whether the server gave an answer about the request (so it was up when it did)."""
        return self.said not in (Said.UNFORESEEN, Said.UNSENT) and not self.needs_probe

    @property
    def credentials_failed(self) -> bool:
        """Whether the daemon's credentials failed it: refused by the server (a 401) or not to be had at all
        (``unsent``: the credential hook failed). The auth gate's business; any next request fares the same."""
        return self.said in (Said.UNAUTHORIZED, Said.UNSENT)

    @property
    def past_authorization(self) -> bool:
        """Whether the request got past authentication and authorization (what reopens the auth and
        namespace gates). A 429 of Priority and Fairness or a 5xx may come before them, so they do not."""
        return self.said in (Said.DONE, Said.NOT_FOUND, Said.CONFLICT, Said.REJECTED)

    @property
    def label(self) -> str:
        """The ``code`` label of ``pod_sweeper_kube_responses_total``: the HTTP status, ``none``, or
        ``unsent`` (the request never left: its credential hook failed)."""
        if self.said is Said.UNSENT:
            return "unsent"
        return str(self.status or "none")

    def __str__(self) -> str:
        return self.message or f"{self.status} {self.reason or ''}".strip()
