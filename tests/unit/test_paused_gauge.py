"""``pod_sweeper_paused_seconds`` as the HTTP thread may read it at any moment: a pause in force never
missing from it, however the refresher changes it (tasks/process/health.py ``set_paused``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pod_sweeper.core.metrics import Metrics
from pod_sweeper.tasks.loops.refresher import set_paused

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def pause(namespace: str, minutes: float, cluster: str = "east") -> dict[str, Any]:
    since = NOW - timedelta(minutes=minutes)
    return {"cluster": cluster, "kind": "pause", "pod_namespace": namespace, "since": since, "now": NOW}


class Scrapes:
    """Wraps the gauge: after each change of it, what a scrape would see of the whole cluster's pause."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics, self.gauge, self.seen = metrics, metrics.paused, list[bool]()
        object.__setattr__(metrics, "paused", self)  # the refresher sees the gauge through this

    def _scrape(self) -> None:
        value = self.metrics.registry.get_sample_value(
            "pod_sweeper_paused_seconds", {"pod_cluster": "east", "pod_namespace": "*"}
        )
        self.seen.append(value is not None)

    def labels(self, *values: str) -> Any:
        child, scrapes = self.gauge.labels(*values), self

        class Child:
            def set(self, value: float) -> None:
                child.set(value)
                scrapes._scrape()

        return Child()

    def remove(self, *values: str) -> None:
        self.gauge.remove(*values)
        self._scrape()

    def clear(self) -> None:
        self.gauge.clear()
        self._scrape()


def test_a_scrape_never_sees_a_pause_in_force_missing_while_the_gauge_changes() -> None:
    metrics = Metrics()
    exported = set_paused(metrics, set(), [pause("", 5)], cluster="east")  # the whole cluster, paused
    scrapes = Scrapes(metrics)
    exported = set_paused(metrics, exported, [pause("", 6)], cluster="east")  # the next refresh
    exported = set_paused(metrics, exported, [pause("", 7), pause("team-a", 1)], cluster="east")  # one more
    exported = set_paused(metrics, exported, [pause("", 8)], cluster="east")  # that one ended
    assert scrapes.seen and all(scrapes.seen), scrapes.seen
    assert exported == {("east", "*")}
    value = metrics.registry.get_sample_value(
        "pod_sweeper_paused_seconds", {"pod_cluster": "east", "pod_namespace": "*"}
    )
    assert value == 8 * 60
    ended = metrics.registry.get_sample_value(
        "pod_sweeper_paused_seconds", {"pod_cluster": "east", "pod_namespace": "team-a"}
    )
    assert ended is None  # a pause that ended is gone from the gauge


def test_another_clusters_pause_is_not_this_replicas() -> None:
    metrics = Metrics()
    assert set_paused(metrics, set(), [pause("", 5, cluster="west")], cluster="east") == set()
