"""The CRMs' API rate limits, enforced by their stand-ins when asked (`fake.enforce_rate_limit()`;
off by default, so tests and `make local` that call fast are not refused).

Both are a leaky bucket here (`pipeline.crm.limits`, the documented figures): each API request
adds one, `per_second` drain a second, and a request that would take the bucket past `burst` is
refused, as the vendor refuses it: Bitrix24 with HTTP 503 `QUERY_LIMIT_EXCEEDED`, amoCRM with
429. The clock is injectable, so a test or a replay can drive time instead of waiting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.crm.limits import (
    AMOCRM_BURST,
    AMOCRM_REQUESTS_PER_SECOND,
    BITRIX24_BURST,
    BITRIX24_REQUESTS_PER_SECOND,
)


@dataclass(frozen=True)
class RateLimit:
    per_second: float
    burst: int
    status: int  # how the vendor refuses a request past the limit


VENDOR_LIMITS = {
    "bitrix24": RateLimit(BITRIX24_REQUESTS_PER_SECOND, BITRIX24_BURST, 503),
    "amocrm": RateLimit(AMOCRM_REQUESTS_PER_SECOND, AMOCRM_BURST, 429),
}


class LeakyBucket:
    """`admit()`: True (the request counted) or False (refused: the bucket is full)."""

    def __init__(self, limit: RateLimit, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.clock = clock
        self.level = 0.0
        self.accepted = 0
        self.refused = 0
        self._last: float | None = None
        self._lock = threading.Lock()

    def admit(self) -> bool:
        with self._lock:
            now = self.clock()
            if self._last is not None:
                self.level = max(0.0, self.level - (now - self._last) * self.limit.per_second)
            self._last = now
            if self.level + 1 > self.limit.burst:
                self.refused += 1
                return False
            self.level += 1
            self.accepted += 1
            return True
