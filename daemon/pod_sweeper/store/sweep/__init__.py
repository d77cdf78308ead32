"""The hot path's store: what the running daemon reads and writes for every row. ``outbox``: the row's
transitions (the claim with its breaker rule, the record, next due, the wakeup flag, the replication
guard's mark); ``recheck``: the claim-time re-check of the host's generation; ``cursor``: where a
replica's claims start reading the claim index; ``breaker``, ``outages`` and ``channel`` (NOTIFY and
LISTEN); ``retention``; ``gauges`` and ``rates`` (what the refresher, the surge watch and `status`
read); ``terminating`` and ``quarantine`` (the confirmer's and the reconciler's rows); ``presence`` (the
replica's own row, its heartbeat); and ``pgstore``,
the pipeline's store on PostgreSQL."""
