"""The daemon's peak memory while it drains a backlog."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from rig import Rig


def rss(rig: Rig, n: int) -> None:
    """Peak memory of a daemon process draining an ``n``-row backlog."""
    url = rig.fresh_db()
    rig.backlog(url, n)
    env = {
        **os.environ,
        "POD_SWEEPER_DATABASE_URL": url,
        "POD_SWEEPER_KUBECONFIG": str(rig.kubeconfig),
        "POD_SWEEPER_HTTP_PORT": "0",
        "POD_SWEEPER_RATE_LIMIT_QPS": "0",
        "POD_SWEEPER_MAX_DELETES_PER_MINUTE": "0",
        "POD_SWEEPER_BREAKER_SURGE_FACTOR": "0",
        "POD_SWEEPER_BREAKER_TRANSACTION_ROWS": "0",
        "POD_SWEEPER_LOG_LEVEL": "WARNING",
    }
    proc = subprocess.Popen([sys.executable, "-m", "pod_sweeper", "run"], env=env)
    peak = 0
    while rig.done(url) < n:
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
            peak = max(peak, int(next(x for x in status.splitlines() if x.startswith("VmHWM")).split()[1]))
        except (OSError, StopIteration):
            pass
        time.sleep(0.2)
    proc.terminate()
    proc.wait(30)
    rig.results.update(rss_mb=round(peak / 1024, 1), rss_backlog_rows=n)
