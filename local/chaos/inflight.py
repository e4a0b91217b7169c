"""What each worker process holds, so that a kill names the events it left undecided.

A worker's `busy` status message lists the event ids of the batch it took (`local.worker_process`);
its `invocation` message says the batch is done. A kill in between leaves those events' outcome
unknown to the pipeline: a Bot API call the killed worker had made may have reached Telegram.
The checker (`local.chaos.checks`) takes a duplicate reply for such an event as Telegram's
at-least-once window, and only with this evidence. A timeout is such evidence only for the
consumers in `TIMEOUT_IN_WINDOW`: the others' calls start only with the time to make and record
them (`pipeline/deadline.py`), so a duplicate after their timeout stays a violation.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

# The bot engine's journaled calls do not ask the invocation's deadline (`pipeline/deadline.py`:
# a slow handler's step would be refused every time): a bot worker timing out while it holds an
# update leaves its calls' outcome unknown, as a kill does (the long run at 7941330: a 'thanks'
# sent, the invocation timed out before its record, the replayed step sent it again).
# A `broadcast` worker timing out mid-call leaves that chat's claim without an outcome (`unknown`).
TIMEOUT_IN_WINDOW = frozenset({"bot", "broadcast"})


@dataclass(frozen=True)
class Kill:
    """A worker process the campaign killed (or whose invocation timed out: `cause`), when, and
    the events it held then."""

    time: float
    worker: str
    function: str
    events: tuple[str, ...]
    cause: str = "killed"


class InFlight:
    """A status listener (`Runtime.on_status`) for every consumer: per worker, its batch in hand."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holding: dict[str, tuple[str, ...]] = {}
        self.kills: list[Kill] = []

    def listener(self, message: dict[str, Any]) -> None:
        worker = message.get("worker")
        if not isinstance(worker, str):
            return
        with self._lock:
            if message.get("event") == "busy":
                self._holding[worker] = tuple(e for e in message.get("events") or () if isinstance(e, str))
            elif message.get("event") == "invocation":
                held = self._holding.pop(worker, ())
                function = message.get("function")
                if message.get("timed_out") and held and function in TIMEOUT_IN_WINDOW:
                    self.kills.append(Kill(time.time(), worker, function, held, cause="timed out"))

    def holding(self, worker: str) -> tuple[str, ...]:
        """The events `worker`'s batch in hand holds (none when it is idle)."""
        with self._lock:
            return self._holding.get(worker, ())

    def killed(self, worker: str, function: str) -> None:
        """Record a kill of `worker` (a process of `function`) with the batch it held."""
        with self._lock:
            events = self._holding.pop(worker, ())
            self.kills.append(Kill(time.time(), worker, function, events))

    def undecided(self) -> dict[str, list[str]]:
        """Per function, each event a killed worker of it held, once per kill: their effects'
        outcome was unknown to the pipeline (`local.chaos.checks.Observed.undecided`)."""
        found: dict[str, list[str]] = {}
        with self._lock:
            for kill in self.kills:
                found.setdefault(kill.function, []).extend(kill.events)
        return found
