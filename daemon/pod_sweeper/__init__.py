"""pod-sweeper: a retired sandbox generation implies a deleted pod.

The package is layered so that imports flow one way: settings, logs and errors at the bottom; the
database pool, queries and migrations above them; outbox transitions, the re-check and the Kubernetes
deleter above those; the sweeper loop, listener and runner on top; the CLI last.
"""

__version__ = "0.1.0"
