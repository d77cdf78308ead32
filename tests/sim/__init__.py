"""The simulator (issue 53): N replicas of the daemon's own sweep tasks over the memory store and a
scripted Kubernetes, on a virtual clock and one seeded scheduler; the same seed gives the same run.
``loop`` is the event loop, ``world`` one run, ``invariants`` what is checked, ``mutants`` the bugs put
back to prove it finds them, ``runner`` many seeds, a replay and the shrinking; ``python -m tests.sim``
runs seeds and replays one (docs/design.md, "The simulator")."""
