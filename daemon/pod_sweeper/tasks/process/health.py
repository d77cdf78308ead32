"""The HTTP side of a running daemon: ``/metrics``, ``/livez`` and ``/readyz`` on one port, and the
state they read (``Health``). The timer that refreshes the database gauges is tasks/loops/refresher.py.

The server runs on its own thread (a scrape or a probe must answer even while the event loop is busy)
and only reads state that the loop writes: a heartbeat time and a few flags. **The rule**: the loop
replaces each field of ``Health`` whole (a flag, a string, a read-only mapping, never one changed in
place), and the gates it calls keep theirs as frozen snapshots (tasks/rules/gates.py, "Threads"); a probe
reads each field once, so it may see two fields from two neighbouring moments (a reason one probe late),
never a field half written. ``/livez`` says the loop
is turning; ``/readyz`` says the daemon can do its job right now: database reachable, schema at the
expected version, listener healthy (or poll-only), start-up catch-up done, not stopping, and none of
the reasons rows wait whose rule says not ready (core.waits: the breaker, the API server unreachable or
refusing us, the schema gate, a start error). Each answers a short JSON reason.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from pod_sweeper.core.errors import ConfigError
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.waits import Process, Wait, readiness

# The loop beats every second; livez fails after this many seconds without a beat.
LIVENESS_GRACE_SECONDS = 15.0


@dataclass
class Health:
    """State the loop writes and the probes read."""

    started: bool = False  # schema checked, LISTEN in place, first catch-up claim done
    stopping: bool = False
    database_ok: bool = False
    database_error: str | None = "not connected yet"
    schema_ok: bool = False
    schema_error: str | None = None  # why the schema watch found the schema one this replica may not run on
    # A start-up error a person must fix, while the replica waits (tasks.process.startup).
    start_error: str | None = None
    heartbeat: float = field(default_factory=time.monotonic)
    # Read from their owners at the moment a probe asks (see ``watch``), never copied on a timer.
    listener_ok: Callable[[], bool | None] = lambda: None  # None: poll-only mode
    gates: Callable[[], Mapping[Wait, str]] = lambda: {}  # the gates' reasons that hold now (core.waits)
    # What the gauge refresher last read of the database's reasons for this replica's cluster (a pause,
    # the replication guard's hold): written by the refresher, on the event loop.
    seen: Mapping[Wait, str] = field(default_factory=dict)

    def watch(self, *, listener_ok: Callable[[], bool | None], gates: Callable[[], Mapping[Wait, str]]) -> None:
        """Where readiness reads the listener's health and the gates' reasons (Kubernetes' refusal and
        reachability, the breaker, dry run) from."""
        self.listener_ok, self.gates = listener_ok, gates

    def waits(self) -> dict[Wait, str]:
        """Every reason (core.waits) this replica knows keeps rows now, with what its owner says: the
        one source of its readiness, its ``pod_sweeper_waiting`` gauge and its wait log lines."""
        active = {**self.seen, **self.gates()}
        if self.start_error:
            active[Wait.START_ERROR] = f"cannot start: {self.start_error}"
        if self.schema_error:
            active[Wait.SCHEMA] = f"not claiming: {self.schema_error}"
        return active

    def readiness(self) -> tuple[bool, str]:
        """``core.waits.readiness`` of what this replica knows now: the one decision."""
        process = Process(
            stopping=self.stopping,
            database_error=None if self.database_ok else (self.database_error or "not connected"),
            schema_checked=bool(self.schema_error or self.schema_ok),
            listener_hearing=self.listener_ok(),
            started=self.started,
        )
        return readiness(self.waits(), process)

    def liveness(self) -> tuple[bool, str]:
        age = time.monotonic() - self.heartbeat
        if age > LIVENESS_GRACE_SECONDS:
            return False, f"event loop stalled for {age:.0f} s"
        return True, "ok"


def _handler(health: Health, metrics: Metrics) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_HEAD(self) -> None:
            """What GET would answer, headers only (load balancers and curl -I probe this way)."""
            self._head_only = True
            self.do_GET()

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)
            elif path in ("/livez", "/readyz"):
                ok, reason = health.liveness() if path == "/livez" else health.readiness()
                body = json.dumps({"status": "ok" if ok else "fail", "reason": reason}).encode()
                self._send(200 if ok else 503, body, "application/json")
            else:
                self._send(404, b'{"status": "fail", "reason": "no such path"}', "application/json")

        def _send(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not getattr(self, "_head_only", False):
                self.wfile.write(body)

    return Handler


class HealthServer:
    """``/metrics``, ``/livez``, ``/readyz`` on a thread of their own."""

    def __init__(self, host: str, port: int, health: Health, metrics: Metrics) -> None:
        try:
            self._server = ThreadingHTTPServer((host, port), _handler(health, metrics))
        except OSError as exc:
            # A port in use (or an address not on this host) is the operator's to fix, not a crash.
            raise ConfigError(
                f"cannot serve /metrics and the probes on {host}:{port} ({exc.strerror or exc}): "
                "free the port or set POD_SWEEPER_HTTP_PORT (0 turns the server off)"
            ) from None
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
