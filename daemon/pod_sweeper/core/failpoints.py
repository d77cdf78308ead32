"""Named failpoints, for the chaos suite: places in the daemon where a test can make the process die
(SIGKILL of itself), raise, or stall, to prove the invariants hold at exactly that moment.

Off unless the ``failpoints`` setting (``POD_SWEEPER_FAILPOINTS``) names some, e.g. ``after_claim=kill``
or ``after_answer=stall:5,listener=raise``; an action may be limited to the n-th hit with ``@n``
(``after_answer=kill@3``). The setting is read like every other one (a value that does not parse is a
configuration error: one line, exit 2), and ``arm`` is called once the daemon starts, which logs a
WARNING and sets ``pod_sweeper_failpoints_armed``. The points:

- ``after_claim``: the claim transaction committed, no DELETE sent yet;
- ``after_answer``: the API answered, the result not yet recorded;
- ``during_record``: the results' statement ran, its transaction not yet committed;
- ``listener``: a notification arrived on the LISTEN connection.

Unarmed, ``hit()`` is one dictionary lookup on an empty dict.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

from loguru import logger

POINTS = ("after_claim", "after_answer", "during_record", "listener")
ACTIONS = ("kill", "raise", "stall")


class FailpointError(RuntimeError):
    """Raised by a failpoint set to ``raise``."""


@dataclass
class Action:
    kind: str  # kill, raise, stall
    seconds: float = 0.0  # a stall's length
    on_hit: int | None = None  # only the n-th hit acts (None: every one)
    hits: int = 0


def parse(spec: str) -> dict[str, Action]:
    """The failpoints ``spec`` arms; ValueError naming the first item that does not read."""
    actions: dict[str, Action] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, action = item.partition("=")
        action, _, nth = action.partition("@")
        kind, _, seconds = action.partition(":")
        if name not in POINTS or kind not in ACTIONS:
            raise ValueError(
                f"cannot read {item!r}: the points are {', '.join(POINTS)}; the actions {', '.join(ACTIONS)}"
            )
        try:
            actions[name] = Action(kind, float(seconds or 0), int(nth) if nth else None)
        except ValueError:
            raise ValueError(
                f"cannot read {item!r}: a stall takes seconds (stall:5), @ a hit number (kill@3)"
            ) from None
    return actions


_ARMED: dict[str, Action] = {}


def arm(spec: str) -> list[str]:
    """Arm the failpoints ``spec`` names (and disarm the rest); the names armed."""
    _ARMED.clear()
    _ARMED.update(parse(spec))
    return sorted(_ARMED)


def hit(name: str) -> None:
    """Pass the failpoint ``name``: does nothing unless it is armed."""
    action = _ARMED.get(name)
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
