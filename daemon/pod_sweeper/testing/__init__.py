"""Stand-ins that ship with pod-sweeper for its demo, its tests and its benchmarks: a throwaway
PostgreSQL cluster built from the local binaries, and a fake Kubernetes API server. Nothing in the
daemon imports this package."""
