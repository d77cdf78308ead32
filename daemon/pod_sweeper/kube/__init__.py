"""The Kubernetes side: where the client's configuration comes from and how its credentials stay fresh
(``config``), what the server said in one shape (``answer``: an ``Answer`` and the one function that
reads a status) and the one exception that carries it (``errors``), the one client wrapper
(``api.KubeClient``), what the sweep asks of it as an interface (``interface``: ``SweepKube``), and
``scope``: where a row may aim a DELETE at all."""
