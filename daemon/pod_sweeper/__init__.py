"""pod-sweeper: a retired sandbox generation implies a deleted pod.

The package is in layers, and imports flow one way, top to bottom (import-linter holds it to that in
CI, see pyproject.toml):

- ``cli``: the command line and its verbs;
- ``tasks``: the daemon's process and its long-lived tasks;
- ``store``: the database side, and the one owner of SQL;
- ``kube``: the Kubernetes side (``store`` and ``kube`` never import each other);
- ``core``: settings, errors, logs, metrics, pacing, outcomes, safe text.

``demo`` (the fake API server, a throwaway PostgreSQL, the reference table) is what ``pod-sweeper
demo`` runs on (the tests and the benchmarks use it too); nothing below ``cli`` imports it, and it
imports only ``core``. What only the tests need is in the test tree (tests/harness), out of the wheel.
"""

__version__ = "0.1.0"
