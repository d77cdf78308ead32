"""pod-sweeper: a retired sandbox generation implies a deleted pod.

The package is in layers, and imports flow one way, top to bottom (import-linter holds it to that in
CI, see pyproject.toml):

- ``cli``: the command line and its verbs;
- ``tasks``: the daemon's process and its long-lived tasks;
- ``store``: the database side, and the one owner of SQL;
- ``kube``: the Kubernetes side (``store`` and ``kube`` never import each other);
- ``core``: settings, errors, logs, metrics, pacing, outcomes, safe text.

``testing`` (a throwaway PostgreSQL, the fake API server, the real API server's launcher, the reference
table) serves the demo, the tests and the benchmarks; nothing below ``cli`` imports it.
"""

__version__ = "0.1.0"
