"""No call that cannot be taken back unless the invocation has the time to make it and record it.

Telegram has no idempotency key: a `sendMessage` it accepted stays sent, and its record (the
idempotency record, the bot's journal entry of the call) is written after its answer. An
invocation that ran out of time between the two was retried and sent the message again (`python
-m local chaos --seed 5`, `autoreply` at 6 s: 2 replies twice in 745). So such a call is not
started with less than its own timeout plus `RECORD_SECONDS` left: the record is retried by a
fresh invocation instead (a retry, never a second message). A process killed in that window (the
round trip and one write) still sends twice: at least once, by design.

`pipeline.bot_api.BotApi` (one call per record) asks before each call; the registry refuses a
consumer using it with a timeout that would not leave `needed(...)` (`least_timeout_seconds`) to
a batch's last record after the others' pacing (`least_batch_timeout_seconds`). The bot engine's
journaled calls do not ask: a user's handler may take its time before its last call, and a step
refused every time would end in the DLQ (`pipeline.telegram_bot.calls` keeps its window).

The same margin bounds a wait: the pacing (`pipeline.pacing`) sleeps only as long as it leaves
a call and its record the time (`can_wait`), and hands the record back to its queue otherwise.

The worker runtime opens each invocation (`invocation(context)`); outside one (a test, a script)
nothing is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pipeline.errors import TransientError

# Time for the record after the call: one DynamoDB write, and the worker's answer.
RECORD_SECONDS = 3.0

_remaining_millis: Callable[[], int] | None = None


@contextmanager
def invocation(context: Any) -> Iterator[None]:
    """While a handler runs: `context.get_remaining_time_in_millis` is the time left."""
    global _remaining_millis
    _remaining_millis = getattr(context, "get_remaining_time_in_millis", None)
    try:
        yield
    finally:
        _remaining_millis = None


def needed(call_seconds: float) -> float:
    """The least time left for a call of `call_seconds` at most: it, then its record."""
    return call_seconds + RECORD_SECONDS


def time_left() -> float | None:
    """Seconds left in the open invocation; None outside one."""
    return None if _remaining_millis is None else _remaining_millis() / 1000


def can_wait(seconds: float, call_seconds: float) -> bool:
    """Whether the invocation may sleep `seconds` and still make a call of `call_seconds` and
    record it (`needed`, the one margin); outside an invocation, always. `pipeline.pacing` hands
    a record back instead of a wait it may not make."""
    left = time_left()
    return left is None or left - seconds >= needed(call_seconds)


class NotStarted(TransientError):
    """A call not started for lack of time: nothing was sent (a consumer that advanced in this
    invocation may hand the rest back uncounted, `functions/broadcast`)."""


def require(call_seconds: float, what: str) -> None:
    """NotStarted, before `what` is called, when the invocation could not finish it and record it."""
    if _remaining_millis is None:
        return
    left = _remaining_millis() / 1000
    if left < needed(call_seconds):
        raise NotStarted(
            f"{what} not started: {left:.1f}s left in this invocation, {needed(call_seconds):.0f}s "
            "needed to make it and record it; a fresh invocation makes it"
        )
