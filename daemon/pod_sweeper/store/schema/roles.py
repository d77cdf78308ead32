"""``pod-sweeper grant ROLE``: the privileges a migration-free runtime role needs, and nothing more.

The daemon never runs DDL: ``migrate`` and ``attach`` are run by an owner role, ``run`` (and ``status``,
``retry``, ``prune``, ``check``) can run as a role that may only read the attached tables' mapped columns
and read and write the rows of our schema. The statements are built from the attachments, with every
name through ``psycopg.sql.Identifier``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import psycopg
from psycopg import sql

from pod_sweeper.core.errors import AttachError, MigrationError, first_line
from pod_sweeper.store.db import Connection
from pod_sweeper.store.sweep.recheck import load_attachments


def password_verifier(conn: Connection, role: str, password: str) -> str:
    """The SCRAM-SHA-256 verifier of ``password`` for ``role``, computed here by libpq (as psql's
    ``\\password`` does): CREATE ROLE carries it instead of the password, so no server log that records
    statements (``log_statement = ddl``) and no ``pg_stat_statements`` ever holds the password itself."""
    return conn.pgconn.encrypt_password(password.encode(), role.encode(), b"scram-sha-256").decode()


async def runtime_grants(
    conn: Connection, role: str, *, create: bool = False, verifier: str | None = None
) -> list[sql.Composed]:
    """The statements that make ``role`` a runtime role for this database's attachments; with
    ``create``, the role too, with ``verifier`` (``password_verifier``'s, never a password) if given."""
    who = sql.Identifier(role)
    ours = sql.Identifier("pod_sweeper")
    statements: list[sql.Composed] = []
    if create:
        # A literal: CREATE ROLE takes no bind parameters; it is a verifier, never the password.
        login = sql.SQL(" PASSWORD {}").format(sql.Literal(verifier)) if verifier else sql.SQL("")
        statements.append(sql.SQL("CREATE ROLE {} LOGIN{}").format(who, login))
    statements += [
        sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(ours, who),
        sql.SQL(
            "GRANT SELECT ON {}.schema_migrations, {}.attachments, {}.lag, {}.lag_by_cluster, {}.summary TO {}"
        ).format(ours, ours, ours, ours, ours, who),
        # claim and record (UPDATE), retention (DELETE); INSERT only for the reconciliation pass's
        # enqueue (the enqueue function runs as its caller; the host's writers still get nothing)
        sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON {}.outbox TO {}").format(ours, who),
        sql.SQL("GRANT SELECT, INSERT, DELETE ON {}.attempts TO {}").format(ours, who),
        # the breakers: a cluster's first replica adds its row (migration 0010), the claim trips it
        sql.SQL("GRANT SELECT, INSERT, UPDATE ON {}.breaker TO {}").format(ours, who),
        # what each replica reports of its API server's outages, and retention of stale reports
        sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON {}.outages TO {}").format(ours, who),
        # arming and clearing the wakeup flag (the reconciliation's enqueue reads it)
        # (INSERT: a cluster's first replica adds its row, migration 0009)
        sql.SQL("GRANT SELECT, INSERT, UPDATE ON {}.wakeup TO {}").format(ours, who),
        # the reconciliation pass: its quarantine, its last-pass row, and enqueueing what it confirmed
        # through the one enqueue rule the triggers use
        sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON {}.suspects TO {}").format(ours, who),
        sql.SQL("GRANT SELECT ON {}.rejects TO {}").format(ours, who),
        # an on-call's pauses and holds (migration 0011): the claim reads them, the commands write them
        sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON {}.pauses, {}.holds TO {}").format(ours, ours, who),
        # the audit trail: written, never changed or deleted (retention goes through prune_audit,
        # which keeps at least 30 days)
        sql.SQL("GRANT SELECT, INSERT ON {}.audit TO {}").format(ours, who),
        sql.SQL("GRANT EXECUTE ON FUNCTION {}.prune_audit(interval) TO {}").format(ours, who),
        sql.SQL("GRANT SELECT, INSERT, UPDATE ON {}.reconcile_state TO {}").format(ours, who),
        # each replica's own row: its heartbeat upserts it, a clean stop marks it, and the heartbeat
        # deletes rows an hour gone (migration 0019)
        sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON {}.replicas TO {}").format(ours, who),
        # the large transactions a claim finds, their release by an on-call, retention (migration 0020)
        sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON {}.large_transactions TO {}").format(ours, who),
        sql.SQL("GRANT EXECUTE ON FUNCTION {}.enqueue(integer, text, bigint, text, text, uuid, text) TO {}").format(
            ours, who
        ),
        sql.SQL(
            "GRANT EXECUTE ON FUNCTION {}.enqueue(integer, text, bigint, text, text, uuid, text, text) TO {}"
        ).format(ours, who),
    ]
    for attachment in (await load_attachments(conn)).values():
        columns = sql.SQL(", ").join(sql.Identifier(c) for c in sorted(set(attachment.columns.values())))
        statements.append(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(attachment.schema), who))
        statements.append(sql.SQL("GRANT SELECT ({}) ON {} TO {}").format(columns, attachment.identifier, who))
    return statements


# Who each command must run as, for a refusal that says so (docs/dba.md, "Roles on a managed PostgreSQL").
_NEEDS = {
    "migrate": "the schema's owner: a role with CREATE on this database (or owning schema pod_sweeper); run it"
    " with the owner's URL, not the runtime role's",
    "attach": "the schema's owner, as a member of the role that owns the host table (as an administrator:"
    " GRANT {owner} TO {me}): creating and dropping its triggers is the table owner's right",
    "detach": "the schema's owner, as a member of the role that owns the host table (as an administrator:"
    " GRANT {owner} TO {me}): dropping its triggers is the table owner's right",
}


@contextlib.asynccontextmanager
async def explained_refusal(command: str, conn: Connection | None = None, target: object = None) -> AsyncIterator[None]:
    """A permission refused inside becomes one line naming the role ``command`` needs (the host
    table's owner read from the catalog, for attach and detach), with the server's own words."""
    try:
        yield
    except psycopg.errors.InsufficientPrivilege as exc:
        owner, me = "its owner", "the current user"
        if conn is not None and target is not None:
            with contextlib.suppress(psycopg.Error):
                row = await (
                    await conn.execute(
                        "SELECT to_regclass(%s)::regclass IS NOT NULL AS found, current_user AS me,"
                        " (SELECT relowner::regrole::text FROM pg_class WHERE oid = to_regclass(%s)) AS owner",
                        (str(target), str(target)),
                    )
                ).fetchone()
                if row is not None:
                    owner, me = row["owner"] or owner, row["me"]
        error = AttachError if command in ("attach", "detach") else MigrationError
        needs = _NEEDS[command].format(owner=owner, me=me)
        raise error(f"{command} was refused ({first_line(exc)}): it needs {needs}") from None
