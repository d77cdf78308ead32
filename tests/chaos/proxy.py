"""A TCP proxy in front of PostgreSQL that can freeze connections *silently*: it stops forwarding in
both directions but keeps both sockets open, as a half-open connection behind a dead NAT or a
partitioned network would. No FIN, no RST: only the daemon's own checks can notice."""

from __future__ import annotations

import contextlib
import select
import socket
import threading


class FreezingProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._connections: list[dict[str, object]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True, name="freezing-proxy")

    def __enter__(self) -> FreezingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._listener.close()

    def freeze(self, marker: bytes) -> int:
        """Freeze every open connection whose start-up bytes contain ``marker``; returns how many."""
        with self._lock:
            hits = [c for c in self._connections if marker in c["startup"] and not c["frozen"]]  # type: ignore[operator]
            for connection in hits:
                connection["frozen"] = True
        return len(hits)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            state: dict[str, object] = {"startup": b"", "frozen": False}
            with self._lock:
                self._connections.append(state)
            threading.Thread(target=self._pump, args=(client, upstream, state), daemon=True).start()

    def _pump(self, client: socket.socket, upstream: socket.socket, state: dict[str, object]) -> None:
        peers = {client: upstream, upstream: client}
        try:
            while not self._stop.is_set():
                readable, _, _ = select.select(list(peers), [], [], 0.2)
                if state["frozen"]:
                    continue  # hold everything: read nothing, send nothing, close nothing
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if sock is client and len(state["startup"]) < 4096:  # type: ignore[arg-type]
                        state["startup"] = state["startup"] + data  # type: ignore[operator]
                    peers[sock].sendall(data)
        except OSError:
            pass
        finally:
            if not state["frozen"]:
                for sock in peers:
                    with contextlib.suppress(OSError):
                        sock.close()
