"""A real Kubernetes API server for the tests and the benchmarks: etcd and kube-apiserver on loopback.

The fake API server (``fakekube``) is fast and injects faults, but it is our own reading of the
reference; this is the thing itself, built from the published Go modules by ``tools/kube/build``.
``KubeApiServer`` starts etcd and kube-apiserver from that folder of binaries on free loopback ports in
a temporary folder, with a CA, a serving certificate and client certificates made here (``openssl``),
a service-account signing key (so ``kubectl create token`` works), ``--authorization-mode=RBAC``, and
two identities: an admin (``system:masters``) and a plain user that RBAC grants nothing. It waits for
``/readyz`` and stops both processes, killing them if they linger.

There is no controller manager and no kubelet: nothing runs, nothing is scheduled, a namespace is
never finalized and a pod bound to a node stays terminating until a DELETE with a zero grace period.
``namespace()`` therefore also creates the ``default`` service account that the controller manager
would (the ServiceAccount admission plugin rejects pods without one).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from harness.postgres import free_port
from pod_sweeper.core.errors import PodSweeperError

BINDIR_ENV = "POD_SWEEPER_KUBE_BINDIR"
ADMIN = "pod-sweeper-test-admin"
USER = "pod-sweeper-test-user"
BINARIES = ("etcd", "kube-apiserver", "kubectl")


class KubeApiServerError(PodSweeperError):
    """The real API server could not be found or started here."""


def find_bindir(repo: Path | None = None) -> Path:
    """The folder holding etcd, kube-apiserver and kubectl: ``POD_SWEEPER_KUBE_BINDIR``, else what
    ``tools/kube/build --dir`` of the checkout names (it builds nothing)."""
    named = os.environ.get(BINDIR_ENV)
    if named:
        folder = Path(named)
    else:
        script = (repo or Path(__file__).resolve().parents[2]) / "tools" / "kube" / "build"
        if not script.is_file():
            raise KubeApiServerError(f"no {BINDIR_ENV} and no tools/kube/build in this checkout")
        found = subprocess.run([str(script), "--dir"], capture_output=True, text=True, check=False)
        if found.returncode != 0:
            raise KubeApiServerError(
                f"kube-apiserver is not built: run tools/kube/build once (minutes), or set {BINDIR_ENV}"
            )
        folder = Path(found.stdout.strip())
    missing = [name for name in BINARIES if not os.access(folder / name, os.X_OK)]
    if missing:
        raise KubeApiServerError(f"{folder} lacks {', '.join(missing)}")
    return folder


def resident_bytes(pids: dict[str, int]) -> dict[str, int]:
    """Each named process's resident memory now (VmRSS, from /proc); a process gone is left out."""
    sizes = {}
    for name, pid in pids.items():
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    sizes[name] = int(line.split()[1]) * 1024
    return sizes


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise KubeApiServerError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def make_pki(folder: Path) -> None:
    """A CA, the server's certificate (127.0.0.1, localhost and the `kubernetes` Service), client
    certificates for the admin and the plain user, and the service-account signing key pair, all in
    ``folder``."""
    if shutil.which("openssl") is None:
        raise KubeApiServerError("openssl is not on PATH (Debian's package openssl)")
    curve = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *curve, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=ca", cwd=folder)
    # Also the names a pod uses for the `kubernetes` Service (its ClusterIP, the first of the service
    # range), which a real node's pods reach through ``kubenode``'s service route.
    names = "IP:127.0.0.1,DNS:localhost,IP:10.96.0.1,DNS:kubernetes.default.svc,DNS:kubernetes.default"
    (folder / "server.ext").write_text(f"subjectAltName={names}\nextendedKeyUsage=serverAuth\n")
    (folder / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name, subject, ext in (
        ("server", "/CN=kube-apiserver", "server.ext"),
        ("admin", f"/O=system:masters/CN={ADMIN}", "client.ext"),
        ("user", f"/CN={USER}", "client.ext"),
    ):
        _openssl("req", *curve, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=folder)
        _openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "2", "-extfile", ext, "-out", f"{name}.crt", cwd=folder,
        )  # fmt: skip
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=folder)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=folder)


def kubeconfig(path: Path, server: str, ca: Path, *, cert: Path | None = None, key: Path | None = None,
               token: str | None = None, namespace: str = "default", embed_ca: bool = False) -> Path:  # fmt: skip
    """A kubeconfig for one identity: a client certificate, or a bearer token. With ``embed_ca`` the CA is
    in the file itself (``certificate-authority-data``, as ``kubectl config view --flatten`` writes it), so
    that it works on another machine."""
    user: dict[str, str] = {"token": token} if token else {"client-certificate": str(cert), "client-key": str(key)}
    authority = (
        {"certificate-authority-data": base64.b64encode(ca.read_bytes()).decode()}
        if embed_ca
        else {"certificate-authority": str(ca)}
    )
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": server, **authority}}],
        "users": [{"name": "test", "user": user}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test", "namespace": namespace}}],
        "current-context": "test",
    }
    path.write_text(json.dumps(document, indent=2))  # JSON is YAML: every kubeconfig loader reads it
    path.chmod(0o600)
    return path


class KubeApiServer:
    """etcd and kube-apiserver on loopback, for as long as the context lasts."""

    def __init__(self, bindir: Path, *, extra_args: list[str] | None = None) -> None:
        self.bindir = bindir
        self.extra_args = extra_args or []
        self.folder = Path(tempfile.mkdtemp(prefix="pod-sweeper-kube-"))
        self.etcd_port, self.peer_port, self.port = free_port(), free_port(), free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.ca = self.folder / "ca.crt"
        self.admin_kubeconfig = self.folder / "admin.kubeconfig"
        self.user_kubeconfig = self.folder / "user.kubeconfig"
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self.started_in: float | None = None

    # --- life -------------------------------------------------------------------------------------

    def _spawn(self, name: str, args: list[str]) -> None:
        log = open(self.folder / f"{name}.log", "ab")  # noqa: SIM115 - the process owns it until stop()
        self._procs[name] = subprocess.Popen(
            [str(self.bindir / name), *args], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        log.close()

    def start(self, *, timeout: float = 120.0) -> Self:
        began = time.monotonic()
        make_pki(self.folder)
        etcd_url = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        self._spawn(
            "etcd",
            [
                "--name=test", f"--data-dir={self.folder / 'etcd'}",
                f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=test={peer}",
                # Durability buys nothing here (the data dies with the folder); fsync would make every
                # write as slow as the disk.
                "--unsafe-no-fsync",
            ],
        )  # fmt: skip
        self._apiserver_args = [
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.port}",
            f"--cert-dir={self.folder / 'certs'}",
            f"--tls-cert-file={self.folder / 'server.crt'}", f"--tls-private-key-file={self.folder / 'server.key'}",
            f"--client-ca-file={self.ca}",
            # Published for the controller manager and the scheduler, which read it at start (without it
            # they log a missing CA bundle every few seconds); no front proxy ever signs with it here.
            f"--requestheader-client-ca-file={self.ca}", "--requestheader-allowed-names=front-proxy-client",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={self.folder / 'sa.pub'}",
            f"--service-account-signing-key-file={self.folder / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/24",
            # The endpoints of the `kubernetes` Service would name 127.0.0.1, which validation refuses.
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            *self.extra_args,
        ]  # fmt: skip
        self._spawn("kube-apiserver", self._apiserver_args)
        for path, who in ((self.admin_kubeconfig, "admin"), (self.user_kubeconfig, "user")):
            kubeconfig(path, self.url, self.ca, cert=self.folder / f"{who}.crt", key=self.folder / f"{who}.key")
        self._wait_ready(timeout)
        self.started_in = time.monotonic() - began
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self._ready():
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise KubeApiServerError(f"{name} exited with {proc.returncode}:\n{self.log_tail(name)}")
            if time.monotonic() > deadline:
                raise KubeApiServerError(f"kube-apiserver not ready after {timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.2)

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver alone (etcd and its data stay): its port refuses connections until
        :meth:`start_apiserver` (an upgrade of the control plane, an outage)."""
        proc = self._procs["kube-apiserver"]
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def start_apiserver(self, *, timeout: float = 120.0) -> None:
        """Start kube-apiserver again on the same port, with the same etcd, and wait until it is ready."""
        self._spawn("kube-apiserver", self._apiserver_args)
        self._wait_ready(timeout)

    def _ready(self) -> bool:
        try:
            return self.request("GET", "/readyz", timeout=2)[0] == 200
        except OSError:
            return False

    def stop(self) -> None:
        for proc in reversed(list(self._procs.values())):  # the API server first, then its etcd
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.cleanup()

    # --- looking at it ----------------------------------------------------------------------------

    def log_tail(self, name: str = "kube-apiserver", lines: int = 60) -> str:
        path = self.folder / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def rss_bytes(self) -> dict[str, int]:
        """Resident memory of etcd and kube-apiserver now (from /proc)."""
        return resident_bytes({name: proc.pid for name, proc in self._procs.items()})

    # --- talking to it ----------------------------------------------------------------------------

    def request(
        self, method: str, path: str, body: Any = None, *, timeout: float = 10, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        """One request as the admin (client certificate), outside the client under test: (status, JSON).
        A PATCH takes ``content_type="application/merge-patch+json"``."""
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(str(self.folder / "admin.crt"), str(self.folder / "admin.key"))
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
                return response.status, _json_or_text(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, _json_or_text(exc.read())

    def kubectl(
        self, *args: str, kubeconfig_path: Path | None = None, stdin: str | None = None, check: bool = True
    ) -> str:
        """kubectl of the same release, as the admin unless another kubeconfig is named; its stdout
        (with ``check``, a failure raises with kubectl's error line)."""
        done = subprocess.run(
            [str(self.bindir / "kubectl"), f"--kubeconfig={kubeconfig_path or self.admin_kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if check and done.returncode != 0:
            raise KubeApiServerError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def namespace(self, name: str) -> str:
        """Create namespace ``name`` with its ``default`` service account (the controller manager's job)."""
        for path, body in (
            ("/api/v1/namespaces", {"metadata": {"name": name}}),
            (f"/api/v1/namespaces/{name}/serviceaccounts", {"metadata": {"name": "default"}}),
        ):
            status, answer = self.request("POST", path, body)
            if status not in (201, 409):
                raise KubeApiServerError(f"POST {path}: {status} {answer}")
        return name

    def token_kubeconfig(self, path: Path, token: str, *, namespace: str = "default", embed_ca: bool = False) -> Path:
        return kubeconfig(path, self.url, self.ca, token=token, namespace=namespace, embed_ca=embed_ca)

    # --- etcd ---------------------------------------------------------------------------------------

    def _etcd(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.etcd_port}{path}", data=json.dumps(body).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return dict(json.loads(response.read()))

    def compact(self) -> int:
        """Compact etcd's history up to its current revision (what kube-apiserver does every five
        minutes): list continue tokens and watches from before it answer 410 Gone. Returns the revision."""
        revision = int(self._etcd("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"])
        self._etcd("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision


def _json_or_text(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")
