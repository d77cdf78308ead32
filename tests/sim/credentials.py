"""A replica's Kubernetes credential as the request threads see it: the daemon's own ``ThrottledRefresh``
(daemon/pod_sweeper/kube/config.py) in front of a scripted kubeconfig loader whose exec/OIDC token
expires, called by every request the replica sends (a DELETE, a probe) the way the client calls it.

The client (``kubernetes.client.Configuration.get_api_key_with_prefix``) reads the configuration's
``refresh_api_key_hook`` and calls it before each request, from whichever pool thread sends it; the
kubeconfig loader's hook (``KubeConfigLoader._set_config``) renews the token near its expiry (running the
exec plugin) and installs a fresh closure of itself in the configuration each time. Here every place
where a real request thread may be preempted inside that code is a yield point of the simulator's loop
(``SimLoop.pause``): each read and write of the hook attribute, the throttle's clock, its lock taken and
released, the loader's renewal. So two request threads of one replica renew at once in every order the
seed draws, and the throttle's rule (kube/config.py, "Threads") is what keeps the hook renewing.

What the world checks from here (``an_expired_credential_is_renewed``): a request whose hook call
overlapped no other of its replica's never sends a token expired when its hook began. Alone, the hook
either renews it (a check due) or it was checked within the last ``EVERY`` seconds, when it had
``MARGIN`` left. A request that ran beside another may send the token in force while the other renews
it: the throttle's rule allows that (and the server's 401 is the answer then). At the end, once every token has
expired, each live replica sends one request more, alone: the hook must still renew.

In about one run of ``PROVIDER_DOWN_ONE_IN`` (a stream of its own, ``"{seed}:unsent"``, so the runs that draw
none run as before it) the identity provider behind the renewal (an OIDC issuer, a cloud's token endpoint)
is down for a few windows of virtual time, all ended ``EVERY`` and a second before the world heals: a renewal
begun then fails, the loader's hook raises (a ``ConfigException`` or a ``ConnectionRefusedError``, as the
real OIDC or GCP refresh does) and the request is never sent (``NoCredential``: the world answers it
``Answer.unsent``, as ``KubeClient`` does). The daemon's throttle has then set its next check a second on
before it ran the hook (kube/config.py): a request within that second sends the credential in force, expired
or not, which the check above excuses (``held_back``).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes.config.config_exception import ConfigException

from pod_sweeper.kube.config import ThrottledRefresh
from sim.loop import HandoffGone, SimLoop

LIFETIME = (4.0, 15.0)  # virtual seconds a token is good for, drawn for each replica
MARGIN = 2.0  # the loader renews a token this close to its expiry (the kubeconfig loader: five minutes)
EVERY = 1.0  # the throttle's interval, as the daemon's
RENEWAL = (0.05, 2.0)  # seconds the exec plugin or the OIDC refresh takes: longer than EVERY at times
PREEMPTED = 0.05  # at most this long a thread is descheduled at a yield point
PROVIDER_DOWN_ONE_IN = 10  # about one run in this many has the identity provider down at times
DOWN_FOR = (0.5, 8.0)  # virtual seconds each window of the provider's lasts


class NoCredential(Exception):
    """The credential hook raised (its cause): the request never went on the wire."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


@dataclass(frozen=True)
class Provider:
    """The identity provider behind the loader's renewal: down in each window ``(start, end, kind)``."""

    windows: tuple[tuple[float, float, str], ...]

    def failure(self, at: float) -> Exception | None:
        """What a renewal begun at ``at`` raises, or None when the provider answers."""
        for start, end, kind in self.windows:
            if start <= at < end:
                if kind == "refused":
                    return ConnectionRefusedError(111, "Connection refused (scripted identity provider)")
                return ConfigException("Failed to refresh the token: the identity provider is down (scripted)")
        return None

    def describe(self) -> str:
        return "identity provider down " + ", ".join(f"{s:.3f}-{e:.3f} ({k})" for s, e, k in self.windows)


def draw_provider(seed: int, began: float, horizon: float) -> Provider | None:
    """The seed's identity provider outages, from a stream of their own, each ended ``EVERY`` and a second
    before ``began + horizon`` (when the world heals); None in most runs."""
    rng = random.Random(f"{seed}:unsent")
    if rng.random() >= 1 / PROVIDER_DOWN_ONE_IN:
        return None
    last = began + horizon - EVERY - 1.0
    windows = []
    for _ in range(rng.choice((1, 2, 3))):
        start = began + rng.uniform(0.0, horizon - EVERY - 1.5)
        windows.append((start, min(last, start + rng.uniform(*DOWN_FOR)), rng.choice(("refused", "config"))))
    return Provider(tuple(sorted(windows)))


class _Configuration:
    """The parts of ``kubernetes.client.Configuration`` the hooks touch; each read or write of the hook
    attribute is a yield point."""

    def __init__(self, pause: Callable[[], None]) -> None:
        self.api_key: dict[str, str] = {}
        self._hook: Any = None
        self._pause = pause

    @property
    def refresh_api_key_hook(self) -> Any:
        self._pause()
        return self._hook

    @refresh_api_key_hook.setter
    def refresh_api_key_hook(self, hook: Any) -> None:
        self._pause()
        self._hook = hook


class _Lock:
    """The throttle's lock, for threads that run one at a time: taken without waiting; each taking and
    each release is a yield point."""

    def __init__(self, pause: Callable[[], None]) -> None:
        self._pause = pause
        self.held = False

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        self._pause()
        if self.held:
            if blocking:  # it would wait for a thread that runs only when this one parks
                raise RuntimeError("the simulated lock is taken without waiting or not at all")
            return False
        self.held = True
        return True

    def release(self) -> None:
        self.held = False
        self._pause()


class Credentials:
    """One replica's configuration, its loader and the daemon's throttle in front, as
    ``load_configuration`` leaves them for a kubeconfig with an exec or OIDC user."""

    def __init__(
        self,
        loop: SimLoop,
        rng: random.Random,
        issued: dict[str, float],
        name: str,
        alive: Callable[[], bool],
        provider: Provider | None = None,
    ) -> None:
        self._loop, self._rng, self._issued, self._name, self._alive = loop, rng, issued, name, alive
        self._provider = provider
        self.failed_at: float | None = None  # when a renewal last failed (the provider down)
        self._serials = itertools.count(1)
        self._lifetime = rng.uniform(*LIFETIME)
        self._renewal: tuple[float, str] | None = None  # the plugin's renewal under way: when it ends, its token
        self._calls: dict[int, bool] = {}  # hook calls under way -> whether another overlapped it
        self.configuration = _Configuration(self._pause)
        self.token = self._issue()
        self._set_config(self.configuration)
        self.throttle = ThrottledRefresh(
            self.configuration.refresh_api_key_hook, every=EVERY, clock=self._clock, lock=_Lock(self._pause)
        )
        self.configuration.refresh_api_key_hook = self.throttle

    def _pause(self, seconds: float | None = None) -> None:
        """A yield point: the thread parks, mostly to go on at once (at the seed's choice among the
        ready), sometimes descheduled for a few milliseconds (a busy host), so that two threads'
        steps interleave across their other threads' ends too."""
        if seconds is None:
            seconds = 0.0 if self._rng.random() < 0.8 else self._rng.uniform(0.0, PREEMPTED)
        self._loop.pause(seconds)
        if not self._alive():  # the process is gone: nothing after this point happens
            raise HandoffGone

    def _clock(self) -> float:
        self._pause()
        return self._loop.time()

    def _issue(self) -> str:
        token = f"{self._name}-t{len(self._issued)}"
        self._issued[token] = self._loop.time() + self._lifetime
        return token

    def _set_config(self, configuration: Any) -> None:
        """``KubeConfigLoader._set_config``: the token, and a fresh closure of the loader's hook."""
        configuration.api_key["BearerToken"] = f"Bearer {self.token}"

        def _refresh_api_key(configuration: Any) -> None:
            now = self._loop.time()
            if self._issued[self.token] - now < MARGIN:
                # The exec plugin (or the OIDC refresh) runs. Like kubelogin's or a cloud's plugin, it
                # keeps one renewal at a time behind its token cache's lock: a second run waits for the
                # first and returns the same token, at the same moment.
                if self._renewal is None or self._renewal[0] <= now:
                    failure = None if self._provider is None else self._provider.failure(now)
                    if failure is not None:  # as the OIDC or GCP refresh raises: no token, nothing installed
                        self.failed_at = now
                        self._pause(self._rng.uniform(0.001, 0.05))
                        raise failure
                    self._renewal = (now + self._rng.uniform(*RENEWAL), self._issue())
                done, token = self._renewal
                self._pause(done - now)
                self.token = token
            self._set_config(configuration)

        configuration.refresh_api_key_hook = _refresh_api_key

    def request(self) -> tuple[str, bool, float]:
        """What one request sends, as the client gets it: the token after the hook, whether the hook ran
        alone (no other request of this replica inside it at any moment of this one), and when it began;
        ``NoCredential`` when the hook raised (the provider down)."""
        began = self._loop.time()
        call = next(self._serials)
        for other in self._calls:
            self._calls[other] = True
        self._calls[call] = bool(self._calls)
        try:
            configuration = self.configuration
            if configuration.refresh_api_key_hook is not None:
                configuration.refresh_api_key_hook(configuration)
        except (ConfigException, ConnectionRefusedError) as exc:
            raise NoCredential(exc) from exc
        finally:
            overlapped = self._calls.pop(call)
        return self.configuration.api_key["BearerToken"].removeprefix("Bearer "), not overlapped, began

    def held_back(self, began: float) -> bool:
        """Whether a request whose hook began at ``began`` may have found the throttle not due after a
        renewal that failed: ``ThrottledRefresh`` sets its next check ``EVERY`` on before it runs the hook,
        and keeps it when the hook raises, so the credential in force goes out until then."""
        return self.failed_at is not None and began < self.failed_at + EVERY

    def expired(self, token: str, at: float | None = None) -> bool:
        return self._issued[token] <= (self._loop.time() if at is None else at)

    @property
    def expiry(self) -> float:
        """When the newest token this replica's loader holds expires."""
        return self._issued[self.token]
