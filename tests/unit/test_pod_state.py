"""Reading a pod from the API's JSON: what the reconciliation pass relies on, and what it must survive."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pod_sweeper.kube.interface import PodState


def test_a_whole_pod() -> None:
    pod = PodState.from_json(
        {
            "metadata": {
                "name": "p",
                "namespace": "ns",
                "uid": "u",
                "labels": {"a": "1"},
                "creationTimestamp": "2026-12-02T20:00:00Z",
                "deletionTimestamp": "2026-12-02T20:05:00Z",
            },
            "spec": {"nodeName": "n1"},
        }
    )
    assert (pod.name, pod.namespace, pod.uid, pod.node_name, dict(pod.labels)) == ("p", "ns", "u", "n1", {"a": "1"})
    assert pod.created == datetime(2026, 12, 2, 20, 0, tzinfo=UTC) and pod.deleting


@pytest.mark.parametrize("stamp", [None, "", "yesterday", 5])
def test_an_unreadable_creation_time_means_unknown_age(stamp: object) -> None:
    pod = PodState.from_json({"metadata": {"uid": "u", "creationTimestamp": stamp}})
    assert pod.created is None and not pod.deleting and dict(pod.labels) == {}
