"""What an operator's commands write: ``attach`` (the trigger on a host table) with ``enqueue_rule``
(the enqueue rule as SQL, for the trigger and ``backfill``), ``controls`` (pauses, holds, the audit
trail) and ``bulk`` (retry and discard, a page at a time)."""
