"""The Kubernetes side: where the client's configuration comes from and how its credentials stay fresh
(``config``), the one client wrapper (``api.KubeClient``) that turns every answer into what the server
said (``DeleteAnswer``) or one of our error types, and ``scope``: where a row may aim a DELETE at all."""
