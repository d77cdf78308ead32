"""The database side: connections, the one owner of SQL (``queries``), migrations, the outbox's transitions and the
store the sweep pipeline reaches them through (``interface``, ``outbox.OutboxStore``, ``cursor``: where its claims
start reading), the claim-time re-check, attaching to a host table, and what ``status``, ``explain``, ``backfill``
and ``grant`` read and write. It knows nothing of the daemon's tasks or the command line."""
