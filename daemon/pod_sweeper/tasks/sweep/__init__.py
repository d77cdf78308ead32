"""The pipeline, one row's way from its claim to its record: the ``sweeper`` builds it, the ``claimer``
claims rows into the ``pipeline``, the workers of the ``sender`` send one DELETE each, the ``recorder``
writes how each ended; ``report`` is a round's log line, and ``stop`` the stop's order, which they obey."""
