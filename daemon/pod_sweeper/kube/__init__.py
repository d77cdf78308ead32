"""The Kubernetes side: loading the configuration, the one client wrapper (``api.PodDeleter``) that
turns every answer into an ``Answer`` or one of our error types (and records Events), and ``scope``:
where a row may aim a DELETE at all."""
