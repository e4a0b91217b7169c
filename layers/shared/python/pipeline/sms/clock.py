"""Times as the SMS journal stores them, and the clock tests advance.

Fixed-width UTC ISO strings, so they compare and sort as strings (the `by_state` index sorts on one).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime(_TIME_FORMAT)


def parse_iso(text: str) -> datetime:
    return datetime.strptime(text, _TIME_FORMAT).replace(tzinfo=UTC)


# The first `strptime` imports the standard library's `_strptime` and compiles the format's
# pattern: done at the import, with a function's init (`pipeline.aws`), not by its first record.
parse_iso(iso(datetime(2000, 1, 1, tzinfo=UTC)))


class Clock:
    """The wall clock, with an offset tests advance to expire leases, backoffs and deadlines.

    Tests may stop it, so time moves by `advance` alone: a test a second before a boundary is not
    carried over it by a slow machine, and a replayed sequence gets the same stamps.
    """

    def __init__(self) -> None:
        self.offset = timedelta()
        self.stopped_at: datetime | None = None

    def now(self) -> datetime:
        return (self.stopped_at or datetime.now(UTC)) + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)

    def stop(self, at: datetime) -> None:
        self.stopped_at = at

    def reset(self) -> None:
        """The wall clock again, with no offset."""
        self.offset = timedelta()
        self.stopped_at = None


CLOCK = Clock()
