"""Telegram's send limits, enforced by the Telegram stand-in when asked (`TelegramFake(limits=...)`,
or `POST /_limits {"enforce": true}` on a running one; off by default, so tests and `make local`
that send fast are not refused).

What it counts are messages (`pipeline.pacing.is_message`) the stand-in would accept otherwise;
past a limit it answers 429 "Too Many Requests: retry after N" with `parameters.retry_after`:

- the bot's global rate: more than `per_second` messages within any one second;
- one chat: a message within `chat_interval` seconds of the chat's previous one (a private chat);
- one group (a negative chat id): more than `group_per_minute` within any 60 seconds;
- a message sent with `allow_paid_broadcast` is outside the bot's free rate (Telegram: "up to 1000
  messages per second, ignoring broadcasting limits"): paid messages are counted against
  `paid_per_second` instead, the chat's and the group's spacing still apply.

The clock is injectable (`clock`), so a test can drive time instead of depending on the
machine's speed. `counts()` (and `GET /_limits`) say how many messages were accepted in each
whole second of the clock, and how many were refused with 429, by limit.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pipeline.pacing import (
    TELEGRAM_CHAT_INTERVAL_SECONDS,
    TELEGRAM_GROUP_MESSAGES_PER_MINUTE,
    TELEGRAM_MAX_MESSAGES_PER_SECOND,
    TELEGRAM_MESSAGES_PER_SECOND,
)

WINDOW_SECONDS = 1.0
GROUP_WINDOW_SECONDS = 60.0


@dataclass(frozen=True)
class SendLimits:
    per_second: int = TELEGRAM_MESSAGES_PER_SECOND
    chat_interval: float = TELEGRAM_CHAT_INTERVAL_SECONDS
    group_per_minute: int = TELEGRAM_GROUP_MESSAGES_PER_MINUTE
    paid_per_second: int = TELEGRAM_MAX_MESSAGES_PER_SECOND


class SendLimiter:
    """The limits' bookkeeping: `admit(chat_id, paid)` is None (accepted, counted) or the seconds to wait."""

    def __init__(self, limits: SendLimits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.clock = clock
        self._lock = threading.Lock()
        self._recent: deque[float] = deque()  # accepted messages within the last second
        self._paid: deque[float] = deque()  # accepted paid messages within the last second
        self._chats: dict[str, float] = {}  # a private chat's last accepted message
        self._groups: dict[str, deque[float]] = {}  # a group's accepted messages within 60 s
        self.per_second: Counter[int] = Counter()  # accepted messages by whole second
        self.refused: Counter[str] = Counter()  # 429s by limit

    def admit(self, chat_id: Any, paid: bool = False) -> float | None:
        key = str(chat_id)
        group = key.startswith(("-", "@"))
        recent, limit = (
            (self._paid, self.limits.paid_per_second) if paid else (self._recent, self.limits.per_second)
        )
        with self._lock:
            now = self.clock()
            while recent and recent[0] <= now - WINDOW_SECONDS:
                recent.popleft()
            if len(recent) >= limit:
                self.refused["paid" if paid else "global"] += 1
                return recent[0] + WINDOW_SECONDS - now
            if group:
                sent = self._groups.setdefault(key, deque())
                while sent and sent[0] <= now - GROUP_WINDOW_SECONDS:
                    sent.popleft()
                if len(sent) >= self.limits.group_per_minute:
                    self.refused["group"] += 1
                    return sent[0] + GROUP_WINDOW_SECONDS - now
                sent.append(now)
            else:
                last = self._chats.get(key)
                if last is not None and now - last < self.limits.chat_interval:
                    self.refused["chat"] += 1
                    return last + self.limits.chat_interval - now
                self._chats[key] = now
            recent.append(now)
            self.per_second[math.floor(now)] += 1
            return None

    def counts(self) -> dict[str, Any]:
        with self._lock:
            return {
                "accepted": sum(self.per_second.values()),
                "max_per_second": max(self.per_second.values(), default=0),
                "per_second": {str(second): n for second, n in sorted(self.per_second.items())},
                "refused": dict(self.refused),
            }
