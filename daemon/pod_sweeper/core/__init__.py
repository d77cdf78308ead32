"""The shared core: settings, errors, logging, metrics, pacing and failpoints. It imports nothing of
pod-sweeper's own outside itself; every other part may import it."""
