"""The daemon: the process (``runner``) and its named long-lived tasks (claimer, workers and finalizer
in ``sweeper``, the listener, the confirmer, the reconciler, the health server), with the rules they
apply as pure functions and small gates (``outcomes``, ``gates``)."""
