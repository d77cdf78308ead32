"""What the daemon's tasks ask of the API server, as interfaces. ``SweepKube``: the sweep pipeline and
its watches (the sender's DELETE, the outage watch's probe and the Events task's Event each end in an
``Answer``, kube/answer.py, so the tasks read one shape whoever answers). ``PodKube``: the confirmer's
and the reconciler's reads of pods and nodes and the force delete of a stuck pod. ``kube.api.KubeClient``
is the real one of both, over HTTP; the unit tests' ``ScriptedKube`` (tests/unit/sweep_kit.py) answers
as it is told, in the same shape. What the interfaces name lives here too: ``PodEvent`` (what an Event
says), ``PodState`` (what the daemon reads of a pod) and ``PodPage`` (a page of a list)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from pod_sweeper.kube.answer import Answer


@dataclass(frozen=True)
class PodEvent:
    """An Event to record on a pod the daemon deleted: why it went, for ``kubectl get events``."""

    namespace: str
    name: str
    uid: str
    reason: str
    message: str
    replica: str
    at: datetime


class SweepKube(Protocol):
    """The three calls the sweep makes. Each is made from a worker thread and must be safe from many."""

    def delete_pod(self, namespace: str, name: str, uid: str, *, timeout: float, dry_run: bool = False) -> Answer:
        """DELETE the pod under its UID: what the server said, whatever it was (no answer, and a failure
        nobody foresaw, included). Never raises. The answer's ``left`` says when the request went on the
        wire (after any credential hook), on the clock the outage watch and the sender's timer share
        (time.monotonic in the daemon); None when it never left or the client cannot tell."""
        ...

    def probe(self, *, timeout: float) -> Answer:
        """Whether the API server answers at all: the answer of its health check (``needs_probe`` when it
        is down: no answer, or a 5xx)."""
        ...

    def create_event(self, event: PodEvent, *, timeout: float) -> Answer:
        """Create the Event; the answer when it was created, else a ``kube.errors.KubeError`` holding it."""
        ...


@dataclass(frozen=True)
class PodState:
    """What the daemon reads of a pod (from a GET or a list), parsed from the raw JSON."""

    uid: str
    node_name: str | None
    namespace: str = ""
    name: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    created: datetime | None = None
    deleting: bool = False  # deletionTimestamp set: the pod is already terminating

    @classmethod
    def from_json(cls, pod: Mapping[str, Any]) -> PodState:
        metadata = pod.get("metadata") or {}
        try:
            created = datetime.fromisoformat(metadata["creationTimestamp"])
        except (KeyError, TypeError, ValueError):
            created = None  # of unknown age: the reconciliation pass never touches it
        return cls(
            uid=str(metadata.get("uid")),
            node_name=(pod.get("spec") or {}).get("nodeName"),
            namespace=str(metadata.get("namespace") or ""),
            name=str(metadata.get("name") or ""),
            labels=dict(metadata.get("labels") or {}),
            created=created,
            deleting=bool(metadata.get("deletionTimestamp")),
        )


@dataclass(frozen=True)
class PodPage:
    pods: list[PodState]
    continue_token: str | None  # None: this was the last page


class PodKube(Protocol):
    """What the confirmer of terminating pods and the reconciler ask of the API server. Each call is
    made from a worker thread; anything but the answer it names is a ``kube.errors.KubeError``."""

    def pod_state(self, namespace: str, name: str, *, timeout: float) -> PodState | None:
        """The pod now holding ``name`` (its UID and node), or None when there is none."""
        ...

    def list_pods(
        self, namespace: str, label_selector: str, *, limit: int, continue_token: str | None, timeout: float
    ) -> PodPage:
        """One page of the pods in ``namespace`` matching ``label_selector``; an expired continue token
        is a KubeError whose answer is a 410."""
        ...

    def node_exists(self, name: str, *, timeout: float) -> bool:
        """Whether the node is still registered (a pod stuck on a vanished node never finishes)."""
        ...

    def force_delete(self, namespace: str, name: str, uid: str, *, timeout: float) -> Answer:
        """DELETE with gracePeriodSeconds=0, still under the UID precondition: its answer, or a KubeError."""
        ...
