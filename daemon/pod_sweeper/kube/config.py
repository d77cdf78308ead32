"""Where the Kubernetes client's configuration comes from, and how its credentials stay fresh.

``load_configuration`` reads an explicit kubeconfig, else the in-cluster ServiceAccount (as in every
pod), else the usual kubeconfig lookup. The client's urllib3 layer would retry a DELETE by itself on
429 and on read timeouts; retries are turned off here so that the sweeper owns the whole policy
(attempt counting, backoff, Retry-After). The connection pool is sized to the sweeper's concurrency.
In a pod the token file is looked at before every request (``TokenFile``); elsewhere the config
loader's credential refresh hook runs at most once a second (``ThrottledRefresh``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import InClusterConfigLoader

from pod_sweeper.core.errors import ConfigError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def load_configuration(
    kubeconfig: Path | None,
    context: str | None,
    *,
    pool_size: int,
    service_account_dir: Path = SERVICE_ACCOUNT_DIR,
    environ: Mapping[str, str] = os.environ,
) -> client.Configuration:
    """Explicit kubeconfig, else the in-cluster service account (when KUBERNETES_SERVICE_HOST is set, as
    in every pod), else the usual kubeconfig lookup ($KUBECONFIG, then ~/.kube/config)."""
    configuration = client.Configuration()
    try:
        if kubeconfig is not None:
            if not kubeconfig.is_file():
                raise ConfigError(f"POD_SWEEPER_KUBECONFIG: {kubeconfig} does not exist")
            config.load_kube_config(str(kubeconfig), context=context, client_configuration=configuration)  # type: ignore[no-untyped-call]
        elif environ.get("KUBERNETES_SERVICE_HOST"):
            loader = InClusterConfigLoader(  # type: ignore[no-untyped-call]
                token_filename=str(service_account_dir / "token"),
                cert_filename=str(service_account_dir / "ca.crt"),
                environ=environ,
                try_refresh_token=False,  # our TokenFile below re-reads it: at once, not once a minute
            )
            loader.load_and_set(configuration)  # type: ignore[no-untyped-call]
        else:
            # Read $KUBECONFIG now: the client reads it once, when it is imported.
            lookup = environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
            config.load_kube_config(lookup, context=context, client_configuration=configuration)  # type: ignore[no-untyped-call]
    except ConfigException as exc:
        raise ConfigError(f"cannot load the Kubernetes configuration: {exc}") from None
    except ConfigError:
        raise
    except Exception as exc:  # YAML errors, wrong shapes: the loader raises many kinds for a bad file
        where = kubeconfig or "the default kubeconfig"
        raise ConfigError(f"cannot read the kubeconfig {where}: {type(exc).__name__}: {exc}") from None
    configuration.retries = False  # we own the retry policy; see the module docstring
    if kubeconfig is None and environ.get("KUBERNETES_SERVICE_HOST"):
        # In a pod: a stat of the token file before each request, never throttled. (Throttled, the one
        # thread that looks after a rotation reads the new token while the others, sending at the same
        # moment, still send the old one: a 401 once the old one is revoked, seen on a real cluster.)
        # The client annotates the hook as None, though it calls whatever is set there.
        configuration.refresh_api_key_hook = TokenFile(service_account_dir / "token")  # type: ignore[assignment]
    elif configuration.refresh_api_key_hook is not None:
        configuration.refresh_api_key_hook = ThrottledRefresh(configuration.refresh_api_key_hook)
    configuration.connection_pool_maxsize = pool_size
    return configuration


class TokenFile:
    """The in-cluster ServiceAccount token, read again as soon as the kubelet rewrites it.

    A bound token expires (an hour by default); the kubelet writes the next one into the projected
    volume long before, by swapping a symlink, so the file's inode changes. The client's own loader
    re-reads the file once a minute whatever happens; this hook runs before every request, looks at the
    file's identity (one ``stat``, microseconds) and reads it only when it changed, so every request
    after the rotation carries the new token, and a token revoked right after its rotation is never
    sent again. A file caught mid-write (empty or unreadable) keeps the token in use."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int, int] | None = None

    def __call__(self, configuration: Any) -> None:
        try:
            info = self.path.stat()
            identity = (info.st_ino, info.st_mtime_ns, info.st_size)
            if identity == self._seen:
                return
            token = self.path.read_text().strip()
        except OSError:
            return
        if token:
            configuration.api_key["BearerToken"] = f"bearer {token}"
            self._seen = identity


class ThrottledRefresh:
    """The config loader's credential refresh hook, run at most once per ``every`` seconds.

    The client calls the hook before every request, and both loaders' hooks re-apply the whole
    configuration each time (the kubeconfig one re-reads the proxy environment in the host setter):
    about a fifth of the CPU of a DELETE here. They renew a token only when it is near its end (the
    kubeconfig loader five minutes before its expiry), so a check a second loses nothing. (In a pod the
    hook is ``TokenFile``, unthrottled: see there.)
    """

    def __init__(
        self, hook: Callable[[Any], None], *, every: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._hook, self._every, self._clock = hook, every, clock
        self._due = float("-inf")

    def __call__(self, configuration: Any) -> None:
        now = self._clock()
        if now < self._due:
            return
        # Threads may race past this check together: the hook is safe to run twice, as the client
        # itself runs it concurrently from every request thread.
        self._due = now + self._every
        self._hook(configuration)
        # Each run of a loader's hook installs a fresh closure of itself: keep it, stay in front.
        if configuration.refresh_api_key_hook is not self:
            self._hook = configuration.refresh_api_key_hook
            configuration.refresh_api_key_hook = self
