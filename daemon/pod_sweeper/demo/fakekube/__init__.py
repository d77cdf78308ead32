"""A fake Kubernetes API server for pods, faithful to how a real kube-apiserver answers.

It serves the real ``kubernetes`` client over real HTTP from its own threads, so a synchronous client
call can never block it. What it does, per the project's reference notes on the API server:

- create (201; server-set uid, resourceVersion from one global counter, creationTimestamp), get, list
  with label selectors, limit and continue (200 on an empty list), also across all namespaces;
- delete with DeleteOptions: 404 before any precondition check, 422 for invalid options, 409 Conflict
  on a UID or resourceVersion mismatch with the real Status body, graceful deletion of scheduled pods
  (deletionTimestamp set, the pod stays), finalizers for Foreground/Orphan propagation, ``dryRun``;
- kubelets: a pod bound to a node named in ``kubelets`` is ended as a running kubelet ends it, removed
  ``kubelet_seconds`` after its graceful DELETE unless a finalizer keeps it (held to the whole cluster by
  tests/cluster/test_fake_follows.py); a pod on any other node stays terminating, as on a node whose
  kubelet is gone;
- namespaces that terminate: ``DELETE /api/v1/namespaces/NS`` leaves NS terminating for good (nothing
  here finalizes it), where creating a pod or an Event answers 403 with the NamespaceTerminating cause
  while pods are read and deleted as usual (the namespace controller's end of it is the whole cluster's,
  tests/cluster).

The package: ``wording`` (how a real server words its answers) and ``server`` (``FakeKube`` and its HTTP
handler). The demo needs nothing more; the tests' and benchmarks' instruments (injected faults, a
request log, a control API for a server in a process of its own) are tests/harness/fakekube.py's.
"""

from __future__ import annotations

from pod_sweeper.demo.fakekube.server import FakeKube, Handler
from pod_sweeper.demo.fakekube.wording import GRANTED, Pod, not_found, selector_matches, status_body

__all__ = [
    "GRANTED",
    "FakeKube",
    "Handler",
    "Pod",
    "not_found",
    "selector_matches",
    "status_body",
]
