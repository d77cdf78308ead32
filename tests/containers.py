"""Containers for the image and systemd tiers: podman in a storage of the session's own, Debian roots built
from Debian's packages with debootstrap (cached), and the wheels of the checkout.

No image is pulled: the base the Containerfile names (Debian's bookworm-slim) is made here from the same
packages Debian builds it from (``debootstrap --variant=minbase``, then slimmed as Debian slims it: no
documentation, manuals or translations, no apt caches), and imported under that name into the session's
own storage, where it can shadow nothing of the machine's. podman runs with ``runc`` and without
default ulimits (crun refuses this machine's hybrid cgroups; its default ulimits cannot be set here).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pod-sweeper" / "images"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
BASE = "docker.io/library/debian:bookworm-slim"  # what deploy/Containerfile is built FROM

# What Debian's slim images leave out, as dpkg's own rules (so that packages installed later stay slim).
_SLIM_DPKG = """\
# No documentation, manuals or translations (as in Debian's slim images); the copyright files stay.
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
"""
_CLEAN = "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"
_SLIM_APT = f"""\
// No package cache left behind by an install (as in Debian's slim images).
DPkg::Post-Invoke {{ "{_CLEAN}"; }};
APT::Update::Post-Invoke {{ "{_CLEAN}"; }};
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
"""


class ContainerError(Exception):
    """A podman or debootstrap step failed; the message holds its output."""


def missing_tools() -> list[str]:
    """What the container tiers need that this machine lacks (Debian's podman, runc and debootstrap)."""
    return [
        tool
        for tool in ("podman", "runc", "debootstrap")
        if shutil.which(tool, path=f"{os.environ.get('PATH', os.defpath)}:/usr/sbin") is None
    ]


def debian_root(name: str, *, include: tuple[str, ...] = (), slim: bool = True) -> Path:
    """A tarball of a Debian root built from Debian's packages, cached by what went into it."""
    key = hashlib.sha256(json.dumps([SUITE, MIRROR, include, slim, _SLIM_DPKG, _SLIM_APT]).encode()).hexdigest()[:12]
    tarball = CACHE / f"{name}-{SUITE}-{key}.tar"
    if tarball.is_file():
        return tarball
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pod-sweeper-root-", dir=CACHE) as work:
        root = Path(work) / "root"
        args = ["debootstrap", "--variant=minbase"]
        if include:
            args.append(f"--include={','.join(include)}")
        _run([*args, SUITE, str(root), MIRROR], timeout=900)
        if slim:
            _slim(root)
        partial = Path(work) / "root.tar"
        _run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."], timeout=300)
        partial.replace(tarball)  # whole or not at all
    return tarball


def _slim(root: Path) -> None:
    (root / "etc/dpkg/dpkg.cfg.d/slim").write_text(_SLIM_DPKG)
    (root / "etc/apt/apt.conf.d/slim").write_text(_SLIM_APT)
    for pattern in ("usr/share/man/*", "usr/share/info/*", "usr/share/groff/*", "usr/share/lintian/*"):
        for path in root.glob(pattern):
            _remove(path)
    for path in root.glob("usr/share/doc/*"):
        for item in list(path.iterdir()) if path.is_dir() else []:
            if item.name != "copyright":
                _remove(item)
    for path in root.glob("usr/share/locale/*"):
        if path.name != "locale.alias":
            _remove(path)
    for pattern in ("var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*", "var/log/*.log"):
        for path in root.glob(pattern):
            _remove(path)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def build_wheels(folder: Path) -> Path:
    """The wheels the Containerfile installs from, built as docs/operations.md says: the dependencies
    from deploy/requirements.lock with their hashes required, then the checkout's own wheel."""
    lock = ROOT / "deploy" / "requirements.lock"
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(folder)]
    _run([*pip, "--require-hashes", "--only-binary", ":all:", "-r", str(lock)], timeout=600)
    _run([*pip, "--no-deps", str(ROOT)], timeout=600)
    return folder


def image_context(folder: Path) -> Path:
    """A build context holding what deploy/Containerfile copies (what .containerignore lets through)."""
    build_wheels(folder / "build" / "wheels")
    (folder / "deploy").mkdir(parents=True, exist_ok=True)
    for name in ("requirements.lock", "sbom.py"):
        shutil.copy(ROOT / "deploy" / name, folder / "deploy" / name)
    return folder


class Podman:
    """podman with a storage, a run root and a configuration of this session's own."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.config = folder / "containers.conf"
        self.config.write_text('[engine]\nruntime = "runc"\n[containers]\ndefault_ulimits = []\n')
        self.env = {**os.environ, "CONTAINERS_CONF": str(self.config)}
        self.base = ["podman", "--root", str(folder / "storage"), "--runroot", str(folder / "run")]

    def __call__(
        self, *args: str, check: bool = True, timeout: float = 600, **kwargs: Any
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*self.base, *args], capture_output=True, text=True, env=self.env, timeout=timeout, check=False, **kwargs
        )
        if check and done.returncode != 0:
            raise ContainerError(f"podman {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        return done

    def import_root(self, tarball: Path, name: str) -> None:
        self("import", str(tarball), name)

    def inspect(self, what: str) -> dict[str, Any]:
        return dict(json.loads(self("inspect", what).stdout)[0])

    def remove_everything(self) -> None:
        self("rm", "--all", "--force", "--time", "5", check=False, timeout=120)
        self("system", "reset", "--force", check=False, timeout=120)


def _run(args: list[str], *, timeout: float) -> None:
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise ContainerError(
            f"{' '.join(args[:3])} ... exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )


# --- a machine systemd runs as PID 1 in (the systemd tier) ---------------------------------------

HOST = "systemd-host"  # the container's name


class Machine:
    """The container systemd runs as PID 1 in: commands run in it as root, through podman exec."""

    def __init__(self, podman: Podman) -> None:
        self.podman = podman

    def sh(self, script: str, *, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        done = self.podman("exec", HOST, "/bin/sh", "-c", script, check=False, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"{script!r} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        return done

    def show(self, *properties: str) -> dict[str, str]:
        """``systemctl show`` of the unit: property -> value."""
        out = self.sh(f"systemctl show pod-sweeper -p {','.join(properties)}").stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def configure(self, **settings: str) -> None:
        """/etc/pod-sweeper/pod-sweeper.env: the example beside the unit, with ``settings`` changed or added
        (the edit the install's "then edit it" asks for)."""
        lines = self.sh("cat /src/systemd/pod-sweeper.env.example").stdout.splitlines()
        kept = [line for line in lines if line.split("=", 1)[0] not in settings]
        # Quoted when it holds a space (a libpq key=value string): both systemd and sh read it so.
        written = (f'{key}="{value}"' if " " in value else f"{key}={value}" for key, value in settings.items())
        text = "\n".join([*kept, *written]) + "\n"
        self.sh(
            f"cat > /etc/pod-sweeper/pod-sweeper.env <<'EOF'\n{text}EOF\nchmod 0600 /etc/pod-sweeper/pod-sweeper.env"
        )

    def journal(self, *args: str) -> str:
        return self.sh(f"journalctl -u pod-sweeper --no-pager {' '.join(shlex.quote(a) for a in args)}").stdout
