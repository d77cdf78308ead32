"""``pod-sweeper check``: a preflight an operator runs before (or beside) the daemon. One line per
check (settings, database, schema, Kubernetes configuration, the namespace scope, and each permission
the daemon needs in each namespace it checks: ``--namespace``, else every namespace of the scope, else
those the outbox names), exit 0 when all pass and 1 otherwise."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pod_sweeper.core.backoff import describe_duration, retry_span
from pod_sweeper.core.errors import PodSweeperError
from pod_sweeper.core.settings import Settings
from pod_sweeper.core.text import printable
from pod_sweeper.kube.api import PodDeleter, load_configuration
from pod_sweeper.kube.scope import NamespaceScope
from pod_sweeper.store import attach, db, migrations, outbox

VERBS = ("get", "delete")  # what the daemon sends; deploy/role.yaml grants list and watch too


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
        return await outbox.namespaces(conn)


async def _listen_route(settings: Settings) -> Check:
    """The listener's own route (``listen_database_url``) connects and can LISTEN."""
    try:
        conn = await db.connect(settings, conninfo=settings.listen_conninfo(), application_name="pod-sweeper-check")
    except PodSweeperError as exc:
        return Check(False, "listen database", str(exc))
    try:
        await outbox.listen(conn, settings.cluster)
    finally:
        await conn.close()
    return Check(True, "listen database", "connected, LISTEN works")


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
        deleter = PodDeleter(load_configuration(settings.kubeconfig, settings.kube_context, pool_size=1))
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
        for namespace in namespaces:
            for verb in VERBS:
                try:
                    allowed = await asyncio.to_thread(deleter.may, verb, namespace, timeout=settings.request_timeout)
                except PodSweeperError as exc:
                    checks.append(Check(False, f"{verb} pods in {namespace}", str(exc)))
                    continue
                detail = "allowed" if allowed else f"missing: the daemon needs '{verb}' on pods in {namespace}"
                checks.append(Check(allowed, f"{verb} pods in {namespace}", detail))
    finally:
        deleter.close()
    return checks
