"""The systemd tier: the shipped unit, unchanged, under Debian's systemd as PID 1 in a container, installed
the way docs/operations.md says ("Install as a systemd service"), command for command."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from containers import HOST, ROOT, Machine, Podman, build_wheels, debian_root
from harness.kubecluster import KubeCluster

IMAGE = "localhost/pod-sweeper-test/systemd:bookworm"
NS = "sandboxes"
# What a Debian machine that runs pod-sweeper has: systemd, and Debian's Python for the virtualenv.
# (libnss-systemd, which systemd recommends, names its dynamic users to `ps` and `id`.)
PACKAGES = ("systemd", "systemd-sysv", "libnss-systemd", "dbus", "python3", "python3-venv", "procps", "util-linux")


_MACHINES: list[Machine] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed test here shows the end of the unit's journal (what systemd and the daemon said)."""
    report = yield
    if report.failed and _MACHINES:
        journal = _MACHINES[0].sh("journalctl -u pod-sweeper --no-pager -n 40", check=False).stdout
        report.sections.append(("journalctl -u pod-sweeper (last lines)", journal))
    return report


def _booted(machine: Machine) -> bool:
    state = machine.sh("systemctl is-system-running", check=False).stdout.strip()
    return state in ("running", "degraded")


@pytest.fixture(scope="module")
def machine(podman: Podman, kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    """The machine, booted, with pod-sweeper installed as docs/operations.md says, not started yet; its
    kubeconfig holds a token the TokenRequest API minted for the shipped ServiceAccount."""
    podman.import_root(debian_root("debian-systemd", include=PACKAGES), IMAGE)
    wheels = build_wheels(tmp_path_factory.mktemp("wheels"))
    cluster = kube_cluster
    cluster.namespace(NS)
    for name in ("serviceaccount.yaml", "role.yaml", "rolebinding.yaml"):
        path = str(ROOT / "deploy" / name)
        cluster.kubectl("apply", "--server-side", "--field-manager=pod-sweeper-test", "-f", path)
    kubeconfig = cluster.token_kubeconfig(
        tmp_path_factory.mktemp("kube") / "sweeper-config",
        cluster.token(NS, "pod-sweeper"),
        namespace=NS,
        embed_ca=True,
    )
    podman(
        "run", "--detach", "--name", HOST, "--privileged", "--systemd=always", "--network=host",
        f"--volume={wheels}:/wheels:ro", f"--volume={ROOT / 'systemd'}:/src/systemd:ro",
        f"--volume={kubeconfig}:/src/sweeper-config:ro",
        IMAGE, "/sbin/init",
    )  # fmt: skip
    machine = Machine(podman)
    try:
        deadline = time.monotonic() + 60
        while not _booted(machine):
            assert time.monotonic() < deadline, machine.sh("systemctl --failed --no-pager", check=False).stdout
            time.sleep(0.2)
        # A machine booted by systemd has its root mount shared (systemd does it at boot, but not as a
        # container's PID 1: it leaves that to the container manager). The unit's LoadCredential= needs
        # it: systemd mounts each service's credentials in a helper's namespace, from which they reach
        # the service only through a shared mount.
        machine.sh("mount --make-rshared /")
        # docs/operations.md, "Install as a systemd service", command for command (the wheels a user
        # builds with `pip wheel`, instead of an index this machine has no route to):
        machine.sh(
            "python3 -m venv /opt/pod-sweeper"
            " && /opt/pod-sweeper/bin/pip install -q --no-index --find-links /wheels pod-sweeper"
            " && install -m 0644 /src/systemd/pod-sweeper.service /etc/systemd/system/"
            " && install -d -m 0700 /etc/pod-sweeper"
            " && install -m 0600 /src/systemd/pod-sweeper.env.example /etc/pod-sweeper/pod-sweeper.env"
            " && install -m 0600 /src/sweeper-config /etc/pod-sweeper/kubeconfig"
            " && systemctl daemon-reload",
            timeout=300,
        )
        _MACHINES.append(machine)
        yield machine
    finally:
        _MACHINES.clear()
        podman("rm", "--force", "--time", "5", HOST, check=False)
