"""A real Prometheus server (Debian's ``prometheus`` package) scraping a daemon every second, for the
dashboard tier."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from harness.postgres import free_port
from helpers import stop_process, wait_until


class Prometheus:
    def __init__(self, binary: str, target_port: int) -> None:
        self.binary = binary
        self.root = Path(tempfile.mkdtemp(prefix="pod-sweeper-prometheus-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        (self.root / "prometheus.yml").write_text(
            json.dumps(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "scrape_configs": [
                        {"job_name": "pod-sweeper", "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}]}
                    ],
                }
            )
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant query's result vector; raises on a query Prometheus cannot parse."""
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}") as answer:
            body = json.loads(answer.read())
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            log = (self.root / "prometheus.log").read_text(errors="replace")
            raise AssertionError(f"prometheus exited with {self.proc.returncode}: {log[-2000:]}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def __enter__(self) -> Self:
        with (self.root / "prometheus.log").open("w") as log:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={self.root / 'prometheus.yml'}",
                    f"--storage.tsdb.path={self.root / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_until(self._ready, timeout=60, interval=0.1, what="prometheus ready")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.proc is not None:
            stop_process(self.proc, timeout=20)
        shutil.rmtree(self.root, ignore_errors=True)
