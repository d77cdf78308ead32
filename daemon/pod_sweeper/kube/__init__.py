"""The Kubernetes side: loading the configuration, and the one client wrapper (``api.PodDeleter``) that
turns every answer into an ``Answer`` or one of our error types."""
