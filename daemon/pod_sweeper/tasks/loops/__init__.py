"""The side loops beside the pipeline: the ``listener`` (LISTEN/NOTIFY), the ``outage`` watch of the API
server, the ``surge`` watch that trips the breaker, the ``confirmer`` of terminating pods, the
``reconciler``, the ``events`` sender, ``retention`` (the done history past its age), the
``schema_watch`` (the ledger read again while the replica runs), ``presence`` (the replica's own row
in pod_sweeper.replicas, its heartbeat) and the ``refresher`` of the database gauges."""
