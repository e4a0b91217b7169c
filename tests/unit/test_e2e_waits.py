"""The e2e tests' progress-bound wait (`tests.e2e.support.wait_while_advancing`): a slow run passes,
however long it takes, and a stuck one fails. The 10,000-chat broadcast failed in CI on a deadline
in seconds while it was still sending (the machine's pace, not the pipeline's), so its waits end on
a stall instead; this is what makes that wait able to fail.
"""

from __future__ import annotations

import itertools
import time

import pytest

from tests.e2e.support import wait_while_advancing


def test_work_that_keeps_advancing_is_waited_for_past_the_stall_window() -> None:
    counter = itertools.count()
    done_after = 40  # polls, each advancing the count: far longer than the stall window in all
    started = time.monotonic()
    result = wait_while_advancing(
        lambda: (next(counter) >= done_after) or None,
        lambda: time.monotonic_ns(),  # moves on every poll
        stalled_after=0.05,
        what="the slow work",
        interval=0.005,
    )
    assert result is True
    assert time.monotonic() - started >= done_after * 0.005


def test_work_that_stops_advancing_fails_naming_what_was_awaited_and_how_far_it_got() -> None:
    with pytest.raises(AssertionError, match=r"no progress for 0.1s \(at 7\) waiting for the stuck work"):
        wait_while_advancing(lambda: None, lambda: 7, stalled_after=0.1, what="the stuck work", interval=0.01)


def test_work_that_advances_then_stalls_fails_once_it_stalls() -> None:
    counts = iter([1, 2, 3])

    def progress() -> int:
        return next(counts, 3)

    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"\(at 3\)"):
        wait_while_advancing(lambda: None, progress, stalled_after=0.2, what="the work", interval=0.01)
    assert time.monotonic() - started >= 0.2
