"""Stand-ins that ship with pod-sweeper for its demo, its tests and its benchmarks: a throwaway
PostgreSQL cluster built from the local binaries, a fake Kubernetes API server, the real API server's,
cluster's and node's launchers, and the outbox in memory on a fake clock (``memstore``, ``clock``) for
the tasks' unit tests. Nothing in the daemon imports this package."""
