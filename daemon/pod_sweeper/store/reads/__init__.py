"""What the command line and the metrics refresher read to show a person, and change nothing:
``status``, ``explain``, ``waits`` (why each open row waits), ``replicas`` (who sweeps, and the settings
that decide a row's fate, from the replicas' own rows) and ``checks`` (what `check` reads). Each
read is bounded by an index: none scans the done history."""
