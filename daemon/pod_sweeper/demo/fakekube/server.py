"""The fake API server itself (``FakeKube``): pods, Events, namespaces and access reviews over real HTTP
from its own threads, answering as ``wording`` says a real server words it. The package's docstring says
what it does and how faithful it is. What only tests and benchmarks use (injected faults, the request
log, a control API for a server in another process) is the test harness's subclass
(tests/harness/fakekube.py), through two seams: ``handler_class`` and ``Handler.respond``."""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import socket
import threading
import uuid
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from pod_sweeper.demo.fakekube.wording import (
    GRANTED,
    Pod,
    not_found,
    now_utc,
    selector_matches,
    status_body,
    timestamp,
)

_POD_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)$")
_PODS_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/pods$")
_EVENTS_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/events$")
_NAMESPACE_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)$")
_PROPAGATION = {"Foreground", "Background", "Orphan"}


class FakeKube:
    """``with FakeKube() as server: server.write_kubeconfig(path)``."""

    def __init__(self, *, token: str | None = "fake-token", host: str = "127.0.0.1") -> None:
        self.token = token
        self.pods: dict[tuple[str, str], Pod] = {}
        self.denied: set[tuple[str, str]] = set()  # (verb, namespace) answered 403
        self.nodes: set[str] = set()  # registered node names (GET /api/v1/nodes/NAME)
        self.kubelets: set[str] = set()  # nodes whose kubelet runs: it ends their pods' graceful deletions
        self.kubelet_seconds = 1.0  # how long a running kubelet takes to end a pod after its DELETE
        self.events: list[dict[str, Any]] = []  # core/v1 Events created, as stored
        self.terminating: set[str] = set()  # namespaces deleted (and never finalized here)
        self.lock = threading.RLock()
        self._rv = itertools.count(1000)
        self._server = _QuietServer((host, 0), self.handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fakekube", daemon=True)

    # --- lifecycle ---

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeKube:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeKube:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def write_kubeconfig(self, path: Path, *, token: str | None = None, namespace: str = "default") -> Path:
        """A kubeconfig (JSON is YAML) pointing the real client at this server."""
        user: dict[str, Any] = {"token": token or self.token} if (token or self.token) else {}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": user}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": namespace}}],
            "current-context": "fake",
        }
        path.write_text(json.dumps(config))
        return path

    # --- test helpers (no HTTP) ---

    def create_pod(
        self,
        namespace: str,
        name: str,
        *,
        labels: dict[str, str] | None = None,
        node_name: str | None = None,
        phase: str = "Pending",
        grace_period: int = 30,
        created: datetime | None = None,
    ) -> Pod:
        """Store a pod as a POST would (raises KeyError if the name is taken)."""
        manifest: dict[str, Any] = {
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}], "terminationGracePeriodSeconds": grace_period},
            "status": {"phase": phase},
        }
        if node_name:
            manifest["spec"]["nodeName"] = node_name
        code, pod = self._create(namespace, manifest, created=created)
        if code != 201:
            raise KeyError(pod["message"])
        return pod

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        with self.lock:
            pod = self.pods.get((namespace, name))
            return json.loads(json.dumps(pod)) if pod else None

    def remove_pod(self, namespace: str, name: str) -> None:
        """The kubelet finished: the pod disappears (or was never there)."""
        with self.lock:
            self.pods.pop((namespace, name), None)

    # --- the API ---

    def _next_rv(self) -> str:
        return str(next(self._rv))

    def _create(self, namespace: str, manifest: Pod, *, created: datetime | None = None) -> tuple[int, Pod]:
        metadata = dict(manifest.get("metadata") or {})
        name = metadata.get("name")
        if not name:
            return 422, status_body(
                422,
                "Invalid",
                'Pod "" is invalid: metadata.name: Required value: name or generateName is required',
                {"kind": "Pod", "causes": [{"reason": "FieldValueRequired", "field": "metadata.name"}]},
            )
        spec = dict(manifest.get("spec") or {})
        if not spec.get("containers"):
            return 422, status_body(
                422,
                "Invalid",
                f'Pod "{name}" is invalid: spec.containers: Required value',
                {
                    "name": name,
                    "kind": "Pod",
                    "causes": [
                        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers"}
                    ],
                },
            )
        spec.setdefault("terminationGracePeriodSeconds", 30)
        with self.lock:
            if (namespace, name) in self.pods:
                return 409, status_body(
                    409, "AlreadyExists", f'pods "{name}" already exists', {"name": name, "kind": "pods"}
                )
            metadata.update(
                namespace=namespace,
                uid=str(uuid.uuid4()),
                resourceVersion=self._next_rv(),
                creationTimestamp=timestamp(created or now_utc()),
            )
            if not metadata.get("labels"):
                metadata.pop("labels", None)  # the real server keeps no empty map
            pod = {
                "kind": "Pod",
                "apiVersion": "v1",
                "metadata": metadata,
                "spec": spec,
                "status": dict(manifest.get("status") or {"phase": "Pending"}),
            }
            self.pods[(namespace, name)] = pod
            return 201, json.loads(json.dumps(pod))

    def _list(self, namespace: str | None, query: dict[str, list[str]]) -> tuple[int, Any]:
        selector = query.get("labelSelector", [""])[0]
        limit = int(query.get("limit", ["0"])[0] or 0)
        start = query.get("continue", [""])[0]
        with self.lock:
            keys = sorted(k for k in self.pods if namespace is None or k[0] == namespace)
            # A real list's items carry no kind or apiVersion: the list says them once.
            items = [
                {k: v for k, v in self.pods[k].items() if k not in ("kind", "apiVersion")}
                for k in keys
                if selector_matches(selector, self.pods[k]["metadata"].get("labels", {}))
                and (not start or "/".join(k) > start)
            ]
            rv = str(next(self._rv))
        metadata: dict[str, Any] = {"resourceVersion": rv}
        if limit and len(items) > limit:
            items = items[:limit]
            last = items[-1]["metadata"]
            metadata["continue"] = f"{last['namespace']}/{last['name']}"
        return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": metadata, "items": items}

    def _delete(self, namespace: str, name: str, query: dict[str, list[str]], options: Any) -> tuple[int, Any]:
        # Query parameters are DeleteOptions too (the client sends most of them that way).
        options = dict(options) if isinstance(options, dict) else {}
        for key in ("gracePeriodSeconds", "propagationPolicy", "orphanDependents", "dryRun"):
            if key in query and key not in options:
                value: Any = query[key][0]
                if key == "gracePeriodSeconds":
                    value = int(value)
                elif key == "orphanDependents":
                    value = value.lower() == "true"
                options[key] = value
        dry_run = options.get("dryRun")
        with self.lock:
            pod = self.pods.get((namespace, name))
            if pod is None:  # 1. NotFound comes before any precondition
                return not_found(name)
            policy = options.get("propagationPolicy")
            orphan = options.get("orphanDependents")
            if (policy is not None and policy not in _PROPAGATION) or (policy is not None and orphan is not None):
                why = (
                    f'propagationPolicy: Unsupported value: "{policy}"'
                    if policy not in _PROPAGATION
                    else "orphanDependents: Invalid value: both orphanDependents and propagationPolicy set"
                )
                return 422, status_body(
                    422, "Invalid", f'DeleteOptions.meta.k8s.io "" is invalid: {why}', {"kind": "DeleteOptions"}
                )
            pre = options.get("preconditions") or {}
            meta = pod["metadata"]
            for key, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
                if pre.get(key) and pre[key] != meta[key]:
                    tail = "deleted and then recreated" if key == "uid" else "modified"
                    return 409, status_body(
                        409,
                        "Conflict",
                        f'Operation cannot be fulfilled on Pod "{name}": the {label} in the precondition '
                        f"({pre[key]}) does not match the {label} in record ({meta[key]}). "
                        f"The object might have been {tail}",
                        {"name": name, "kind": "Pod"},
                    )
            period = options.get("gracePeriodSeconds")
            if period is None:
                period = pod["spec"].get("terminationGracePeriodSeconds", 30)
            if not pod["spec"].get("nodeName") or pod["status"].get("phase") in ("Succeeded", "Failed"):
                period = 0
            elif period < 0:
                period = 1
            # The answer shows the pod as the deletion left it: marked with its deletion time and
            # period, even when it goes at once; a repeat only ever shortens the mark. A dry run
            # answers the same and changes nothing.
            deadline = timestamp(now_utc() + timedelta(seconds=period))
            current = meta.get("deletionTimestamp")
            mark = {"deletionTimestamp": deadline, "deletionGracePeriodSeconds": period}
            shorter = current is None or deadline < current
            result = json.loads(json.dumps(pod))
            if shorter:
                result["metadata"].update(mark)
            if dry_run:
                return 200, result
            finalizers = list(meta.get("finalizers") or [])
            if policy == "Foreground" and "foregroundDeletion" not in finalizers:
                finalizers.append("foregroundDeletion")
            if (policy == "Orphan" or orphan is True) and "orphan" not in finalizers:
                finalizers.append("orphan")
            if period == 0 and not finalizers:
                del self.pods[(namespace, name)]
                return 200, result
            if shorter:
                meta.update(mark)
            if finalizers:
                meta["finalizers"] = finalizers
            meta["resourceVersion"] = self._next_rv()
            if pod["spec"].get("nodeName") in self.kubelets and not finalizers:
                self._kubelet_ends(namespace, name, meta["uid"])
            code = 202 if orphan is False else 200
            return code, json.loads(json.dumps(pod))

    def _kubelet_ends(self, namespace: str, name: str, uid: str) -> None:
        """The node's kubelet stops the pod's containers, then removes the pod (the same one, still
        without finalizers), as kubelets do within the grace period."""

        def end() -> None:
            with self.lock:
                pod = self.pods.get((namespace, name))
                if pod is not None and pod["metadata"]["uid"] == uid and not pod["metadata"].get("finalizers"):
                    del self.pods[(namespace, name)]

        timer = threading.Timer(self.kubelet_seconds, end)
        timer.daemon = True
        timer.start()

    def handler_class(self) -> type[Handler]:
        """The HTTP handler this server answers with (a subclass's may add to ``Handler.respond``)."""
        kube = self

        class Bound(Handler):
            server_kube = kube

        return Bound

    def authorized(self, authorization: str | None) -> bool:
        """Whether a request's Authorization header passes (any, when the server has no token)."""
        return not self.token or authorization == f"Bearer {self.token}"

    def handle(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        """Route one authenticated request; returns (status, JSON body)."""
        pod_match = _POD_PATH.match(path)
        pods_match = _PODS_PATH.match(path)
        if method == "DELETE" and pod_match:
            if ("delete", pod_match[1]) in self.denied:
                return self._forbidden("delete", pod_match[1], pod_match[2])
            return self._delete(pod_match[1], pod_match[2], query, body)
        if method == "GET" and pod_match:
            if ("get", pod_match[1]) in self.denied:
                return self._forbidden("get", pod_match[1], pod_match[2])
            pod = self.get_pod(pod_match[1], pod_match[2])
            return (200, pod) if pod else not_found(pod_match[2])
        if method == "GET" and pods_match:
            return self._list(pods_match[1], query)
        if method == "GET" and path.startswith("/api/v1/nodes/"):
            node = path.rsplit("/", 1)[1]
            if node in self.nodes:
                return 200, {"kind": "Node", "apiVersion": "v1", "metadata": {"name": node}}
            return 404, status_body(404, "NotFound", f'nodes "{node}" not found', {"name": node, "kind": "nodes"})
        if method == "GET" and path == "/api/v1/pods":
            return self._list(None, query)
        if method == "GET" and path in ("/readyz", "/livez", "/healthz"):
            return 200, "ok"
        if method == "POST" and path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
            return self._access_review(body if isinstance(body, dict) else {})
        if method == "DELETE" and (namespace_match := _NAMESPACE_PATH.match(path)):
            return self._delete_namespace(namespace_match[1])
        if method == "POST" and pods_match:
            if pods_match[1] in self.terminating:
                return self._terminating(pods_match[1], "pods", body)
            return self._create(pods_match[1], body if isinstance(body, dict) else {})
        if method == "POST" and (events_match := _EVENTS_PATH.match(path)):
            if events_match[1] in self.terminating:
                return self._terminating(events_match[1], "events", body)
            return self._create_event(events_match[1], body if isinstance(body, dict) else {})
        return 404, status_body(404, "NotFound", "the server could not find the requested resource", {})

    def _delete_namespace(self, namespace: str) -> tuple[int, Any]:
        """The namespace starts terminating (its ``kubernetes`` finalizer is the namespace controller's to
        remove, and no controller runs here)."""
        with self.lock:
            self.terminating.add(namespace)
        return 200, {
            "kind": "Namespace",
            "apiVersion": "v1",
            "metadata": {"name": namespace, "deletionTimestamp": timestamp(now_utc())},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Terminating"},
        }

    @staticmethod
    def _terminating(namespace: str, resource: str, body: Any) -> tuple[int, Any]:
        """What the NamespaceLifecycle admission plugin answers a create in a terminating namespace."""
        name = ((body if isinstance(body, dict) else {}).get("metadata") or {}).get("name", "")
        return 403, status_body(
            403,
            "Forbidden",
            f'{resource} "{name}" is forbidden: unable to create new content in namespace {namespace} '
            "because it is being terminated",
            {
                "name": name,
                "kind": resource,
                "causes": [
                    {
                        "reason": "NamespaceTerminating",
                        "message": f"namespace {namespace} is being terminated",
                        "field": "metadata.namespace",
                    }
                ],
            },
        )

    def _create_event(self, namespace: str, event: dict[str, Any]) -> tuple[int, Any]:
        """A core/v1 Event, kept for tests to read: 201, or what a real server answers for the checks it
        makes that the daemon could fail (a 403 where ``denied`` says so, the involved object's namespace)."""
        name = (event.get("metadata") or {}).get("name", "")
        if ("create", namespace) in self.denied:
            return self._forbidden("create", namespace, None, resource="events")
        involved = event.get("involvedObject") or {}
        if involved.get("namespace") != namespace:
            why = f'Invalid value: "{involved.get("namespace")}": does not match event.namespace'
            return 422, status_body(
                422,
                "Invalid",
                f'Event "{name}" is invalid: involvedObject.namespace: {why}',
                {
                    "name": name,
                    "kind": "Event",
                    "causes": [{"reason": "FieldValueInvalid", "message": why, "field": "involvedObject.namespace"}],
                },
            )
        with self.lock:
            stored = json.loads(json.dumps(event))
            stored["metadata"] = dict(stored.get("metadata") or {}, namespace=namespace, uid=str(uuid.uuid4()))
            stored["metadata"]["resourceVersion"] = self._next_rv()
            stored.update(kind="Event", apiVersion="v1")
            self.events.append(stored)
            return 201, json.loads(json.dumps(stored))

    def _access_review(self, review: dict[str, Any]) -> tuple[int, Any]:
        """SelfSubjectAccessReview: what the shipped Role grants (``GRANTED``) except what ``denied``
        names; nothing else, and nothing cluster-scoped."""
        attributes = (review.get("spec") or {}).get("resourceAttributes") or {}
        verb, namespace = attributes.get("verb"), attributes.get("namespace")
        granted = verb in GRANTED.get(attributes.get("resource", ""), ()) and attributes.get("group", "") == ""
        allowed = granted and namespace is not None and (verb, namespace) not in self.denied
        review = dict(review, apiVersion="authorization.k8s.io/v1", kind="SelfSubjectAccessReview")
        review["status"] = {"allowed": allowed} if allowed else {"allowed": False, "reason": "no RBAC rule allows it"}
        return 201, review

    def _forbidden(self, verb: str, namespace: str, name: str | None, resource: str = "pods") -> tuple[int, Any]:
        subject = f'{resource} "{name}"' if name else resource
        details = {"name": name, "kind": resource} if name else {"kind": resource}
        return 403, status_body(
            403,
            "Forbidden",
            f'{subject} is forbidden: User "system:serviceaccount:{namespace}:pod-sweeper" cannot {verb} '
            f'resource "{resource}" in API group "" in the namespace "{namespace}"',
            details,
        )


class _QuietServer(ThreadingHTTPServer):
    # The socket module's default backlog of 5 drops the SYNs of a replica's workers connecting at once
    # (after an outage, say), which then time out connecting: a real API server's backlog is deep.
    request_queue_size = 1024

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that was killed, or timed out, resets its connection: that is a scenario, not an error.
        pass


class Handler(BaseHTTPRequestHandler):
    """One request: read, authenticated, answered by ``server_kube.handle``. ``respond`` is the seam a
    subclass adds to (before the answer, or instead of it); ``send`` and ``drop`` are how it answers."""

    server_kube: FakeKube
    protocol_version = "HTTP/1.1"  # keep-alive, as the real client expects

    def setup(self) -> None:
        super().setup()
        # Headers and body leave as two writes; without NODELAY, Nagle and the client's delayed
        # ACK hold the second one back ~40 ms, which capped the server near 350 requests/s.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _serve(self) -> None:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if len(raw) < length:
            # The client died mid-request (a SIGKILLed replica): like a real API server, which
            # fails reading the body, act on nothing.
            self.close_connection = True
            return
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        self.respond(self.command, parts.path, parse_qs(parts.query), body)

    def respond(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> None:
        kube = self.server_kube
        if not kube.authorized(self.headers.get("Authorization")):
            self.send(401, status_body(401, "Unauthorized", "Unauthorized"))
            return
        status, payload = kube.handle(method, path, query, body)
        self.send(status, payload, text=isinstance(payload, str))  # the health checks answer text

    def drop(self) -> None:
        """Close the connection with no answer."""
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True

    def send(self, status: int, payload: Any, headers: dict[str, str] | None = None, *, text: bool = False) -> None:
        data = payload.encode() if text else json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8" if text else "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _serve
