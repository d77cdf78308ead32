"""The command line: argument parsing and every verb (``main``), and the two verbs that span the
database and Kubernetes (``check``, ``demo``)."""
