"""Stand-ins that ship with pod-sweeper for its demo (and that its tests and benchmarks use too): a
throwaway PostgreSQL cluster built from the local binaries or found (``postgres``), a fake Kubernetes
API server (``fakekube``) and the demo's host table (``reference``). Nothing in the daemon imports this
package. The harnesses only the tests and the benchmarks need (the real API server's, cluster's and
node's launchers, the outbox in memory) live in the test tree, tests/harness/, out of the wheel."""
