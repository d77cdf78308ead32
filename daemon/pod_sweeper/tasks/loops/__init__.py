"""The side loops beside the pipeline: the ``listener`` (LISTEN/NOTIFY), the ``outage`` watch of the API
server, the ``surge`` watch that trips the breaker, the ``confirmer`` of terminating pods, the
``reconciler`` and the ``events`` sender."""
