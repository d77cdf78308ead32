"""The daemon: the process and its named long-lived tasks, any one of which dying stops the rest. Four
groups, importing one way (``process`` > ``sweep`` > ``loops`` > ``rules``, held by import-linter):

- ``sweep``: the pipeline, one row's way from its claim to the record of how it ended;
- ``loops``: the side loops beside it (wakeups, the outage watch, confirmation, reconciliation, Events);
- ``rules``: what an answer means for a row, and the gates, as pure functions and small objects;
- ``process``: the process itself: start, stop, probes, start-up errors, systemd.
"""
