"""The credential refresh hook runs at most once a second and stays in front of the loader's hook; in a pod,
the ServiceAccount token is read again as soon as the kubelet rewrites it. Both hooks are called from every
request thread at once: the races at the end hold threads at chosen points to force the interleavings."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pod_sweeper.kube.config import ThrottledRefresh, TokenFile


class _Configuration:
    refresh_api_key_hook: Any = None


def test_runs_once_per_interval_and_keeps_the_loaders_fresh_closure() -> None:
    runs: list[float] = []
    now = [100.0]

    def loader_hook(configuration: Any) -> None:
        runs.append(now[0])
        # Like the kubeconfig and in-cluster loaders: every run installs a new closure of itself.
        configuration.refresh_api_key_hook = lambda c: loader_hook(c)

    configuration = _Configuration()
    throttle = ThrottledRefresh(loader_hook, every=1.0, clock=lambda: now[0])
    configuration.refresh_api_key_hook = throttle
    for _ in range(50):
        configuration.refresh_api_key_hook(configuration)
    assert runs == [100.0]
    assert configuration.refresh_api_key_hook is throttle
    now[0] = 100.5
    configuration.refresh_api_key_hook(configuration)
    assert runs == [100.0]
    now[0] = 101.0
    configuration.refresh_api_key_hook(configuration)
    configuration.refresh_api_key_hook(configuration)
    assert runs == [100.0, 101.0]
    assert configuration.refresh_api_key_hook is throttle


class _Lock:
    """A lock a test holds on another thread's behalf, and that counts how it is asked for."""

    def __init__(self) -> None:
        self.held = False
        self.asked: list[bool] = []  # each acquire's ``blocking``

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        self.asked.append(blocking)
        if self.held:
            return False
        self.held = True
        return True

    def release(self) -> None:
        self.held = False


def test_a_thread_that_finds_the_lock_taken_sends_the_credential_in_force_without_waiting() -> None:
    """The ``lock`` seam (what tests/sim drives the request threads through): taken without waiting, and
    a thread that finds it taken returns at once, the loader's hook not run."""
    runs: list[str] = []

    def loader_hook(configuration: Any) -> None:
        runs.append("ran")
        configuration.refresh_api_key_hook = lambda c: loader_hook(c)

    lock = _Lock()
    configuration = _Configuration()
    throttle = ThrottledRefresh(loader_hook, every=1.0, clock=lambda: 100.0, lock=lock)
    configuration.refresh_api_key_hook = throttle
    lock.held = True  # another request thread is renewing
    throttle(configuration)
    assert runs == [] and lock.asked == [False]
    lock.held = False
    throttle(configuration)
    assert runs == ["ran"] and lock.asked == [False, False] and not lock.held
    assert configuration.refresh_api_key_hook is throttle


def _kubelet_writes(folder: Any, token: str, generation: int) -> None:
    """What the kubelet does to a projected volume: the files go into a new timestamped folder, then
    the ``..data`` symlink is swapped to it in one rename; ``token`` links through ``..data``."""
    import os

    data = folder / f"..2026_12_04_{generation}"
    data.mkdir()
    (data / "token").write_text(token)
    (folder / "..data_tmp").symlink_to(data.name)
    os.replace(folder / "..data_tmp", folder / "..data")
    if not (folder / "token").is_symlink():
        (folder / "token").symlink_to("..data/token")


def test_the_token_file_is_read_again_when_the_kubelet_rewrites_it_and_only_then(tmp_path: Any) -> None:
    class Configuration:
        api_key: dict[str, str] = {}

    configuration = Configuration()
    _kubelet_writes(tmp_path, "first", 1)
    hook = TokenFile(tmp_path / "token")
    hook(configuration)
    assert configuration.api_key["BearerToken"] == "bearer first"
    configuration.api_key["BearerToken"] = "left alone"
    hook(configuration)
    assert configuration.api_key["BearerToken"] == "left alone"  # the same file: not read again
    _kubelet_writes(tmp_path, "second\n", 2)
    hook(configuration)
    assert configuration.api_key["BearerToken"] == "bearer second"  # rotated: in use at once
    _kubelet_writes(tmp_path, "", 3)  # caught mid-write
    hook(configuration)
    assert configuration.api_key["BearerToken"] == "bearer second"
    (tmp_path / "..data").unlink()  # the volume is gone for a moment
    hook(configuration)
    assert configuration.api_key["BearerToken"] == "bearer second"


DEADLINE = 10.0  # seconds, on every wait below: a forced interleaving that does not happen fails, never hangs


def _wait(event: threading.Event, what: str) -> None:
    if not event.wait(DEADLINE):
        raise AssertionError(f"waited {DEADLINE} s for {what}")


def _start(name: str, call: Callable[[], None], errors: list[BaseException], done: threading.Event) -> threading.Thread:
    """``call`` in a thread named ``name`` (the stand-ins below tell the threads apart by it); ``done`` is set
    when it returns or raises, and what it raises lands in ``errors``."""

    def run() -> None:
        try:
            call()
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


def _join(*threads: threading.Thread) -> None:
    for thread in threads:
        thread.join(DEADLINE)
        assert not thread.is_alive(), f"thread {thread.name} still running after {DEADLINE} s"


class _PausingConfiguration:
    """A configuration that holds thread B between two reads of its hook attribute until thread A has put
    a ThrottledRefresh there: B checks the loader's fresh closure is not the throttle, then reads the
    attribute again to keep it, and gets the throttle itself."""

    def __init__(self, b_parked: threading.Event) -> None:
        self._hook: Any = None
        self._b_reads = 0
        self._b_parked, self._a_put_the_throttle_back = b_parked, threading.Event()
        self.credential = "from the loader"

    @property
    def refresh_api_key_hook(self) -> Any:
        if threading.current_thread().name == "B":
            self._b_reads += 1
            if self._b_reads == 2:
                self._b_parked.set()
                _wait(self._a_put_the_throttle_back, "A to put the throttle back in front")
        return self._hook

    @refresh_api_key_hook.setter
    def refresh_api_key_hook(self, hook: Any) -> None:
        self._hook = hook
        if threading.current_thread().name == "A" and isinstance(hook, ThrottledRefresh):
            self._a_put_the_throttle_back.set()


def test_two_threads_due_at_once_leave_the_loaders_hook_behind_the_throttle() -> None:
    """A slow renewal (an exec plugin taking longer than the interval): thread A is inside the loader's hook
    when thread B finds the hook due again. The hook must still be the loader's afterwards, never the
    throttle itself, else the credential is never renewed again (every request a 401 once it expires)."""
    runs: list[str] = []
    a_inside, release_a, b_parked_or_done, a_done = (threading.Event() for _ in range(4))

    def loader_hook(configuration: Any) -> None:
        name = threading.current_thread().name
        runs.append(name)
        if name == "A":
            a_inside.set()
            _wait(release_a, "the test to let A finish its renewal")
        configuration.credential = f"from {name}"
        # Like the kubeconfig loader: every run installs a new closure of itself.
        configuration.refresh_api_key_hook = lambda c: loader_hook(c)

    times = {"A": 100.0, "B": 102.0}  # B comes two intervals later, while A's renewal still runs
    configuration = _PausingConfiguration(b_parked_or_done)
    throttle = ThrottledRefresh(loader_hook, every=1.0, clock=lambda: times.get(threading.current_thread().name, 200.0))
    configuration.refresh_api_key_hook = throttle
    errors: list[BaseException] = []
    # Each thread calls the throttle as the client does once it has read the attribute (B's reads of it
    # are then only the throttle's own).
    a = _start("A", lambda: throttle(configuration), errors, a_done)
    _wait(a_inside, "A inside the loader's hook")
    b = _start("B", lambda: throttle(configuration), errors, b_parked_or_done)
    _wait(b_parked_or_done, "B to return, or to stop between its two reads of the hook")
    release_a.set()
    _join(a, b)
    assert errors == []
    assert configuration.refresh_api_key_hook is throttle

    configuration.refresh_api_key_hook(configuration)  # at 200.0: due again, in this thread
    me = threading.current_thread().name
    assert configuration.credential == f"from {me}", "the credential is no longer renewed"
    assert runs == ["A", me]  # B found A renewing and sent the credential in force


class _WatchedLock:
    """A lock that says when thread B arrives at it (B then waits there like any thread)."""

    def __init__(self, b_arrived: threading.Event) -> None:
        self._lock, self._b_arrived = threading.Lock(), b_arrived

    def __enter__(self) -> None:
        if threading.current_thread().name == "B":
            self._b_arrived.set()
        if not self._lock.acquire(timeout=DEADLINE):
            raise AssertionError(f"waited {DEADLINE} s for the token file's lock")

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


class _PausingKeys(dict[str, str]):
    """``configuration.api_key``, holding threads as they write the token: A, with the old token in hand,
    until B has come with the new one; B, once it has written it, until A has returned."""

    def __init__(self, a_has_the_old_token: threading.Event, b_arrived: threading.Event, a_done: threading.Event):
        super().__init__()
        self._a_has_the_old_token, self._b_arrived, self._a_done = a_has_the_old_token, b_arrived, a_done

    def __setitem__(self, key: str, value: str) -> None:
        name = threading.current_thread().name
        if name == "A":
            self._a_has_the_old_token.set()
            _wait(self._b_arrived, "B with the rotated token")
        super().__setitem__(key, value)
        if name == "B":
            self._b_arrived.set()
            _wait(self._a_done, "A to return")


def test_a_rotation_between_two_threads_never_leaves_the_old_token_in_use(tmp_path: Path) -> None:
    """Thread A reads the token; the kubelet rotates it; thread B reads the new one and both write. The
    token in use afterwards is the new one, and the hook knows it is (else, having recorded the new file as
    seen beside the old token, it would send the old one until the next rotation: 401s once it is revoked)."""
    a_has_the_old_token, b_arrived, a_done, b_done = (threading.Event() for _ in range(4))

    class Configuration:
        api_key = _PausingKeys(a_has_the_old_token, b_arrived, a_done)

    configuration = Configuration()
    _kubelet_writes(tmp_path, "first", 1)
    # B waiting for the lock A holds counts as its arrival too: A then writes, and B reads after it.
    hook = TokenFile(tmp_path / "token", lock=_WatchedLock(b_arrived))
    errors: list[BaseException] = []
    a = _start("A", lambda: hook(configuration), errors, a_done)
    _wait(a_has_the_old_token, "A with the first token in hand")
    _kubelet_writes(tmp_path, "second", 2)
    b = _start("B", lambda: hook(configuration), errors, b_done)
    _join(a, b)
    assert errors == []
    hook(configuration)
    assert configuration.api_key["BearerToken"] == "bearer second", "the old token stays in use"
