"""systemd's notify protocol, without a systemd library: one datagram per message to the socket named
by ``$NOTIFY_SOCKET`` (a path, or ``@name`` for the abstract namespace). Outside systemd the variable is
unset and every call does nothing.
"""

from __future__ import annotations

import os
import socket


class Notifier:
    def __init__(self, address: str | None = None) -> None:
        self.address = address if address is not None else os.environ.get("NOTIFY_SOCKET")
        usec = os.environ.get("WATCHDOG_USEC")
        pid = os.environ.get("WATCHDOG_PID")
        watchdog_for_us = usec and usec.isdigit() and (not pid or pid == str(os.getpid()))
        # Pet at half the interval systemd allows, as sd_watchdog_enabled(3) advises.
        self.watchdog_interval: float | None = int(usec) / 2e6 if watchdog_for_us and usec else None
        self._sock: socket.socket | None = None

    def send(self, *fields: str) -> None:
        """Send ``KEY=value`` lines in one datagram; errors are ignored (systemd may be gone)."""
        if not self.address:
            return
        target = "\0" + self.address[1:] if self.address.startswith("@") else self.address
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto("\n".join(fields).encode(), target)
        except OSError:
            pass

    def ready(self, status: str) -> None:
        self.send("READY=1", f"STATUS={status}")

    def status(self, status: str) -> None:
        self.send(f"STATUS={status}")

    def watchdog(self) -> None:
        self.send("WATCHDOG=1")

    def stopping(self) -> None:
        self.send("STOPPING=1", "STATUS=stopping: finishing in-flight deletes, handing back claims")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
