"""The tests' and benchmarks' fake API server: the demo's (``pod_sweeper.demo.fakekube``, whose answers
the conformance tier holds to a real kube-apiserver) with the instruments only they use, which the wheel
does not ship:

- faults, applied after authentication and before any state change: a status answer (both forms of 429,
  500, 503, 401, 403, ...), added latency, a dropped connection, a hang with no answer, or a dropped
  connection *after* the change (a lost response) (``inject``, ``clear_faults``; ``fakekube_faults``);
- a request log that tests assert on (to see client-side retries, or that a DELETE carried its UID);
- ``on_delete``, run before a DELETE is handled (a replacement created in between, say);
- ``/_fake/...``, a control API for a server in a process of its own (``python -m harness.fakekube
  --kubeconfig PATH``, with tests/ on the path: the benchmarks' rig), which is neither logged nor faulted.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.fakekube_faults import DEFAULT_REASONS, Fault, LoggedRequest
from pod_sweeper.demo.fakekube import FakeKube, Handler, status_body

__all__ = ["Fault", "InstrumentedKube", "LoggedRequest", "serve"]


class InstrumentedKube(FakeKube):
    """The demo's fake API server with the instruments above: a context manager, as the demo's is."""

    def __init__(self, *, token: str | None = "fake-token", host: str = "127.0.0.1") -> None:
        self.requests: list[LoggedRequest] = []
        self.faults: list[Fault] = []
        self.on_delete: Callable[[str, str], None] | None = None  # runs before a DELETE is handled
        self.hangs_end = threading.Event()  # set: every hang in progress ends (clear_faults, stop)
        super().__init__(token=token, host=host)

    def handler_class(self) -> type[Handler]:
        kube = self

        class Instrumented(_InstrumentedHandler):
            server_kube = kube

        return Instrumented

    def stop(self) -> None:
        self.hangs_end.set()
        super().stop()

    def inject(self, action: str, **kwargs: Any) -> Fault:
        fault = Fault(action, **kwargs)
        with self.lock:
            self.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self.lock:
            self.faults.clear()
        self.hangs_end.set()
        self.hangs_end = threading.Event()

    def take_fault(self, method: str, path: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.matches(method, path):
                    fault.used += 1
                    return fault
        return None

    def api_calls(self) -> list[LoggedRequest]:
        """The requests made of the API, without the health probes (``/readyz``) the daemon sends."""
        with self.lock:
            return [r for r in self.requests if r.path not in ("/readyz", "/livez", "/healthz")]

    def deletes(self) -> list[LoggedRequest]:
        with self.lock:
            return [r for r in self.requests if r.method == "DELETE"]

    def _delete(self, namespace: str, name: str, query: dict[str, list[str]], options: Any) -> tuple[int, Any]:
        if self.on_delete is not None:
            self.on_delete(namespace, name)
        return super()._delete(namespace, name, query, options)

    def control(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        """``/_fake/...``: drive a server that runs in another process (the benchmarks do)."""
        body = body if isinstance(body, dict) else {}
        if method == "POST" and path == "/_fake/pods":
            uids = [self.create_pod(body["namespace"], name)["metadata"]["uid"] for name in body["names"]]
            return 200, {"uids": uids}
        if method == "POST" and path == "/_fake/reset":
            with self.lock:
                self.pods.clear()
                self.requests.clear()
                self.faults.clear()
            return 200, {}
        if method == "GET" and path == "/_fake/deletes":
            return 200, {"deletes": [{"path": r.path, "status": r.status, "at": r.at} for r in self.deletes()]}
        if method == "POST" and path == "/_fake/faults":
            self.inject(body.pop("action"), **body)
            return 200, {}
        if method == "DELETE" and path == "/_fake/faults":
            self.clear_faults()
            return 200, {}
        return 404, status_body(404, "NotFound", f"no control endpoint {method} {path}", {})


class _InstrumentedHandler(Handler):
    """The demo's handler, each request logged (with the status it was answered) and faulted first."""

    server_kube: InstrumentedKube
    logged: LoggedRequest | None = None
    drop_instead: bool = False  # a lost response: the change is made, the answer never sent

    def respond(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> None:
        kube = self.server_kube
        self.logged, self.drop_instead = None, False  # per request: a keep-alive connection reuses the handler
        if path.startswith("/_fake/"):  # the control API: not logged, not faulted
            self.send(*kube.control(method, path, body))
            return
        authorization = self.headers.get("Authorization")
        self.logged = LoggedRequest(method, path, query, body, None, authorization=authorization)
        with kube.lock:
            kube.requests.append(self.logged)
        fault = kube.take_fault(method, path) if kube.authorized(authorization) else None
        if fault is not None:
            if fault.action == "delay":
                time.sleep(fault.seconds)
            elif fault.action == "drop":
                self.drop()
                return
            elif fault.action == "hang":
                kube.hangs_end.wait(fault.seconds)
                self.drop()
                return
            elif fault.action == "status":
                self._send_fault(fault)
                return
            elif fault.action == "drop_after":
                self.drop_instead = True
        super().respond(method, path, query, body)

    def send(self, status: int, payload: Any, headers: dict[str, str] | None = None, *, text: bool = False) -> None:
        if self.logged is not None:
            self.logged.status = status
        if self.drop_instead:
            self.drop()
            return
        super().send(status, payload, headers, text=text)

    def _send_fault(self, fault: Fault) -> None:
        headers = {}
        if fault.retry_after is not None:
            headers["Retry-After"] = str(math.ceil(fault.retry_after))  # HTTP allows whole seconds only
        if fault.text:
            # The max-in-flight filter's answer: plain text, not a Status.
            self.send(fault.code, "Too many requests, please try again later.\n", headers, text=True)
            return
        reason = fault.reason or DEFAULT_REASONS.get(fault.code, "InternalError")
        details: dict[str, Any] = {}
        if fault.retry_after is not None:
            details["retryAfterSeconds"] = int(fault.retry_after)
        message = {
            "InternalError": "Internal error occurred: injected",
            "TooManyRequests": "Too many requests, please try again later.",
        }.get(reason, f"injected {reason}")
        if reason == "InternalError":
            details["causes"] = [{"message": "injected"}]
        self.send(fault.code, status_body(fault.code, reason, message, details or None), headers)


def serve(argv: list[str] | None = None) -> None:
    """``python -m harness.fakekube --kubeconfig PATH``: run the server in a process of its own (so a
    benchmark's client does not share its interpreter); prints its URL, serves until killed."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m harness.fakekube")
    parser.add_argument("--kubeconfig", required=True, type=Path, help="where to write the kubeconfig")
    args = parser.parse_args(argv)
    kube = InstrumentedKube().start()
    kube.write_kubeconfig(args.kubeconfig)
    print(kube.url, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    serve()
