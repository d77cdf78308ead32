"""The daemon: the process (``runner``) and its named long-lived tasks. The sweeper is three kinds of
task around one ``pipeline``: the ``claimer``, the workers of the ``sender`` and the ``recorder``; beside
them the ``listener``, the ``confirm``-er, the ``reconcile``-r and the ``health`` server. The rules they
apply are pure functions and small gates (``outcomes``, ``gates``), tested without I/O."""
