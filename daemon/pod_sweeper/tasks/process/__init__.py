"""The process: the ``runner`` starts and stops it all, ``startup`` decides what a start-up error a person
must fix does, ``health`` serves the probes and the metrics, ``sdnotify`` speaks to systemd."""
