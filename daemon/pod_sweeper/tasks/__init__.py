"""The daemon: the process and its named long-lived tasks, any one of which dying stops the rest.

- The pipeline (one row's way from claim to record): the ``sweeper`` builds it, the ``claimer`` claims
  rows into the ``pipeline``, the workers of the ``sender`` send one DELETE each, the ``recorder`` writes
  the results; ``answers`` decides what each answer means for its row (pure functions), ``gates`` hold
  the auth, namespace, outage, breaker and schema gates, ``report`` is a round's log line.
- The process: the ``runner`` starts and stops it all, ``startup`` decides what a start-up error a person
  must fix does, ``health`` serves the probes and the metrics, ``sdnotify`` speaks to systemd.
- The side loops: the ``listener`` (LISTEN/NOTIFY), the ``outage`` watch, the ``confirmer`` of
  terminating pods, the ``reconciler`` and the ``events`` sender.
"""
