"""A real node for the whole cluster: containerd and a kubelet, joined to a ``KubeCluster``'s control plane
beside kwok's emulated nodes, for what only a kubelet shows (a sandbox the runtime cannot create, SIGTERM
and the grace period, SIGKILL at its end).

containerd is Debian's (``apt-get install containerd runc containernetworking-plugins``); the kubelet,
and the ``pause`` program that is both the sandbox image and the tests' container, are built by
``tools/kube/build``. There is no registry: images are imported into containerd's ``k8s.io`` namespace
(``import_image``) and pods use ``imagePullPolicy: Never``. Pods off the host network get a bridge from
the CNI plugins (``psweep0``, 10.245.0.0/24). The node registers with the taint ``pod-sweeper.test/real-
node=true:NoSchedule``, so only pods that tolerate it (``RealNode.pod``) run there, and the other tiers'
pods stay on kwok's nodes.

Everything it changes on the machine is put back by ``stop``, since the tests run on developers'
machines: the kernel settings the kubelet and the bridge plugin set, the iptables chains the kubelet
makes, its cgroups, the bridge, network namespaces, mounts and folders. ``HostState`` is what is compared
before and after (the node tier asserts it equal).

Requirements this machine taught (each is a line below): cgroup v1 needs ``failCgroupV1: false``; a
machine that withholds CAP_SYS_RESOURCE makes runc fail every sandbox unless containerd sets
``restrict_oom_score_adj``; Debian's containerd 1.6 lacks the CRI ``RuntimeConfig`` call, so the kubelet
is told the cgroup driver instead of asking.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from harness.kubeapiserver import KubeApiServerError, _openssl, kubeconfig, resident_bytes
from harness.kubecluster import KubeCluster
from harness.postgres import free_port

TAINT = "pod-sweeper.test/real-node"
# A RuntimeClass whose handler containerd has no runtime for: the kubelet asks the runtime for the
# sandbox again and again, and it refuses every time (the seed's stranded create).
REFUSED_RUNTIME_CLASS = "pod-sweeper-test-missing"
PAUSE_IMAGE = "localhost/pod-sweeper/pause:1"
BRIDGE = "psweep0"
SUBNET = "10.245.0.0/24"
GATEWAY = "10.245.0.1"  # the host on the bridge: where pods reach what runs on the machine's loopback
SERVICES_CHAIN = "PSWEEP-SERVICES"
KUBERNETES_SERVICE = ("10.96.0.1", 443)  # the `kubernetes` Service's ClusterIP, first of the service range
NEEDS = ("containerd", "ctr", "runc", "iptables", "ip")
# What a node runs, by program name: what a node killed before its stop may have left running.
NODE_PROGRAMS = ("containerd", "kubelet", "containerd-shim-runc-v2")
CNI_BIN = Path("/usr/lib/cni")
# What the kubelet (and the bridge plugin) set on the host and ``stop`` sets back.
SYSCTLS = ("vm.overcommit_memory", "kernel.panic", "kernel.panic_on_oops", "net.ipv4.ip_forward")
# A node killed before its stop (its test run SIGKILLed, the machine's session ended under it) leaves all
# of the above behind, and the next node on the machine would find its bridge. So each node holds LOCK
# while it runs (the kernel lets go of it when the process dies, however it dies) and writes LEDGER, what
# the machine was before it and its folder, until its stop has put the machine back. The next node, or
# ``put_back_a_killed_node``, finds a ledger with nobody holding the lock and puts back what it says.
# Both live in /run, emptied at boot with everything a ledger describes.
LOCK = Path("/run/pod-sweeper-real-node.lock")
LEDGER = Path("/run/pod-sweeper-real-node.json")
WATCHED_PATHS = ("/var/lib/kubelet", "/var/log/pods", "/run/containerd", "/var/run/netns", "/var/lib/cni",
                 "/etc/kubernetes", "/run/kubelet")  # fmt: skip


class RealNodeError(KubeApiServerError):
    """The real node cannot run here, or did not start."""


def missing_requirements() -> list[str]:
    """What this machine lacks for a real node (empty when it can run one)."""
    missing = [name for name in NEEDS if shutil.which(name) is None]
    if not (CNI_BIN / "bridge").is_file():
        missing.append(f"the CNI plugins in {CNI_BIN} (Debian's containernetworking-plugins)")
    if os.geteuid() != 0:
        missing.append("root")
    return missing


def _run(*args: str, check: bool = True, input_: bytes | None = None) -> str:
    done = subprocess.run(list(args), capture_output=True, input=input_, timeout=120, check=False)
    if check and done.returncode != 0:
        raise RealNodeError(f"{' '.join(args)}: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout.decode(errors="replace")


def _chains(binary: str) -> set[tuple[str, str]]:
    found = set()
    for table in ("filter", "nat", "mangle"):
        out = _run(binary, "-w", "-t", table, "-S", check=False)
        found |= {(table, line.split()[1]) for line in out.splitlines() if line.startswith("-N ")}
    return found


@dataclass(frozen=True)
class HostState:
    """What a node may change on the machine: compared before it starts and after it stops."""

    sysctls: dict[str, str]
    chains: frozenset[tuple[str, str, str]]
    links: frozenset[str]
    mounts: frozenset[str]
    paths: frozenset[str]
    cgroups: frozenset[str]

    @classmethod
    def read(cls) -> HostState:
        sysctls = {name: Path("/proc/sys", name.replace(".", "/")).read_text().strip() for name in SYSCTLS}
        chains = frozenset(
            (binary, table, chain)
            for binary in ("iptables", "ip6tables")
            if shutil.which(binary)
            for table, chain in _chains(binary)
        )
        links = frozenset(line.split(":")[1].strip().split("@")[0] for line in _run("ip", "-o", "link").splitlines())
        mounts = frozenset(line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines())
        paths = frozenset(p for p in WATCHED_PATHS if os.path.lexists(p))
        cgroups = frozenset(
            str(path)
            for path in Path("/sys/fs/cgroup").glob("*/*")
            if path.is_dir() and path.name.startswith("kubepods")
        )
        return cls(sysctls, chains, links, mounts, paths, cgroups)

    def to_json(self) -> dict[str, Any]:
        return {
            "sysctls": self.sysctls,
            "chains": sorted(self.chains),
            **{name: sorted(getattr(self, name)) for name in ("links", "mounts", "paths", "cgroups")},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HostState:
        return cls(
            dict(data["sysctls"]),
            frozenset((binary, table, chain) for binary, table, chain in data["chains"]),
            *(frozenset(data[name]) for name in ("links", "mounts", "paths", "cgroups")),
        )

    def differences(self, other: HostState) -> dict[str, Any]:
        """What ``other`` holds that this state did not (what a node left behind), and each kernel setting
        that differs, by kind; empty when nothing was left. (What other processes removed meanwhile is
        not the node's doing: it removes only what appeared after it started.)"""
        out: dict[str, Any] = {}
        for name in ("chains", "links", "mounts", "paths", "cgroups"):
            added = getattr(other, name) - getattr(self, name)
            if added:
                out[name] = sorted(map(str, added))
        changed = {k: (v, other.sysctls.get(k)) for k, v in self.sysctls.items() if other.sysctls.get(k) != v}
        if changed:
            out["sysctls"] = changed
        return out


def _ours(mount: str, folder: Path) -> bool:
    """A mount a node made: under its folder, containerd's state, or a CNI network namespace."""
    return mount.startswith((f"{folder}/", "/run/containerd/", "/var/run/netns/cni-", "/run/netns/cni-"))


def _put_back(before: HostState, folder: Path, *, killed: bool = False) -> None:
    """Put back what the node run from ``folder`` changed since ``before``, and only that: other programs
    (podman, another test run) may change the machine meanwhile, and what they made is theirs. Each kind
    is taken by the marks of the kubelet, containerd and the node: mounts in their places, the bridge and
    its veths, the kubelet's KUBE-* chains, kubepods cgroups, the kubelet's and containerd's folders."""
    now = HostState.read()
    for mount in sorted((m for m in now.mounts - before.mounts if _ours(m, folder)), key=len, reverse=True):
        _run("umount", "-l", mount, check=False)
    for name, value in before.sysctls.items():
        # After a kill the ledger may be hours old: forwarding another program turned on since (podman,
        # docker) is not the node's to turn off.
        if killed and name == "net.ipv4.ip_forward":
            continue
        if now.sysctls.get(name) != value:
            Path("/proc/sys", name.replace(".", "/")).write_text(value)
    for binary, table, chain in sorted(
        c for c in now.chains - before.chains if c[2].startswith(("KUBE-", SERVICES_CHAIN))
    ):
        for rule in _run(binary, "-w", "-t", table, "-S", check=False).splitlines():
            if rule.startswith("-A ") and f" -j {chain}" in f"{rule} ":
                _run(binary, "-w", "-t", table, "-D", *rule.split()[1:], check=False)
        _run(binary, "-w", "-t", table, "-F", chain, check=False)
        _run(binary, "-w", "-t", table, "-X", chain, check=False)
    if BRIDGE in now.links - before.links:
        for line in _run("ip", "-o", "link", "show", "master", BRIDGE, check=False).splitlines():
            _run("ip", "link", "delete", line.split(":")[1].strip().split("@")[0], check=False)
        _run("ip", "link", "delete", BRIDGE, check=False)
    for netns in [*Path("/var/run/netns").glob("cni-*"), *Path("/run/netns").glob("cni-*")]:
        if str(netns) not in before.mounts:
            _run("umount", "-l", str(netns), check=False)
            netns.unlink(missing_ok=True)
    cni_cache = Path("/var/lib/cni")
    for cached in [*cni_cache.glob("results/psweep-*"), *cni_cache.glob("cache/results/psweep-*")]:
        cached.unlink(missing_ok=True)
    for path in sorted(now.paths - before.paths, key=len, reverse=True):
        if path in ("/var/run/netns", "/var/lib/cni"):  # shared with other CNI users: only when empty
            for empty in sorted(Path(path).glob("**/"), key=lambda p: len(str(p)), reverse=True):
                with contextlib.suppress(OSError):
                    empty.rmdir()
        else:
            shutil.rmtree(path, ignore_errors=True)
    for group in sorted(now.cgroups - before.cgroups, key=len, reverse=True):
        for sub in sorted(Path(group).glob("**/"), key=lambda p: len(str(p)), reverse=True):
            with contextlib.suppress(OSError):
                sub.rmdir()


def _take_the_machine() -> int:
    """LOCK, held (its descriptor): refused while another real node runs here."""
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RealNodeError(f"another real node runs on this machine (it holds {LOCK})") from None
    return fd


def _put_back_under_the_lock() -> Path | None:
    """With LOCK held: put the machine back as LEDGER says it was before a node that never reached its
    stop, end what it left running (its containerd, kubelet and shims, each naming its folder in its
    command line), and remove its folder and the ledger. The folder put back, or None when none was."""
    if not LEDGER.exists():
        return None
    record = json.loads(LEDGER.read_text())
    folder = Path(record["folder"])
    before = HostState.from_json(record["before"])
    left = [
        pid
        for pid, cmdline in _processes()
        if str(folder).encode() in cmdline
        and Path(cmdline.split(b" ")[0].decode(errors="replace")).name in NODE_PROGRAMS
    ]
    # Its pods' containers (their sandboxes and processes) outlive containerd and its shims: each is in a
    # kubepods cgroup that was not there before the node started.
    for group in HostState.read().cgroups - before.cgroups:
        for procs in Path(group).glob("**/cgroup.procs"):
            with contextlib.suppress(OSError):
                left += [int(pid) for pid in procs.read_text().split()]
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while any(map(_running, left)):  # not our children (or not reaped yet): no wait() for them
        if time.monotonic() > deadline:
            raise RealNodeError(f"the processes {left} of a killed real node did not end within 30 s of SIGKILL")
        time.sleep(0.05)
    _put_back(before, folder, killed=True)
    shutil.rmtree(folder, ignore_errors=True)
    LEDGER.unlink()
    return folder


def put_back_a_killed_node() -> Path | None:
    """Put back what a real node killed before its stop left on this machine (``_put_back_under_the_lock``):
    the folder it ran from, or None when there was none. Nothing while another node runs: its start says so."""
    if not LEDGER.exists():
        return None
    try:
        fd = _take_the_machine()
    except RealNodeError:
        return None
    try:
        return _put_back_under_the_lock()
    finally:
        os.close(fd)


def _running(pid: int) -> bool:
    """The process exists and has not ended (a zombie has: it waits only for its parent to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _program(cmdline: bytes) -> str:
    """The name of the program a command line runs (not an editor or a pager naming a node's file)."""
    return Path(cmdline.split(b" ", 1)[0].decode(errors="replace")).name


def _processes() -> list[tuple[int, bytes]]:
    """Every process's pid and command line (its arguments joined by spaces)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                found.append((int(proc.name), (proc / "cmdline").read_bytes().replace(b"\0", b" ")))
    return found


def pause_image_archive(binary: Path, reference: str, folder: Path) -> Path:
    """An OCI image archive holding ``binary`` as /pause, its entrypoint: what ``ctr images import`` takes.
    A link is followed (a release's node folder links to the main folder's pause): the layer must hold
    the program itself, not a link to a path the container cannot see."""
    binary = binary.resolve()
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tar.gettarinfo(str(binary), arcname="pause")
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        info.mode = 0o755
        with binary.open("rb") as handle:
            tar.addfile(info, handle)
    layer_bytes = layer.getvalue()
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> dict[str, Any]:
        import hashlib

        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"digest": digest, "size": len(data)}

    layer_ref = blob(layer_bytes)
    config = {
        "architecture": "amd64" if os.uname().machine == "x86_64" else "arm64",
        "os": "linux",
        "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
        "rootfs": {"type": "layers", "diff_ids": [layer_ref["digest"]]},
    }
    config_ref = blob(json.dumps(config).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config_ref},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **layer_ref}],
    }
    manifest_ref = blob(json.dumps(manifest).encode())
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                **manifest_ref,
                "annotations": {"io.containerd.image.name": reference, "org.opencontainers.image.ref.name": reference},
            }
        ],
    }
    archive = folder / "pause-image.tar"
    with tarfile.open(archive, "w") as tar:

        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        add("oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        add("index.json", json.dumps(index).encode())
        for digest, data in blobs.items():
            add(f"blobs/sha256/{digest.split(':')[1]}", data)
    return archive


class Forward:
    """A TCP forwarder from ``GATEWAY`` (the bridge) to a port on the machine's loopback, one thread pair
    per connection: how a pod on the bridge reaches the API server and PostgreSQL, which listen on
    127.0.0.1 only (what kube-proxy's userspace mode did for a Service)."""

    def __init__(self, target_port: int) -> None:
        import socket
        import threading

        self.target_port = target_port
        self._server = socket.create_server((GATEWAY, 0))
        self.port: int = self._server.getsockname()[1]
        self._stopped = threading.Event()
        threading.Thread(target=self._accept, name=f"forward-{target_port}", daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while not self._stopped.is_set():
            try:
                client, _ = self._server.accept()
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
            except OSError:
                continue
            upstream.settimeout(None)
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: Any, sink: Any) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(1)  # SHUT_WR: the other side sees the end of this direction

    def close(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._server.close()


@dataclass
class RealNode:
    """containerd and a kubelet on this machine, registered as node ``name`` of ``cluster``."""

    cluster: KubeCluster
    name: str = "real-node"
    folder: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="pod-sweeper-node-")))
    started_in: float | None = None
    before: HostState | None = None
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _forwards: list[Forward] = field(default_factory=list)
    _lock: int | None = None  # LOCK's descriptor while this node runs

    @property
    def socket(self) -> Path:
        return self.folder / "run" / "containerd.sock"

    def start(self, *, timeout: float = 60.0) -> Self:
        missing = missing_requirements()
        if missing:
            raise RealNodeError(f"a real node needs {', '.join(missing)}")
        for binary in ("kubelet", "pause"):
            if not (self.cluster.bindir / binary).is_file():
                raise RealNodeError(f"{self.cluster.bindir} lacks {binary}: run tools/kube/build again")
        self._lock = _take_the_machine()
        began = time.monotonic()
        try:
            killed = _put_back_under_the_lock()
            if killed is not None:
                print(f"\nput back what the real node run from {killed} left here when it was killed before its stop")
            self.before = HostState.read()
            ledger = LEDGER.with_suffix(".new")
            ledger.write_text(json.dumps({"folder": str(self.folder), "before": self.before.to_json()}))
            ledger.replace(LEDGER)  # whole or not at all: a kill mid-write leaves no half a ledger
            self._bridge()
            self._start_containerd(timeout)
            self.import_image(pause_image_archive(self.cluster.bindir / "pause", PAUSE_IMAGE, self.folder))
            self._start_kubelet(timeout)
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - began
        return self

    # --- the pods' network -----------------------------------------------------------------------

    def _bridge(self) -> None:
        """The bridge the CNI plugin will use, made first so that the host's end (``GATEWAY``) exists for
        the forwarders before any pod does; and the nat chain that routes Service IPs to them."""
        if self.before is not None and BRIDGE in self.before.links:
            raise RealNodeError(
                f"the bridge {BRIDGE} exists already, with no ledger of the node that made it ({LEDGER}):"
                f" a node of an older checkout was killed before its stop, or another program made it"
                f" (`ip link delete {BRIDGE}; iptables -t nat -D PREROUTING -i {BRIDGE} -j {SERVICES_CHAIN};"
                f" iptables -t nat -F {SERVICES_CHAIN}; iptables -t nat -X {SERVICES_CHAIN}`)"
            )
        _run("ip", "link", "add", "name", BRIDGE, "type", "bridge")
        _run("ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
        _run("ip", "link", "set", BRIDGE, "up")
        _run("iptables", "-w", "-t", "nat", "-N", SERVICES_CHAIN)
        _run("iptables", "-w", "-t", "nat", "-A", "PREROUTING", "-i", BRIDGE, "-j", SERVICES_CHAIN)
        # The `kubernetes` Service: what a pod's in-cluster configuration connects to.
        self.route_service(*KUBERNETES_SERVICE, int(self.cluster.url.rsplit(":", 1)[1]))

    def forward(self, target_port: int) -> tuple[str, int]:
        """A port on the bridge's host address that reaches ``target_port`` on loopback: (host, port)."""
        forward = Forward(target_port)
        self._forwards.append(forward)
        return GATEWAY, forward.port

    def route_service(self, cluster_ip: str, port: int, target_port: int) -> None:
        """Pods' connections to ``cluster_ip:port`` reach ``target_port`` on the machine's loopback."""
        host, forwarded = self.forward(target_port)
        rule = ["-d", f"{cluster_ip}/32", "-p", "tcp", "--dport", str(port)]
        _run("iptables", "-w", "-t", "nat", "-A", SERVICES_CHAIN, *rule, "-j", "DNAT",
             "--to-destination", f"{host}:{forwarded}")  # fmt: skip

    # --- containerd -----------------------------------------------------------------------------

    def _start_containerd(self, timeout: float) -> None:
        (self.folder / "run").mkdir(parents=True, exist_ok=True)
        cni = self.folder / "cni"
        cni.mkdir(exist_ok=True)
        (cni / "10-psweep.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "1.0.0",
                    "name": "psweep",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": BRIDGE,
                            "isGateway": True,
                            "isDefaultGateway": True,  # the pods reach Service IPs through the host
                            "ipMasq": False,
                            "ipam": {
                                "type": "host-local",
                                "ranges": [[{"subnet": SUBNET}]],
                                "dataDir": str(self.folder / "ipam"),
                            },
                        },
                        {"type": "loopback"},
                    ],
                }
            )
        )
        config = self.folder / "containerd.toml"
        config.write_text(
            f"""version = 2
root = "{self.folder / "containerd"}"
state = "{self.folder / "run" / "containerd"}"
[grpc]
  address = "{self.socket}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # runc cannot set oom_score_adj below its parent's without CAP_SYS_RESOURCE, which some machines
  # withhold: every sandbox would fail ("can't get final child's PID from pipe").
  restrict_oom_score_adj = true
  enable_cdi = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{cni}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
"""
        )
        self._spawn("containerd", ["containerd", f"--config={config}"])
        self._wait(lambda: self.socket.exists() and self.ctr("version", check=False) != "", timeout, "containerd")

    def ctr(self, *args: str, check: bool = True) -> str:
        """``ctr`` against this node's containerd, in the kubelet's namespace (k8s.io): its output."""
        return _run("ctr", f"--address={self.socket}", "--namespace=k8s.io", *args, check=check)

    def import_image(self, archive: Path) -> None:
        """An image archive (OCI or docker format, e.g. ``podman save``'s) into the node's containerd."""
        self.ctr("images", "import", str(archive))

    def images(self) -> list[str]:
        return [line.split()[0] for line in self.ctr("images", "list").splitlines()[1:] if line.strip()]

    # --- kubelet --------------------------------------------------------------------------------

    def _credentials(self) -> Path:
        """A client certificate for system:node:NAME (group system:nodes), and the ClusterRole system:node
        bound to it: what a node's bootstrap would have obtained (the server runs RBAC, not the Node
        authorizer)."""
        ca_folder = self.cluster.folder
        key, csr, crt = (self.folder / f"kubelet.{ext}" for ext in ("key", "csr", "crt"))
        curve = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
        subject = f"/O=system:nodes/CN=system:node:{self.name}"
        _openssl("req", *curve, "-keyout", str(key), "-out", str(csr), "-subj", subject, cwd=self.folder)
        _openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(ca_folder / "ca.crt"), "-CAkey", str(ca_folder / "ca.key"),
            "-CAcreateserial", "-days", "2", "-extfile", str(ca_folder / "client.ext"), "-out", str(crt),
            cwd=self.folder,
        )  # fmt: skip
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"pod-sweeper-test:{self.name}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": f"system:node:{self.name}"}],
        }
        status, answer = self.cluster.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
        if status not in (201, 409):
            raise RealNodeError(f"binding system:node to {self.name}: {status} {answer}")
        return kubeconfig(self.folder / "kubelet.kubeconfig", self.cluster.url, self.cluster.ca, cert=crt, key=key)

    def _start_kubelet(self, timeout: float) -> None:
        node_ip = _run("ip", "-4", "route", "get", "1.1.1.1").split(" src ")[1].split()[0]
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,  # a cgroup v1 machine: deprecated, still supported when asked
            "cgroupDriver": "cgroupfs",  # containerd 1.6 cannot say (no RuntimeConfig)
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "address": "127.0.0.1",
            "port": free_port(),
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": free_port(),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(self.cluster.ca)},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "podLogsDir": str(self.folder / "pod-logs"),
            "failSwapOn": False,
            "registerWithTaints": [{"key": TAINT, "value": "true", "effect": "NoSchedule"}],
            # The session's controller manager declares a node dead 10 s after its last word.
            "nodeStatusUpdateFrequency": "2s",
            "nodeStatusReportFrequency": "2s",
            "nodeLeaseDurationSeconds": 10,
            # Nothing here may be evicted or garbage-collected for the machine's own disk use: the
            # imported images cannot be pulled again.
            "evictionHard": {
                "memory.available": "1Mi",
                "nodefs.available": "0%",
                "imagefs.available": "0%",
                "nodefs.inodesFree": "0%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "resolvConf": "/etc/resolv.conf",
        }
        path = self.folder / "kubelet.yaml"
        path.write_text(json.dumps(config))
        self._spawn(
            "kubelet",
            [
                str(self.cluster.bindir / "kubelet"), f"--config={path}", f"--kubeconfig={self._credentials()}",
                f"--root-dir={self.folder / 'kubelet'}", f"--hostname-override={self.name}", f"--node-ip={node_ip}",
            ],
        )  # fmt: skip
        self._wait(lambda: self.cluster.node_ready(self.name) is True, timeout, f"node {self.name} Ready")

    # --- pods -----------------------------------------------------------------------------------

    def pod(
        self,
        namespace: str,
        name: str,
        *,
        args: list[str] | None = None,
        grace: int = 5,
        runtime_class: str | None = None,
        image: str = PAUSE_IMAGE,
        host_network: bool = False,
    ) -> dict[str, Any]:
        """A pod on this node running ``image`` (``pause`` by default, with ``args``)."""
        container: dict[str, Any] = {"name": "main", "image": image, "imagePullPolicy": "Never"}
        if args:
            container["args"] = args
        spec: dict[str, Any] = {
            "nodeName": self.name,
            "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
            "terminationGracePeriodSeconds": grace,
            "automountServiceAccountToken": False,
            "containers": [container],
            "hostNetwork": host_network,
        }
        if runtime_class:
            spec["runtimeClassName"] = runtime_class
        body = {"metadata": {"name": name}, "spec": spec}
        status, pod = self.cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", body)
        if status != 201:
            raise RealNodeError(f"POST pod {namespace}/{name}: {status} {pod}")
        return dict(pod)

    def refusing_runtime_class(self) -> str:
        """The RuntimeClass the runtime refuses (created once); its name, for ``pod(runtime_class=)``."""
        body = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                "metadata": {"name": REFUSED_RUNTIME_CLASS}, "handler": REFUSED_RUNTIME_CLASS}  # fmt: skip
        status, answer = self.cluster.request("POST", "/apis/node.k8s.io/v1/runtimeclasses", body)
        if status not in (201, 409):
            raise RealNodeError(f"POST RuntimeClass: {status} {answer}")
        return REFUSED_RUNTIME_CLASS

    def refusal_events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """The kubelet's FailedCreatePodSandBox Events of the pod (one Event, its ``count`` growing)."""
        return [
            e
            for e in self.cluster.events(namespace)
            if e["reason"] == "FailedCreatePodSandBox" and e["involvedObject"]["name"] == name
        ]

    def refusals(self, namespace: str, name: str) -> int:
        """How many times the kubelet has reported the pod's sandbox refused."""
        return sum(e.get("count") or 1 for e in self.refusal_events(namespace, name))

    def rss_bytes(self) -> dict[str, int]:
        """Resident memory of the kubelet and containerd."""
        return resident_bytes({name: proc.pid for name, proc in self._procs.items()})

    def container_log(self, pod: dict[str, Any], container: str = "main") -> str:
        """What the container wrote, from the kubelet's log files (empty once they are removed)."""
        meta = pod["metadata"]
        folder = self.folder / "pod-logs" / f"{meta['namespace']}_{meta['name']}_{meta['uid']}" / container
        texts = []
        for path in sorted(folder.glob("*.log")):
            with contextlib.suppress(OSError):
                texts.append(path.read_text(errors="replace"))
        return "".join(texts)

    # --- stopping and putting the machine back --------------------------------------------------

    def _drain(self, timeout: float) -> None:
        """Every pod bound here deleted and gone, so the kubelet tears down each sandbox (its network
        namespace, veth and IP) through the runtime, as it would on a real node."""
        for pod in self._node_pods():
            where = f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/{pod['metadata']['name']}"
            self.cluster.request("DELETE", where, {"gracePeriodSeconds": 0})
        with contextlib.suppress(RealNodeError):
            self._wait(lambda: not self._node_pods() and not self._tasks(), timeout, "the node's pods gone")

    def _node_pods(self) -> list[Any]:
        _, pods = self.cluster.request("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{self.name}")
        return list(pods.get("items") or [])

    def _tasks(self) -> list[str]:
        """The node's running processes (containers and sandboxes); a stopped sandbox's record stays in
        containerd until the kubelet's garbage collection, which a stop need not wait for."""
        return [t for t in self.ctr("tasks", "list", "-q", check=False).split() if t]

    def stop(self) -> None:
        """Drain, stop the kubelet and containerd, and put the machine back as ``start`` found it. The
        lock goes last, whatever failed before it: a stop that raises leaves its ledger for the next node
        (the machine not put back), never the lock held for the rest of the test session."""
        try:
            if "kubelet" in self._procs and self._procs["kubelet"].poll() is None:
                try:
                    self._drain(60)
                except KubeApiServerError as exc:  # the API server gone: the tasks are killed below all the same
                    print(f"\nthe real node's drain failed ({exc}); its containers are killed without it")
            self._terminate("kubelet")
            if "containerd" in self._procs and self._procs["containerd"].poll() is None:
                for task in self.ctr("tasks", "list", "-q", check=False).split():
                    self.ctr("tasks", "kill", "-s", "SIGKILL", task, check=False)
            self._terminate("containerd")
            self._kill_shims()
            if self.before is not None:  # (None: the start failed before it wrote its ledger, if any is there)
                self._restore(self.before)
                LEDGER.unlink(missing_ok=True)  # the machine is as it was: nothing left for a ledger to say
            shutil.rmtree(self.folder, ignore_errors=True)
            self.cluster.request("DELETE", f"/api/v1/nodes/{self.name}")
            self.cluster.request(
                "DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/pod-sweeper-test:{self.name}"
            )
        finally:
            if self._lock is not None:
                os.close(self._lock)
                self._lock = None

    def abandon(self) -> None:
        """Leave the machine as a SIGKILL of this process would, for the test of what comes after one: the
        kernel lets go of LOCK, the node's containerd, kubelet and shims run on, and the forwarders
        (threads of this process) end with it; ``stop`` never runs."""
        for forward in self._forwards:
            forward.close()
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def _kill_shims(self) -> None:
        """containerd's shims outlive it by design; this node's (found by their -address) end with it."""
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                cmdline = (proc / "cmdline").read_bytes().split(b"\0")
                if (
                    cmdline
                    and cmdline[0].endswith(b"containerd-shim-runc-v2")
                    and str(self.socket).encode() in b" ".join(cmdline)
                ):
                    os.kill(int(proc.name), signal.SIGKILL)

    def _restore(self, before: HostState) -> None:
        """Put back what this node changed, and only that (``_put_back``)."""
        for forward in self._forwards:
            forward.close()
        _put_back(before, self.folder)

    # --- processes ------------------------------------------------------------------------------

    def _spawn(self, name: str, args: list[str]) -> None:
        log = (self.folder / f"{name}.log").open("wb")
        self._procs[name] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def _terminate(self, name: str) -> None:
        proc = self._procs.get(name)
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.folder / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def _wait(self, condition: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise RealNodeError(f"{name} exited {proc.returncode} waiting for {what}:\n{self.log_tail(name)}")
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {n}\n{self.log_tail(n)}" for n in self._procs)
                raise RealNodeError(f"timed out after {timeout:g} s waiting for {what}\n{tails}")
            time.sleep(0.1)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
