"""``pod-sweeper explain`` for on-call: what ``store.reads.explain`` read of one pod, and what happens next and
when. What happens next is a pure function of the row (:func:`next_step`), so its table is unit-tested
without a database. Text for people (every value escaped and cut: see ``core.text``), ``--json`` for
scripts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, replace
from datetime import datetime
from typing import Any

from pod_sweeper.cli.status_text import undo
from pod_sweeper.core.settings import DEFAULT_CLUSTER
from pod_sweeper.core.text import printable
from pod_sweeper.core.waits import DUE, Wait, describe
from pod_sweeper.store.reads.explain import Story


def _age(at: datetime, now: datetime) -> str:
    seconds = (now - at).total_seconds()
    word = "ago" if seconds >= 0 else "from now"
    seconds = abs(seconds)
    amount = (
        f"{seconds:.0f} s"
        if seconds < 120
        else f"{seconds / 60:.0f} min"
        if seconds < 7200
        else f"{seconds / 3600:.1f} h"
    )
    return f"{amount} {word}"


def _kept_by(control: dict[str, Any]) -> str:
    if control["kind"] == "transaction":
        return (
            f"one large host transaction, found by {control['actor']} at {control['since']:%Y-%m-%d %H:%M:%S}: "
            f"{control['reason']}; not claimed (nor charged) until an on-call releases it or discards its rows"
        )
    until = f"{control['until']:%Y-%m-%d %H:%M:%S}"
    if control["kind"] == "hold":
        kept = f"held by {control['actor']} until {until}: {control['reason']}; not sent (nor charged)"
    else:
        scope = f"namespace {control['pod_namespace']}" if control["pod_namespace"] else "the whole cluster"
        kept = (
            f"paused ({scope} of cluster {control['cluster']}) by {control['actor']} until {until}: "
            f"{control['reason']}; not claimed"
        )
    return f"{kept} until then or `{undo(control)}`"


def _fallback_wait(row: dict[str, Any]) -> str:
    """A row's reason when ``sql/row_waits.sql`` did not give one (it was open when explain read it and
    closed before the reasons were read): what its own columns say."""
    if row["status"] == "claimed" and (row["lease_expires_at"] or row["next_attempt_at"]) > row["now"]:
        return Wait.CLAIMED.value
    return Wait.BACKOFF.value if row["next_attempt_at"] > row["now"] else DUE


def _waiting(row: dict[str, Any], kept: Sequence[dict[str, Any]]) -> str:
    """Why an open row waits (its ``wait``, one of core.waits' reasons), with the particulars."""
    now: datetime = row["now"]
    reason = row.get("wait") or _fallback_wait(row)
    cluster = row.get("cluster", DEFAULT_CLUSTER)
    attempt = f"attempt {row['attempts'] + 1}"
    if reason == DUE:
        return f"claimable now: the next claim takes it, {attempt}"
    wait = Wait(reason)
    at = f"{row['next_attempt_at']:%Y-%m-%d %H:%M:%S} ({_age(row['next_attempt_at'], now)})"
    detail = {
        Wait.CLAIMED: lambda: (
            f"claimed by {row['claimed_by']} {_age(row['claimed_at'], now)}; if that replica died, another takes "
            f"it when the lease ends ({_age(row['lease_expires_at'], now)})"
        ),
        **dict.fromkeys(
            (Wait.HELD, Wait.PAUSED, Wait.LARGE_TRANSACTION),
            lambda: "; and ".join(_kept_by(control) for control in kept),
        ),
        Wait.BREAKER: lambda: f"cluster {cluster}: `pod-sweeper reset-breaker --cluster {cluster}` after a look",
        Wait.BACKOFF: lambda: f"until {at}, then {attempt}; last error: {row['last_error'] or '-'}",
        Wait.KUBE_UNAUTHORIZED: lambda: f"tried again at {at}; last error: {row['last_error'] or '-'}",
        Wait.NAMESPACE_REFUSED: lambda: (
            f"namespace {row.get('pod_namespace')}, tried again at {at}; last error: {row['last_error'] or '-'}"
        ),
        Wait.UNSWEPT: lambda: f"claimable since {_age(row['next_attempt_at'], now)}, {attempt} when claimed",
        Wait.REPLICATION_GUARD: lambda: (
            f"cluster {cluster}, standbys named by its replicas' guard: {'; '.join(row['guards'])}"
            if row.get("guards")
            else f"cluster {cluster}: marked by a guard, and no replica of the cluster is known to name its standbys"
        ),
    }.get(wait, lambda: f"cluster {cluster}")()
    return describe(wait, detail)


def next_step(row: dict[str, Any], *, kept: Sequence[dict[str, Any]] = ()) -> str:
    """What happens next to an outbox row, and when (``row`` as ``sql/explain_outbox.sql`` reads it, with
    its ``wait`` from ``sql/row_waits.sql`` when open; ``kept``: the holds and pauses that keep it, if
    any)."""
    now: datetime = row["now"]
    status = row["status"]
    if status in ("pending", "claimed"):
        return _waiting(row, kept)
    if status == "dead":
        return (
            f"dead after {row['attempts']} attempt(s), last error: {row['last_error'] or '-'}; nothing happens until "
            f"an operator runs `pod-sweeper retry {row['id']}`"
        )
    outcome = row["outcome"]
    if outcome == "deleted":
        if row["stuck_at"] is not None:
            return f"deleted, but stuck terminating since {row['stuck_at']:%Y-%m-%d %H:%M:%S}: its node may be gone"
        if row["confirmed_at"] is not None:
            return f"done: deleted, and seen gone {_age(row['confirmed_at'], now)}"
        if row["confirm_after"] is not None:
            return (
                f"deleted and terminating: looked at again at {row['confirm_after']:%Y-%m-%d %H:%M:%S} "
                f"({_age(row['confirm_after'], now)})"
            )
        return "done: deleted"
    return {
        "absent": "done: the pod was already gone",
        "replaced": "done: the name now carries another pod (another UID), which was left alone",
        "skipped_active": "done: its generation was active again when claimed, so the pod was left alone",
        "would_delete": "dry run: would have been deleted; the next real run reopens it",
        "discarded": "discarded by an operator, no request sent (`pod-sweeper sql audit` says who and why)",
    }.get(outcome, f"done: {outcome}")


def no_row_story(executions: list[dict[str, Any]], suspects: list[dict[str, Any]]) -> str:
    """What happens to a pod with no outbox row."""
    if any(e["active"] is not False for e in executions):
        return "its generation is active: nothing happens until a writer retires it"
    if suspects:
        first = suspects[0]
        return (
            f"a reconciliation suspect ({first['why']}) since {first['first_seen_at']:%Y-%m-%d %H:%M:%S}: enqueued "
            "when a later pass sees it again after the quarantine"
        )
    if executions:
        return "retired, but never enqueued (retired before `attach`?): `pod-sweeper backfill` enqueues it"
    return "pod-sweeper knows nothing of it: no execution row, no outbox row, no suspect"


def replica_notes(row: dict[str, Any], replicas: Sequence[dict[str, Any]]) -> list[str]:
    """What the replicas that decide an open row's fate (their own rows in pod_sweeper.replicas, never the
    reader's settings) add to its next step: none alive, dry run in its namespace, or live replicas
    that disagree on the settings that decide it (a rolling change), replica by replica."""
    if row["status"] not in ("pending", "claimed"):
        return []
    cluster = row.get("cluster", DEFAULT_CLUSTER)
    mine = [r for r in replicas if r["cluster"] == cluster]
    live = [r for r in mine if r["state"] == "live"]
    notes: list[str] = []
    if not live:
        gone = [f"{r['replica']} ({r['state']} {r['seen_seconds_ago']:.0f} s ago)" for r in mine]
        last = "; the last known: " + ", ".join(gone) if gone else ""
        notes.append(
            f"no live replica of cluster {cluster} is known (pod_sweeper.replicas){last}: nothing claims it until one "
            "starts, unless replicas of a release before migration 0019 sweep it unseen (`pod-sweeper status`)"
        )
        return notes
    namespace = row.get("pod_namespace", "")
    dry = [r for r in live if r["dry_run"] or namespace in (r["dry_run_namespaces"] or ())]
    if dry and len(dry) == len(live):
        notes.append(
            f"dry run: every live replica of cluster {cluster} runs in dry run in namespace {namespace} "
            f"({', '.join(r['replica'] for r in dry)}): it will be recorded would_delete and the pod left; "
            + describe(Wait.DRY_RUN)
        )
    differ = [name for name in live[0]["settings"] if len({r["settings"][name] for r in live}) > 1]
    if differ:
        notes.append(f"the live replicas of cluster {cluster} disagree on {', '.join(differ)} (a rolling change?):")
        notes += [
            f"  {r['replica']} ({r['host']}, {r['release']}): "
            + "; ".join(f"{name} {r['settings'][name]}" for name in differ)
            for r in live
        ]
    return notes


def next_steps(story: Story) -> list[str]:
    """What happens next to each outbox row of the story, or to a pod with none."""
    if story.outbox:
        steps: list[str] = []
        for r in story.outbox:
            steps.append(f"row {r['id']}: " + next_step(r, kept=r.get("kept", [])))
            steps += [f"  {note}" for note in replica_notes(r, story.replicas)]
        return steps
    return [no_row_story(story.executions, story.suspects)]


def render_json(story: Story) -> str:
    return json.dumps({**asdict(story), "next": next_steps(story)}, default=str, sort_keys=True, indent=2)


VALUE_WIDTH = 120  # characters of one value in the text form; longer ones end in an ellipsis (whole in --json)


def _in_cluster(cluster: str | None) -> str:
    return "" if cluster in (None, DEFAULT_CLUSTER) else f" in cluster {cluster}"


def _shown(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with every text value escaped and cut for a terminal (see ``core.text``)."""
    return [{k: printable(v, VALUE_WIDTH) if isinstance(v, str) else v for k, v in row.items()} for row in rows]


def render_text(story: Story) -> str:
    """The story for a terminal: values from the database escaped and cut, every line escaped again
    (a value that reached a composed line, the target as typed)."""
    shown = replace(
        story,
        executions=_shown(story.executions),
        outbox=_shown(story.outbox),
        attempts=_shown(story.attempts),
        suspects=_shown(story.suspects),
        breakers=_shown(story.breakers),
    )
    return "\n".join(printable(line) for line in _render_lines(shown, next_steps(story)))


def _render_lines(story: Story, steps: list[str]) -> list[str]:
    lines = [f"pod-sweeper explain {story.target}", ""]
    lines.append("execution rows:" if story.executions else "execution rows: none found")
    for e in story.executions:
        state = {True: "active", False: "retired", None: "active is NULL (treated as active)"}[e["active"]]
        lines.append(
            f"  {e['table']}: sandbox {e['sandbox_id']} generation {e['generation']}, pod "
            f"{e['pod_namespace']}/{e['pod_name']} uid {e['pod_uid']}: {state}"
        )
    lines.append("outbox rows:" if story.outbox else "outbox rows: none")
    for r in story.outbox:
        lines.append(
            f"  row {r['id']}: pod {r['pod_namespace']}/{r['pod_name']}{_in_cluster(r.get('cluster'))}"
            f" uid {r['pod_uid']}, sandbox {r['sandbox_id']}"
            f" generation {r['generation']}, enqueued {r['enqueued_at']:%Y-%m-%d %H:%M:%S} ({r['reason']}),"
            f" {r['status']}{' ' + r['outcome'] if r['outcome'] else ''}, {r['attempts']} attempt(s)"
        )
        for a in (a for a in story.attempts if a["outbox_id"] == r["id"]):
            answer = f"HTTP {a['http_status']}" if a["http_status"] else "no answer"
            lines.append(
                f"    attempt at {a['started_at']:%Y-%m-%d %H:%M:%S} by {a['replica']}: {answer}"
                f"{' ' + a['reason'] if a['reason'] else ''} -> {a['result']}"
                f"{'' if a['recorded'] else ' (not recorded: its lease had been taken over)'}"
                f"{': ' + a['error'] if a['error'] else ''}"
            )
    for s in story.suspects:
        lines.append(
            f"suspect: {s['pod_namespace']}/{s['pod_name']} ({s['why']}), first seen "
            f"{s['first_seen_at']:%Y-%m-%d %H:%M:%S}, last seen {s['last_seen_at']:%Y-%m-%d %H:%M:%S}"
        )
    for breaker in story.breakers:
        lines.append(
            f"breaker of cluster {breaker['cluster']}: TRIPPED at {breaker['tripped_at']:%Y-%m-%d %H:%M:%S}: "
            f"{breaker['reason']}"
        )
    lines.append("")
    lines.append("next:")
    lines.extend(f"  {step}" for step in steps)
    return lines
