"""What the command line and the metrics refresher read to show a person, and change nothing:
``status``, ``explain``, ``waits`` (why each open row waits) and ``checks`` (what `check` reads). Each
read is bounded by an index: none scans the done history."""
