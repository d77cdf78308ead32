"""The Kubernetes side: the one client of the API server (``KubeClient``), which deletes a pod by
namespace and name under ``preconditions.uid``, reads pods and nodes, lists, asks access reviews, records
Events and probes the server's health, with the official client. Every answer comes back in one shape, an
``Answer`` (``kube.answer``): a DELETE returns it whatever the server said, or whether it said anything;
the other calls raise it in a ``KubeError`` for anything but a success. What an answer means for a row is
not said here: that is the daemon's answer table (``tasks.rules.verdicts``).

Its configuration comes from ``kube.config`` (retries off: the sweeper owns the whole policy).
Answers are matched on status code and ``reason``, never on message text.
Calls are synchronous (the official client is); the sweeper runs them on its own thread pool.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from loguru import logger

from pod_sweeper.core import logs
from pod_sweeper.kube.answer import Answer, Said
from pod_sweeper.kube.config import credentials
from pod_sweeper.kube.errors import KubeError
from pod_sweeper.kube.interface import PodEvent, PodPage, PodState

EVENT_COMPONENT = "pod-sweeper"


def _retry_after(exc: ApiException) -> float | None:
    headers = exc.headers or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    if value:
        try:
            return max(0.0, float(value))
        except ValueError:
            return None
    details = (_status_body(exc) or {}).get("details") or {}
    seconds = details.get("retryAfterSeconds")
    return float(seconds) if isinstance(seconds, int | float) else None


def _status_body(exc: ApiException) -> dict[str, Any] | None:
    try:
        body = json.loads(exc.body) if exc.body else None
    except (TypeError, ValueError):
        return None
    return body if isinstance(body, dict) and body.get("kind") == "Status" else None


def answer_of(exc: ApiException) -> Answer:
    """The answer an ApiException stands for: its status, the Status body's reason and message."""
    status = int(exc.status or 0)
    if status == 0:
        # The client's own word for "no HTTP answer" (a TLS handshake that failed, say): not an answer
        # about the row, so never a 4xx-style end.
        return Answer.none(str(exc.reason), kind="ApiException")
    body = _status_body(exc) or {}
    reason = body.get("reason") or exc.reason or ""
    message = body.get("message") or (exc.body.decode() if isinstance(exc.body, bytes) else str(exc.body or ""))
    text = f"{status} {reason}: {message}".strip()[:500]
    return Answer.of(status, reason or None, text, retry_after=_retry_after(exc))


def _unanswered(exc: BaseException) -> Answer:
    return Answer.none(f"{type(exc).__name__}: {exc}", kind=type(exc).__name__)


_TRANSPORT_ERRORS = (urllib3.exceptions.HTTPError, OSError)


def _grace_seconds(body: bytes) -> int:
    """The grace period a DELETE's answer shows the pod terminating for; 0 when it went at once."""
    try:
        metadata = json.loads(body).get("metadata") or {}
    except (ValueError, AttributeError):
        return 0
    if not metadata.get("deletionTimestamp"):
        return 0
    return int(metadata.get("deletionGracePeriodSeconds") or 0)


class _NoCredential(Exception):
    """The client's credential hook failed (its cause): nothing went on the wire."""


def _mark_credential_failures(configuration: client.Configuration) -> None:
    """Raise whatever the credential hook raises as ``_NoCredential``, so that ``KubeClient`` tells it,
    and it alone, from a failure on the wire or a bug before it. The client runs the hook
    (``refresh_api_key_hook``: an exec plugin, an OIDC or GCP refresh, ``TokenFile``, whichever is set
    when a request is made) in ``get_api_key_with_prefix``, as it adds the token to a request, and
    nowhere else; any of them may raise anything (an OIDC refresh whose identity provider is down raises
    a connection error, or the client's own ``ApiException`` for a TLS failure)."""
    marked: Any = configuration  # an instance attribute over the method, as ``rest_client.request`` above
    fetch: Callable[..., Any] = marked.get_api_key_with_prefix

    def fetched(*args: Any, **kwargs: Any) -> Any:
        try:
            return fetch(*args, **kwargs)
        except _NoCredential:
            raise  # a second client on the same configuration marked it already
        except Exception as exc:
            raise _NoCredential(type(exc).__name__) from exc  # its words are its cause's, for Answer.unsent

    marked.get_api_key_with_prefix = fetched


class KubeClient:
    """The daemon's one client of the API server; one instance per process, safe to call from many threads."""

    def __init__(self, configuration: client.Configuration, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._configuration = configuration
        self._api_client: Any = client.ApiClient(configuration)
        # Typed as Any: with _preload_content=False the client returns the raw urllib3 response, which
        # its annotations do not say.
        self._core: Any = client.CoreV1Api(self._api_client)
        # When each thread's last request went on the wire (``Answer.left``), on ``clock``: the outage
        # watch's. The client runs the credential hook (an exec plugin renewing a token, seconds) between
        # the call and the wire, and a request stamped before it could be taken as sent before an answer
        # that came in while the hook ran, and charged for an outage it met (issue 53's simulator found
        # it). The transport's ``request`` is the one step every client version takes after the hook
        # (the older clients' DELETE and GET helpers call it too), so the stamp is taken there.
        wire = self._wire = threading.local()
        transport: Any = self._api_client.rest_client
        send: Callable[..., Any] = transport.request

        def stamped(*args: Any, **kwargs: Any) -> Any:
            wire.left = clock()
            return send(*args, **kwargs)

        transport.request = stamped
        _mark_credential_failures(configuration)

    def close(self) -> None:
        self._api_client.close()

    def _unsent(self, exc: _NoCredential) -> Answer:
        """The answer of a request its credential hook kept off the wire, in the hook's words less the
        client's credentials and every secret the logs hide (a kubeconfig's): the words reach the row's
        ``last_error``, which ``status`` and ``explain`` print."""
        return Answer.unsent(exc.__cause__ or exc, secrets=[*credentials(self._configuration), *logs.hidden()])

    def _call(self, method: Any, *args: Any, timeout: float, **kwargs: Any) -> Any:
        """Run one client call and return its raw response (no model deserialization); every
        failure comes out as a KubeError holding its Answer, with the cause chained. The credential
        hook's failure (an OIDC or GCP refresh that cannot get a token, whatever it raises) is ``unsent``:
        nothing reached the server, so it says nothing about the server or the row. A bug before the wire
        is not caught here (``delete_pod`` answers it ``unforeseen``, with its traceback)."""
        self._wire.left = None
        try:
            return method(*args, _request_timeout=timeout, _preload_content=False, **kwargs)
        except _NoCredential as exc:
            raise KubeError(self._unsent(exc)) from exc
        except ApiException as exc:
            raise KubeError(answer_of(exc)) from exc
        except _TRANSPORT_ERRORS as exc:
            raise KubeError(_unanswered(exc)) from exc

    def pod_state(self, namespace: str, name: str, *, timeout: float) -> PodState | None:
        """The pod now holding ``name`` (its UID and node), or None when there is none."""
        try:
            response = self._call(self._core.read_namespaced_pod, name, namespace, timeout=timeout)
        except KubeError as exc:
            if exc.answer.said is Said.NOT_FOUND:
                return None
            raise
        return PodState.from_json(json.loads(response.data))

    def list_pods(
        self, namespace: str, label_selector: str, *, limit: int, continue_token: str | None, timeout: float
    ) -> PodPage:
        """One page of the pods in ``namespace`` matching ``label_selector`` (the real list API, with
        ``limit`` and ``continue``). An expired continue token is a KubeError whose answer is a 410 (rejected)."""
        kwargs: dict[str, Any] = {"label_selector": label_selector, "limit": limit}
        if continue_token:
            kwargs["_continue"] = continue_token
        response = self._call(self._core.list_namespaced_pod, namespace, timeout=timeout, **kwargs)
        data = json.loads(response.data)
        return PodPage(
            [PodState.from_json(item) for item in data.get("items") or []],
            (data.get("metadata") or {}).get("continue") or None,
        )

    def node_exists(self, name: str, *, timeout: float) -> bool:
        """Whether the node is still registered (a pod stuck on a vanished node never finishes)."""
        try:
            response = self._call(self._core.read_node, name, timeout=timeout)
        except KubeError as exc:
            if exc.answer.said is Said.NOT_FOUND:
                return False
            raise
        _ = response.data  # drain it: the connection goes back to the pool
        return True

    def force_delete(self, namespace: str, name: str, uid: str, *, timeout: float) -> Answer:
        """DELETE with gracePeriodSeconds=0, still under the UID precondition: its answer, or a KubeError."""
        body = {"preconditions": {"uid": uid}, "gracePeriodSeconds": 0, "propagationPolicy": "Background"}
        response = self._call(self._core.delete_namespaced_pod, name, namespace, body=body, timeout=timeout)
        _ = response.data
        return Answer.of(int(response.status))

    def probe(self, *, timeout: float) -> Answer:
        """Whether the API server answers at all: the answer of ``GET /readyz``, down (``needs_probe``)
        when there is none or it is a 5xx (its message then names the failing checks). A 401 or 403 is
        an answer: the credentials are the auth gate's business. Every identity may read /readyz (the
        default ClusterRole system:public-info-viewer), and it fails when etcd does, so it tells "the
        server is down" from "this pod's DELETE failed". A probe whose credential hook fails is ``unsent``
        (the watch holds every row on it as on no answer: nothing can go out)."""
        try:
            # The credential hook runs here, before the wire: the client adds the token.
            method, url, headers, _, _ = self._api_client.param_serialize(
                "GET", "/readyz", auth_settings=["BearerToken"]
            )
            response = self._api_client.call_api(method, url, header_params=headers, _request_timeout=timeout)
            body = response.read() or b""
        except _NoCredential as exc:
            return self._unsent(exc)
        except ApiException as exc:  # a TLS failure: the client says status 0
            return Answer.none(str(exc.reason), kind="ApiException")
        except _TRANSPORT_ERRORS as exc:
            return _unanswered(exc)
        status = int(response.status)
        if status >= 500:
            checks = " ".join(line for line in body.decode(errors="replace").splitlines() if "failed" in line)
            return Answer.of(status, message=f"the API server answers GET /readyz with {status} {checks}".strip()[:500])
        return Answer.of(status)

    def may(self, verb: str, resource: str, namespace: str | None, *, timeout: float) -> bool:
        """Whether the API server lets us ``verb`` the core ``resource`` in ``namespace`` (None: a
        cluster-scoped resource such as nodes), by a SelfSubjectAccessReview."""
        attributes: dict[str, str] = {"verb": verb, "resource": resource, "group": ""}
        if namespace is not None:
            attributes["namespace"] = namespace
        review: dict[str, Any] = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        authorization: Any = client.AuthorizationV1Api(self._api_client)
        response = self._call(authorization.create_self_subject_access_review, review, timeout=timeout)
        return bool((json.loads(response.data).get("status") or {}).get("allowed"))

    def create_event(self, event: PodEvent, *, timeout: float) -> Answer:
        """Create a core/v1 Event on the pod (what ``kubectl get events`` and ``describe`` show): the
        answer, or a KubeError. Its name is the pod's plus a time in hex, as client-go names them."""
        stamp = event.at.strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "metadata": {"name": f"{event.name[:200]}.{time.time_ns():x}", "namespace": event.namespace},
            "involvedObject": {
                "kind": "Pod",
                "apiVersion": "v1",
                "namespace": event.namespace,
                "name": event.name,
                "uid": event.uid,
            },
            "reason": event.reason,
            "message": event.message,
            "type": "Normal",
            "action": "Delete",
            "source": {"component": EVENT_COMPONENT},
            "reportingComponent": EVENT_COMPONENT,
            "reportingInstance": event.replica[:128],
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        response = self._call(self._core.create_namespaced_event, event.namespace, body, timeout=timeout)
        _ = response.data
        return Answer.of(int(response.status))

    def delete_pod(self, namespace: str, name: str, uid: str, *, timeout: float, dry_run: bool = False) -> Answer:
        """DELETE under the UID, and what the server said to it, whatever that was (no answer
        included): it never raises for the server. After a 409 Conflict a GET says who holds the name
        now (``holder_uid``); when the GET itself fails, its answer is the request's. With ``dry_run``
        the DELETE goes with dryRun=All: the API server validates it and changes nothing. A failure
        nobody foresaw (a bug) is logged with its stack and answered as ``unforeseen``, which the answer
        table keeps the row through."""
        try:
            return self._delete_pod(namespace, name, uid, timeout=timeout, dry_run=dry_run)
        except Exception as exc:
            logger.opt(exception=exc).error("unexpected error deleting pod {ns}/{pod}", ns=namespace, pod=name)
            return Answer.unforeseen(exc)

    def _left(self) -> float | None:
        """When this thread's last request went on the wire; None if none has since its last ``_call`` began."""
        left: float | None = getattr(self._wire, "left", None)
        return left

    def _delete_pod(self, namespace: str, name: str, uid: str, *, timeout: float, dry_run: bool) -> Answer:
        body: dict[str, Any] = {"preconditions": {"uid": uid}, "propagationPolicy": "Background"}
        if dry_run:
            body["dryRun"] = ["All"]
        try:
            response = self._call(self._core.delete_namespaced_pod, name, namespace, body=body, timeout=timeout)
        except KubeError as exc:
            answer = replace(exc.answer, left=self._left())
            if answer.said is not Said.CONFLICT:
                return replace(answer, dry_run=dry_run)
            # Either another pod holds the name, or ours vanished mid-delete: the GET tells them apart.
            try:
                holder = self.pod_state(namespace, name, timeout=timeout)
            except KubeError as failed:
                return replace(failed.answer, left=self._left())  # the GET's answer, and when it left
            return replace(answer, holder_uid=holder.uid if holder else None, dry_run=dry_run)
        # The body (read raw, not into models) says whether the pod was left terminating.
        return Answer.of(
            int(response.status), grace_seconds=_grace_seconds(response.data), dry_run=dry_run, left=self._left()
        )
