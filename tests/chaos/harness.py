"""The chaos harness: a workload of executions with pods, replicas run as real processes, and one
check of every invariant of docs/design.md at the end of a scenario, with the counts it printed.

Invariants checked by ``Workload.verify``:
- every retired pod was deleted under its UID, or recorded absent or replaced;
- no pod of an active generation and no replacement pod was deleted (each survives with its UID);
- no outbox row was lost (one per retired pod UID) and every row is done;
- every row ended once: exactly one recorded terminal attempt per row, and no pod answered
  200 to more than one DELETE.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from helpers import listeners

NAMESPACE = "sandboxes"


def spawn_replica(url: str, kubeconfig: Path, name: str, **env: str) -> subprocess.Popen[bytes]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("POD_SWEEPER_")}
    environ.update(
        {
            "POD_SWEEPER_DATABASE_URL": url,
            "POD_SWEEPER_KUBECONFIG": str(kubeconfig),
            "POD_SWEEPER_HTTP_PORT": "0",
            "POD_SWEEPER_REPLICA_ID": name,
            "POD_SWEEPER_LEASE_SECONDS": "5",
            "POD_SWEEPER_REQUEST_TIMEOUT": "1",
            "POD_SWEEPER_POLL_INTERVAL": "0.5",
            "POD_SWEEPER_BACKOFF_BASE": "0.1",
            "POD_SWEEPER_BACKOFF_MAX": "1",
            "POD_SWEEPER_MAX_ATTEMPTS": "50",
            "POD_SWEEPER_RATE_LIMIT_QPS": "0",
            "POD_SWEEPER_MAX_DELETES_PER_MINUTE": "0",
            "POD_SWEEPER_BREAKER_SURGE_FACTOR": "0",
            "POD_SWEEPER_BREAKER_TRANSACTION_ROWS": "0",
            "POD_SWEEPER_LOG_LEVEL": "WARNING",
            **env,
        }
    )
    # stderr goes to a file so that a replica that dies early can say why (see ``alive``).
    log = tempfile.NamedTemporaryFile(prefix=f"pod-sweeper-{name}-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "pod_sweeper", "run"], env=environ, stdout=subprocess.DEVNULL, stderr=log
    )
    log.close()
    _logs[proc.pid] = Path(log.name)
    return proc


_logs: dict[int, Path] = {}


def alive(proc: subprocess.Popen[bytes]) -> bool:
    """True while the replica runs; fails the test at once, with its last log lines, if it exited."""
    code = proc.poll()
    if code is None:
        return True
    tail = _logs[proc.pid].read_text(errors="replace").splitlines()[-5:] if proc.pid in _logs else []
    raise AssertionError(f"replica exited with {code} before it was expected to: " + " | ".join(tail))


@dataclass
class Workload:
    url: str
    kube: Any
    retired: dict[str, str] = field(default_factory=dict)  # pod name -> the UID that must go
    survivors: dict[str, str] = field(default_factory=dict)  # pod name -> a UID that must stay
    started: float = field(default_factory=time.monotonic)

    def conn(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.url, autocommit=True, row_factory=dict_row)

    def seed(self, n: int, *, prefix: str = "s", active_share: float = 0.0) -> list[str]:
        """``n`` executions with pods; a share stays active (their pods must survive)."""
        sids = []
        with (
            self.conn() as conn,
            conn.cursor() as cur,
            cur.copy(
                "COPY executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid, active) FROM STDIN"
            ) as copy,
        ):
            for i in range(n):
                sid = f"{prefix}{i}"
                pod = self.kube.create_pod(NAMESPACE, sid)
                uid = pod["metadata"]["uid"]
                stays = i < n * active_share
                (self.survivors if stays else self.retired)[sid] = uid
                copy.write_row((sid, 1, NAMESPACE, sid, uuid.UUID(uid), True))
                if not stays:
                    sids.append(sid)
        return sids

    def retire(self, sids: list[str]) -> None:
        with self.conn() as conn:
            conn.execute("UPDATE executions SET active = false WHERE sandbox_id = ANY(%s)", (sids,))
        self.started = time.monotonic()

    def listeners(self) -> int:
        """Replicas that are listening (so a retire now reaches them by NOTIFY)."""
        with self.conn() as conn:
            return listeners(conn)

    def done(self, sids: list[str] | None = None) -> int:
        """Rows done (of ``sids`` only, when given)."""
        with self.conn() as conn:
            row = conn.execute(
                "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status = 'done'"
                " AND (%(sids)s::text[] IS NULL OR sandbox_id = ANY(%(sids)s::text[]))",
                {"sids": sids},
            ).fetchone()
        return int(row["n"]) if row else 0

    def outbox_done(self) -> bool:
        with self.conn() as conn:
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE status <> 'done') AS open, count(*) AS n FROM pod_sweeper.outbox"
            ).fetchone()
        return bool(row and row["open"] == 0 and row["n"] == len(self.retired))

    def verify(self, label: str) -> dict[str, Any]:
        drained = time.monotonic() - self.started
        with self.conn() as conn:
            rows = conn.execute(
                "SELECT pod_name, pod_uid, status, outcome, attempts FROM pod_sweeper.outbox"
            ).fetchall()
            terminal = conn.execute(
                "SELECT outbox_id, count(*) AS n FROM pod_sweeper.attempts WHERE recorded"
                " AND result IN ('deleted', 'absent', 'replaced', 'dead') GROUP BY 1"
            ).fetchall()
        deletes = self.kube.deletes()
        accepted = Counter(d.path for d in deletes if d.status == 200)
        counts = {
            "scenario": label,
            "rows": len(rows),
            "deletes_seen": len(deletes),
            "deletes_200": sum(accepted.values()),
            "duplicate_deletes": sum(n - 1 for n in accepted.values() if n > 1),
            "outcomes": dict(Counter(r["outcome"] for r in rows)),
            "max_attempts": max((r["attempts"] for r in rows), default=0),
            "drain_s": round(drained, 2),
        }
        print(f"\nchaos {counts}")
        # No outbox row lost: one per retired pod UID, each done.
        assert {(r["pod_name"], str(r["pod_uid"])) for r in rows} == set(self.retired.items()), "rows lost or extra"
        assert all(r["status"] == "done" for r in rows), [r for r in rows if r["status"] != "done"][:5]
        # Each row ended once.
        assert all(t["n"] == 1 for t in terminal), [t for t in terminal if t["n"] != 1][:5]
        assert counts["duplicate_deletes"] == 0
        # Every DELETE was fenced by the UID of a retired pod; every retired pod is gone.
        for delete in deletes:
            name = delete.path.rsplit("/", 1)[1]
            assert delete.body is not None, delete  # every DELETE the server saw carried its options
            assert delete.body["preconditions"]["uid"] == self.retired.get(name), delete
        for name in self.retired:
            pod = self.kube.get_pod(NAMESPACE, name)
            assert (
                pod is None or pod["metadata"]["uid"] != self.retired[name] or pod["metadata"].get("deletionTimestamp")
            ), name
        # No active pod and no replacement was deleted.
        for name, uid in self.survivors.items():
            pod = self.kube.get_pod(NAMESPACE, name)
            assert pod is not None and pod["metadata"]["uid"] == uid and "deletionTimestamp" not in pod["metadata"], (
                name
            )
        return counts
