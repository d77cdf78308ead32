"""Named failpoints, for the chaos suite: places in the daemon where a test can make the process die
(SIGKILL of itself), raise, or stall, to prove the invariants hold at exactly that moment.

Off unless ``POD_SWEEPER_FAILPOINTS`` is set, e.g. ``after_claim=kill`` or
``after_answer=stall:5,listener=raise``; an action may be limited to the n-th hit with ``@n``
(``after_answer=kill@3``). The points:

- ``after_claim``: the claim transaction committed, no DELETE sent yet;
- ``after_answer``: the API answered, the result not yet recorded;
- ``during_finalize``: the result statement ran, its transaction not yet committed;
- ``listener``: a notification arrived on the LISTEN connection.

With the variable unset, ``hit()`` is one dictionary lookup on an empty dict.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

from loguru import logger

ENV = "POD_SWEEPER_FAILPOINTS"
POINTS = ("after_claim", "after_answer", "during_finalize", "listener")


class FailpointError(RuntimeError):
    """Raised by a failpoint set to ``raise``."""


@dataclass
class _Action:
    kind: str  # kill, raise, stall
    seconds: float = 0.0
    on_hit: int | None = None
    hits: int = 0


def _parse(spec: str) -> dict[str, _Action]:
    actions: dict[str, _Action] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, action = item.partition("=")
        action, _, nth = action.partition("@")
        kind, _, seconds = action.partition(":")
        if name not in POINTS or kind not in ("kill", "raise", "stall"):
            raise ValueError(f"{ENV}: cannot read {item!r}; points are {', '.join(POINTS)}, actions kill/raise/stall")
        actions[name] = _Action(kind, float(seconds or 0), int(nth) if nth else None)
    return actions


_ACTIVE: dict[str, _Action] = _parse(os.environ.get(ENV, ""))


def hit(name: str) -> None:
    """Pass the failpoint ``name``: does nothing unless a test armed it."""
    action = _ACTIVE.get(name)
    if action is None:
        return
    action.hits += 1
    if action.on_hit is not None and action.hits != action.on_hit:
        return
    logger.warning("failpoint {name}: {kind}", name=name, kind=action.kind)
    if action.kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action.kind == "raise":
        raise FailpointError(f"failpoint {name}")
    else:
        time.sleep(action.seconds)  # a stall freezes the whole process, as a real freeze would
