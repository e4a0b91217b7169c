"""Pacing of the Bot API messages the sending consumers (autoreply, bot) make: 429s are the exception.

Telegram's limits (https://core.telegram.org/bots/faq, `infra.limits`): about 30 messages a second
for the whole bot, one a second in a chat, 20 a minute in a group; past them it answers 429 with
`retry_after`. A consumer runs in at most `max_concurrency` Lambda environments at once (its
event source's MaximumConcurrency), each handling one batch at a time. So the bot's budget is
split between them, in one place: the registry gives each sending consumer
(`sends_to_telegram`) the environment variable `TELEGRAM_SENDS_PER_SECOND` =
`HEADROOM x TELEGRAM_MESSAGES_PER_SECOND / max_concurrency` (`send_rate`, derived by `Consumer`
from its `max_concurrency`), and each environment's `Pacer` spaces its message sends by
that rate: all of them together stay under the global limit however the load falls, with no
shared state to pay for (a DynamoDB token bucket would cost a conditional write per message and
a hot key the whole bot writes to). The price: a consumer running in fewer environments than
its `max_concurrency` sends slower than it could (one environment at 24/5 = 4.8 messages a
second); a batch of 10 takes about 2 s.

The pacer also spaces messages to one chat (1 s; a group 3 s, 20 a minute). Within one
environment that is exact; across environments it holds for the bot consumer (its FIFO queue
gives a chat's records to one environment at a time) and for autoreply only as far as a
chat's updates land in one batch (Telegram tolerates a short burst in a chat). A message that
would wait longer than `MAX_WAIT_SECONDS` for its chat is not sent now: `TransientError` with
the wait as `retry_after`, so the record comes back when the chat is free instead of holding
the whole batch (and its Lambda timeout).

Only messages count (`send*` but `sendChatAction`, `forward*`, `copy*`): answering a callback
query, editing and reading are not paced.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from pipeline.errors import TransientError

# Telegram's documented limits (the Bot FAQ; infra.limits records and dates them).
TELEGRAM_MESSAGES_PER_SECOND = 30
TELEGRAM_CHAT_INTERVAL_SECONDS = 1.0
TELEGRAM_GROUP_MESSAGES_PER_MINUTE = 20
# The share of the global limit the consumers' environments may use together: "30 or so" is
# not a contract, and a retried record's message may come on top.
HEADROOM = 0.8
SEND_RATE_ENV = "TELEGRAM_SENDS_PER_SECOND"
# Longer than this for one chat, and the record is retried later instead.
MAX_WAIT_SECONDS = 5.0
_NOT_MESSAGES = frozenset({"sendchataction"})


def send_rate(max_concurrency: int) -> float:
    """Messages a second one of `max_concurrency` environments may send."""
    return round(HEADROOM * TELEGRAM_MESSAGES_PER_SECOND / max_concurrency, 3)


def paced_environment(max_concurrency: int) -> dict[str, str]:
    """The registry's environment entry for a consumer that sends Telegram messages."""
    return {SEND_RATE_ENV: str(send_rate(max_concurrency))}


def is_message(method: str) -> bool:
    """Whether a Bot API method sends a message (what Telegram's limits count)."""
    name = method.lower()
    return name.startswith(("send", "forward", "copy")) and name not in _NOT_MESSAGES


def chat_interval(chat_id: object) -> float:
    """The least spacing of messages to one chat: a group's (negative id) is 60/20 s."""
    try:
        numeric = int(str(chat_id))
    except ValueError:  # "@channel": a channel, counted like a group
        numeric = -1
    return 60.0 / TELEGRAM_GROUP_MESSAGES_PER_MINUTE if numeric < 0 else TELEGRAM_CHAT_INTERVAL_SECONDS


class Pacer:
    """Spaces one environment's messages: `rate` a second overall, `chat_interval` per chat.

    `reserve(chat_id)` books the next slot and returns how long to wait for it (the caller
    sleeps, `time.sleep` or `asyncio.sleep`); `wait` does both. The clock is injectable, so a
    test drives it without real time passing.
    """

    def __init__(
        self,
        rate: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        max_wait: float = MAX_WAIT_SECONDS,
    ) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.interval = 1.0 / rate
        self.clock = clock
        self.sleep = sleep
        self.max_wait = max_wait
        self._next = 0.0
        self._chats: dict[str, float] = {}
        self._lock = threading.Lock()

    def reserve(self, chat_id: object) -> float:
        key = None if chat_id is None else str(chat_id)  # no chat named: the global rate only
        with self._lock:
            now = self.clock()
            at = max(now, self._next, self._chats.get(key, now) if key else now)
            if at - now > self.max_wait:
                raise TransientError(
                    f"telegram pacing: this chat's next message is due in {at - now:.0f} s", at - now
                )
            self._next = at + self.interval
            if key:
                self._chats[key] = at + chat_interval(chat_id)
            if len(self._chats) > 1000:  # forget chats whose spacing has passed
                self._chats = {chat: due for chat, due in self._chats.items() if due > now}
            return at - now

    def wait(self, chat_id: object) -> None:
        delay = self.reserve(chat_id)
        if delay > 0:
            self.sleep(delay)


_shared: Pacer | None = None
_shared_lock = threading.Lock()


def shared() -> Pacer | None:
    """This environment's pacer, or None when its consumer is not paced (no SEND_RATE_ENV)."""
    global _shared
    raw = os.environ.get(SEND_RATE_ENV, "").strip()
    if not raw:
        return None
    with _shared_lock:
        if _shared is None or abs(_shared.interval - 1.0 / float(raw)) > 1e-9:
            _shared = Pacer(float(raw))
        return _shared
