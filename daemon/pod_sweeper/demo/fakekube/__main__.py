"""``python -m pod_sweeper.demo.fakekube --kubeconfig PATH``: a fake API server in a process of its own."""

from pod_sweeper.demo.fakekube.server import serve

serve()
