"""``pod-sweeper check``: a preflight an operator runs before (or beside) the daemon. One line per
check (settings, database, schema, Kubernetes configuration, the namespace scope, and each permission
the enabled features need, asked of the API server itself), exit 0 when all pass and 1 otherwise.

Which permissions is a pure function of the settings (``needs``): get and delete on pods in each
namespace it checks (``--namespace``, else every namespace of the scope, else those the outbox names),
create on events there when Events are on, list on pods where reconciliation runs, and get on nodes
(cluster-scoped) when stuck pods may be forced."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pod_sweeper.core.backoff import describe_duration, retry_span
from pod_sweeper.core.errors import PodSweeperError
from pod_sweeper.core.settings import Settings
from pod_sweeper.core.text import printable
from pod_sweeper.kube.api import KubeClient
from pod_sweeper.kube.config import load_configuration
from pod_sweeper.kube.scope import NamespaceScope
from pod_sweeper.store import db
from pod_sweeper.store.admin import attach
from pod_sweeper.store.reads import checks
from pod_sweeper.store.schema import migrations
from pod_sweeper.store.sweep import channel


@dataclass(frozen=True)
class Permission:
    """One thing the daemon asks of the API server: ``verb`` on the core ``resource``, in ``namespace``
    (None: cluster-scoped), and the feature that needs it."""

    verb: str
    resource: str
    namespace: str | None
    why: str

    @property
    def what(self) -> str:
        """The resource and where: 'pods in sandboxes', 'nodes (cluster-wide)'."""
        where = f"in {self.namespace}" if self.namespace is not None else "(cluster-wide)"
        return f"{self.resource} {where}"

    @property
    def name(self) -> str:
        return f"{self.verb} {self.what}"


def needs(settings: Settings, namespaces: list[str]) -> list[Permission]:
    """Every permission the settings' features need in ``namespaces``, in the order ``check`` prints."""
    wanted: list[Permission] = []
    for namespace in namespaces:
        wanted.append(Permission("get", "pods", namespace, "to read who holds a name after a 409"))
        wanted.append(Permission("delete", "pods", namespace, "to delete retired pods"))
        if settings.events and not settings.dry_run:
            wanted.append(Permission("create", "events", namespace, "to record an Event (POD_SWEEPER_EVENTS is on)"))
    if settings.reconcile and settings.reconcile_namespace is not None:
        why = "for the reconciliation pass (POD_SWEEPER_RECONCILE_* labels are set)"
        wanted.append(Permission("list", "pods", settings.reconcile_namespace, why))
    if settings.force_stuck and not settings.dry_run:
        why = "to tell a vanished node (POD_SWEEPER_FORCE_STUCK is on; a ClusterRole grants it)"
        wanted.append(Permission("get", "nodes", None, why))
    return wanted


@dataclass(frozen=True)
class Check:
    ok: bool
    name: str
    detail: str

    def __str__(self) -> str:
        # Details quote the database and the API server: escaped, so that no value rewrites the line.
        return printable(f"{'ok  ' if self.ok else 'FAIL'}  {self.name}: {self.detail}")


async def _namespaces(settings: Settings) -> list[str]:
    async with db.connection(settings) as conn:
        return await checks.namespaces(conn, cluster=settings.cluster)


async def _listen_route(settings: Settings) -> Check:
    """The listener's own route (``listen_database_url``) connects and can LISTEN."""
    try:
        conn = await db.connect(settings, conninfo=settings.listen_conninfo(), application_name="pod-sweeper-check")
    except PodSweeperError as exc:
        return Check(False, "listen database", str(exc))
    try:
        await channel.listen(conn, cluster=settings.cluster)
    finally:
        await conn.close()
    return Check(True, "listen database", "connected, LISTEN works")


async def _ask(kube: KubeClient, permission: Permission, timeout: float) -> Check:
    """One permission, asked of the API server (a SelfSubjectAccessReview)."""
    try:
        allowed = await asyncio.to_thread(
            kube.may, permission.verb, permission.resource, permission.namespace, timeout=timeout
        )
    except PodSweeperError as exc:
        return Check(False, permission.name, str(exc))
    if allowed:
        return Check(True, permission.name, "allowed")
    detail = f"missing: the daemon needs '{permission.verb}' on {permission.what} {permission.why}"
    return Check(False, permission.name, detail)


async def run_checks(settings: Settings, namespaces: list[str]) -> list[Check]:
    checks = [Check(True, "settings", f"valid; database {settings.redacted_database_url()}")]
    span = retry_span(settings.backoff_base, settings.backoff_max, settings.max_attempts)
    checks.append(
        Check(
            True,
            "retries",
            f"a row's own trouble gets {span.retries} retries spanning {describe_duration(span.shortest)} to "
            f"{describe_duration(span.longest)} before it goes dead (an unreachable API server charges nothing)",
        )
    )
    schema_ok = connected = False
    try:
        async with db.connection(settings) as conn:
            connected = True
            checks.append(Check(True, "database", "connected"))
            version = await migrations.check_schema(conn)
            checks.append(Check(True, "schema", f"at version {version}"))
            schema_ok = True
            tables = await attach.feeding(conn, cluster=settings.cluster)
            detail = (
                ", ".join(tables)
                if tables
                else f"none for cluster {settings.cluster}: no retire reaches the outbox, nothing is swept;"
                " run `pod-sweeper attach --table SCHEMA.TABLE` as the schema's owner"
            )
            checks.append(Check(bool(tables), "attached tables", detail))
            stale = await attach.stale_triggers(conn)
            if stale:
                names = ", ".join(str(t) for t in stale)
                why = "attached before migration 0008 (a malformed UID is skipped, not recorded); run attach again"
                detail = f"{names}: {why}"
                checks.append(Check(False, "triggers", detail))
    except PodSweeperError as exc:
        checks.append(Check(False, "schema" if connected else "database", str(exc)))
    checks.append(Check(True, "wakeups", settings.wakeup_mode()))
    if settings.listens and settings.listen_database_url is not None:
        checks.append(await _listen_route(settings))
    try:
        kube = KubeClient(load_configuration(settings.kubeconfig, settings.kube_context, pool_size=1))
    except PodSweeperError as exc:
        return [*checks, Check(False, "kubernetes", str(exc))]
    checks.append(Check(True, "kubernetes", "configuration loaded"))
    scope = NamespaceScope(settings.namespaces)
    checks.append(Check(True, "namespace scope", scope.describe()))
    try:
        if not namespaces and settings.namespaces:
            namespaces = sorted(settings.namespaces)
        elif not namespaces:
            named = (await _namespaces(settings)) if schema_ok else []
            outside = [ns for ns in named if scope.refuses(ns)]
            if outside:
                detail = f"rows name {', '.join(outside)}: they end dead without a request"
                checks.append(Check(False, "outside the scope", detail))
            namespaces = [ns for ns in named if not scope.refuses(ns)]
        if not namespaces:
            checks.append(Check(False, "permissions", "no namespace to check: pass --namespace NS"))
        for permission in needs(settings, namespaces):
            checks.append(await _ask(kube, permission, settings.request_timeout))
    finally:
        kube.close()
    return checks
