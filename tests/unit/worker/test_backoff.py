"""backoff_seconds: exponential growth, a cap, and equal jitter within [cap/2, cap]."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.registry import RetryPolicy
from pipeline.worker import backoff_seconds

POLICY = RetryPolicy(max_receive_count=10, base_delay_seconds=2, max_delay_seconds=120)


class _Extreme(random.Random):
    """A random source that always draws the lowest or the highest jitter."""

    def __init__(self, highest: bool) -> None:
        super().__init__()
        self.highest = highest

    def uniform(self, a: float, b: float) -> float:
        return b if self.highest else a


@pytest.mark.parametrize(
    ("receive_count", "cap"),
    [(1, 2), (2, 4), (3, 8), (4, 16), (5, 32), (6, 64), (7, 120), (8, 120), (60, 120)],
)
def test_cap_doubles_per_attempt_until_the_maximum(receive_count: int, cap: int) -> None:
    assert backoff_seconds(POLICY, receive_count, _Extreme(highest=True)) == cap
    assert backoff_seconds(POLICY, receive_count, _Extreme(highest=False)) == math.ceil(cap / 2)


@given(
    base=st.integers(min_value=0, max_value=600),
    extra=st.integers(min_value=0, max_value=3_600),
    receive_count=st.integers(min_value=0, max_value=10_000),
    seed=st.integers(),
)
def test_delay_stays_within_half_cap_and_cap(base: int, extra: int, receive_count: int, seed: int) -> None:
    policy = RetryPolicy(base_delay_seconds=base, max_delay_seconds=base + extra)
    cap = min(policy.max_delay_seconds, base * 2 ** max(receive_count - 1, 0))
    delay = backoff_seconds(policy, receive_count, random.Random(seed))
    assert math.ceil(cap / 2) <= delay <= cap


def test_jitter_spreads_retries_of_the_same_attempt() -> None:
    rng = random.Random(7)
    delays = [backoff_seconds(POLICY, 7, rng) for _ in range(200)]
    assert min(delays) >= 60 and max(delays) <= 120
    # Equal jitter: spread over the upper half, not one value every record retries at together.
    assert len(set(delays)) > 30
    assert min(delays) < 70 and max(delays) > 110


def test_default_random_source_is_used_when_none_given() -> None:
    assert 60 <= backoff_seconds(POLICY, 9) <= 120
