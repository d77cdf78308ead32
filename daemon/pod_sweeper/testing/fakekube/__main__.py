"""``python -m pod_sweeper.testing.fakekube --kubeconfig PATH``: a fake API server in a process of its own."""

from pod_sweeper.testing.fakekube.server import serve

serve()
