"""A consumer's own pause wait (`RetryPolicy.pause_seconds`) wins over the derived one."""

from __future__ import annotations

import dataclasses

import pytest

from pipeline.pause import PAUSE_SECONDS, pause_seconds
from pipeline.registry import RetryPolicy, by_name


def test_a_consumers_own_pause_wins_over_the_derived_wait_ordered_or_not() -> None:
    for name in ("store", "bot"):
        consumer = by_name(name)
        assert pause_seconds(consumer) >= PAUSE_SECONDS
        own = dataclasses.replace(consumer, retry=dataclasses.replace(consumer.retry, pause_seconds=3))
        assert pause_seconds(own) == 3


@pytest.mark.parametrize("seconds", [0, -1, 901])
def test_a_pause_sqs_could_not_delay_is_refused(seconds: int) -> None:
    with pytest.raises(ValueError, match="pause_seconds"):
        RetryPolicy(pause_seconds=seconds)
