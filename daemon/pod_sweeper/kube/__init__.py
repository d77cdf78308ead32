"""The Kubernetes side: loading the configuration, the one client wrapper (``api.KubeClient``) that
turns every answer into what the server said (``DeleteAnswer``) or one of our error types, and ``scope``:
where a row may aim a DELETE at all."""
