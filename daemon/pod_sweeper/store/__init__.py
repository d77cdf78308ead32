"""The database side, grouped by who runs it. At the top, what every group stands on: connections
(``db``), the one owner of SQL (``queries``), the rows the pipeline has in hand (``rows``) and the store the
sweep pipeline reaches the outbox through (``interface``). ``sweep``: the hot path, what the running
daemon reads and writes for every row (the claim with its re-check, the record, the breaker, the outage
rows, the wakeup channel, retention, the gauges, the confirmer's and reconciler's rows, and
`pgstore.OutboxStore`). ``reads``: what `status`, `explain`, `check` and the refresher read.
``admin``: what an operator's commands write (attach, backfill, the controls, bulk retry and discard).
``schema``: the migration runner and the grants. It knows nothing of the daemon's tasks or the command
line."""
