"""Where the Kubernetes client's configuration comes from, and how its credentials stay fresh.

``load_configuration`` reads an explicit kubeconfig, else the in-cluster ServiceAccount (as in every
pod), else the usual kubeconfig lookup. The client's urllib3 layer would retry a DELETE by itself on
429 and on read timeouts; retries are turned off here so that the sweeper owns the whole policy
(attempt counting, backoff, Retry-After). The connection pool is sized to the sweeper's concurrency.
In a pod the token file is looked at before every request (``TokenFile``); elsewhere the config
loader's credential refresh hook runs at most once a second (``ThrottledRefresh``). The client calls
either from every request thread at once: each class states who may write what.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

import yaml
from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import InClusterConfigLoader

from pod_sweeper.core import logs
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
    # The kubeconfig's secrets are hidden before the loader runs: it logs an exec plugin's failure (its
    # stderr) itself, and its errors may quote what it read.
    lookup = environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    secrets = kubeconfig_secrets(kubeconfig) if kubeconfig is not None else _lookup_secrets(lookup)
    logs.hide(*secrets)
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
            config.load_kube_config(lookup, context=context, client_configuration=configuration)  # type: ignore[no-untyped-call]
    except ConfigException as exc:
        logs.hide(*credentials(configuration), renewed=True)
        raise ConfigError(f"cannot load the Kubernetes configuration: {logs.scrub(str(exc))}") from None
    except ConfigError:
        raise
    except Exception as exc:  # YAML errors, wrong shapes: the loader raises many kinds for a bad file
        where = kubeconfig or "the default kubeconfig"
        logs.hide(*credentials(configuration), renewed=True)
        raise ConfigError(f"cannot read the kubeconfig {where}: {logs.scrub(f'{type(exc).__name__}: {exc}')}") from None
    logs.hide(*credentials(configuration), renewed=True)
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


def credentials(configuration: Any) -> list[str]:
    """What the client's configuration holds that is a secret, as it stands now (a hook may have renewed
    the token): each API key as the client sends it and without its prefix (``bearer``, ``Basic``: the
    kubeconfig loader sends a basic-auth user and password as a key too), and a password set outright."""
    keys = [str(key) for key in (getattr(configuration, "api_key", None) or {}).values() if key]
    return [*keys, *(key.rpartition(" ")[2] for key in keys), str(getattr(configuration, "password", None) or "")]


# The fields of a kubeconfig user that hold a secret, an auth provider's settings that do, and the words
# that name a secret in an exec plugin's environment (AWS_PROFILE=default is none: hidden, "default"
# would be cut from every line). The names of files are no secrets.
_USER_SECRETS = ("token", "password", "client-key-data")
_PROVIDER_SECRETS = ("id-token", "refresh-token", "access-token", "client-secret")
_SECRET_WORDS = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|KEY|AUTH", re.IGNORECASE)


def kubeconfig_secrets(path: Path | str) -> list[str]:
    """The secrets a kubeconfig file's users hold (their tokens, passwords and key data, their auth
    providers' tokens and client secrets, the values of their exec plugins' environment whose names say
    secret), for ``logs.hide``; nothing when the file cannot be read or parsed, and nothing from a part
    of another shape (the loader then says why, and its words hold nothing it could read)."""
    try:
        with open(path, encoding="utf-8") as file:
            document = yaml.safe_load(file)
    except (OSError, ValueError, yaml.YAMLError):
        return []
    users = document.get("users") if isinstance(document, dict) else None
    entries = [entry for entry in users if isinstance(entry, dict)] if isinstance(users, list) else []
    return [secret for entry in entries for secret in _user_secrets(entry.get("user"))]


def _user_secrets(user: object) -> list[str]:
    if not isinstance(user, dict):
        return []
    found = [str(user[name]) for name in _USER_SECRETS if user.get(name)]
    provider = user.get("auth-provider")
    settings = provider.get("config") if isinstance(provider, dict) else None
    if isinstance(settings, dict):
        found += [str(settings[name]) for name in _PROVIDER_SECRETS if settings.get(name)]
    plugin = user.get("exec")
    env = plugin.get("env") if isinstance(plugin, dict) else None
    for variable in env if isinstance(env, list) else []:
        if isinstance(variable, dict) and variable.get("value") and _SECRET_WORDS.search(str(variable.get("name"))):
            found.append(str(variable["value"]))
    return found


def _lookup_secrets(lookup: str) -> list[str]:
    """``kubeconfig_secrets`` of each file of a ``$KUBECONFIG`` list (the loader merges them)."""
    return [secret for path in lookup.split(os.pathsep) if path for secret in kubeconfig_secrets(path)]


class TokenFile:
    """The in-cluster ServiceAccount token, read again as soon as the kubelet rewrites it.

    A bound token expires (an hour by default); the kubelet writes the next one into the projected
    volume long before, by swapping a symlink, so the file's inode changes. The client's own loader
    re-reads the file once a minute whatever happens; this hook runs before every request, looks at the
    file's identity (one ``stat``, microseconds) and reads it only when it changed, so every request
    after the rotation carries the new token, and a token revoked right after its rotation is never
    sent again. A file caught mid-write (empty or unreadable) keeps the token in use.

    Threads: the rule is that only the thread holding ``_lock`` reads the file and writes the token and
    ``_seen``, the token first. One thread at a time, each reading the file as it is then, never puts back
    a token older than the one in use; and ``_seen`` never names a newer file than that token, since the
    identity recorded is that of the file opened, taken before it is read. (Unlocked, a thread holding the
    old token could write it after another wrote the new one, then the other record the new file as seen:
    the old token sent until the next rotation.) The check before it, one ``stat`` compared with
    ``_seen``, takes no lock: ``_seen`` is one tuple replaced whole (a single store under the GIL), written
    after its token, so a thread that finds its file there finds that token, or a newer one, in use.
    """

    def __init__(self, path: Path, *, lock: AbstractContextManager[object] | None = None) -> None:
        """``lock``: the lock of that rule (a new ``threading.Lock`` unless a test watches its own)."""
        self.path = path
        self._seen: tuple[int, int, int] | None = None
        self._lock = lock if lock is not None else threading.Lock()

    def __call__(self, configuration: Any) -> None:
        try:
            info = self.path.stat()
        except OSError:
            return
        if (info.st_ino, info.st_mtime_ns, info.st_size) == self._seen:
            return
        with self._lock:  # held for an open and a read, after a rotation only
            self._read(configuration)

    def _read(self, configuration: Any) -> None:
        """Under ``_lock``: the token from the file as it is now, unless a thread before has read it."""
        try:
            with self.path.open() as file:
                info = os.fstat(file.fileno())  # the file opened, whatever the symlinks point at by now
                identity = (info.st_ino, info.st_mtime_ns, info.st_size)
                if identity == self._seen:
                    return
                token = file.read().strip()
        except OSError:
            return
        if token:
            logs.hide(token, renewed=True)  # before it is in use: a line about a request never shows it
            configuration.api_key["BearerToken"] = f"bearer {token}"
            self._seen = identity


class ThrottledRefresh:
    """The config loader's credential refresh hook, run at most once per ``every`` seconds.

    The client calls the hook before every request, and both loaders' hooks re-apply the whole
    configuration each time (the kubeconfig one re-reads the proxy environment in the host setter):
    about a fifth of the CPU of a DELETE here. They renew a token only when it is near its end (the
    kubeconfig loader five minutes before its expiry), so a check a second loses nothing. (In a pod the
    hook is ``TokenFile``, unthrottled: see there.)

    Threads: the rule is that only the thread holding ``_lock`` reads or writes ``_due`` and ``_hook`` and
    runs the loader's hook. The lock is taken without waiting: a thread that finds another renewing
    returns at once and sends the credential in force, as it does when no check is due (the loader renews
    minutes before the expiry, so that credential is still good). ``configuration.refresh_api_key_hook``
    is this object from ``load_configuration`` on and nothing writes it again: each run of a loader's hook
    installs a fresh closure of itself, and the hook runs on a view of the configuration that passes every
    other write through and hands that closure back, to become ``_hook`` (never this object). Before,
    the swap went through the configuration and two threads renewing at once could leave ``_hook`` being
    this object, which then never renewed the credential again: a 401 on every request once it expired.
    The view also keeps the other request threads off the loader's closure while it is installed.
    """

    def __init__(
        self,
        hook: Callable[[Any], None],
        *,
        every: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        lock: _NonBlockingLock | None = None,
    ) -> None:
        """``clock`` and ``lock``: the time and the lock of that rule (``time.monotonic`` and a new
        ``threading.Lock`` unless a test or the simulator, tests/sim, drives the threads' steps itself)."""
        self._hook, self._every, self._clock = hook, every, clock
        self._due = float("-inf")
        self._lock: _NonBlockingLock = lock if lock is not None else threading.Lock()

    def __call__(self, configuration: Any) -> None:
        if not self._lock.acquire(blocking=False):
            return  # another thread is renewing: the credential in force, as when no check is due
        try:
            now = self._clock()
            if now < self._due:
                return
            self._due = now + self._every
            view = _HookCatcher(configuration)
            try:
                self._hook(view)
            finally:
                logs.hide(*credentials(configuration), renewed=True)  # a renewed token, even if the hook failed
            installed = view.installed
            if installed is not self and callable(installed):
                self._hook = installed
        finally:
            self._lock.release()


class _NonBlockingLock(Protocol):
    """What ``ThrottledRefresh`` needs of its lock: taken without waiting, then released."""

    def acquire(self, blocking: bool = ..., timeout: float = ...) -> bool: ...

    def release(self) -> None: ...


class _HookCatcher:
    """A configuration as a loader's refresh hook sees it under ``ThrottledRefresh``: reads and writes go
    to the real one, except the hook's installing of its next closure, kept in ``installed``."""

    __slots__ = ("_configuration", "installed")
    _configuration: Any
    installed: object  # what the hook put in the configuration's refresh_api_key_hook, if anything

    def __init__(self, configuration: Any) -> None:
        object.__setattr__(self, "_configuration", configuration)
        object.__setattr__(self, "installed", None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._configuration, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "refresh_api_key_hook":
            object.__setattr__(self, "installed", value)
        else:
            setattr(self._configuration, name, value)
