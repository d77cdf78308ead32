"""The shared core: settings, errors, logging, metrics, pacing, failpoints, the outcome values both
sides speak of, and text made safe for a terminal. It imports nothing of pod-sweeper's own outside
itself; every other part may import it."""
