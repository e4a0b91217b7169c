"""`pipeline.deadline`: a call that cannot be taken back starts only with the time to make it and
record it, and only an open invocation's clock counts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pipeline import deadline
from pipeline.errors import TransientError


def context_with(millis: int) -> SimpleNamespace:
    return SimpleNamespace(get_remaining_time_in_millis=lambda: millis)


def test_a_call_starts_only_with_its_timeout_and_the_records_time_left() -> None:
    just_enough = int(deadline.needed(8.0) * 1000)
    with deadline.invocation(context_with(just_enough)):
        deadline.require(8.0, "telegram sendMessage")
    with deadline.invocation(context_with(just_enough - 1)), pytest.raises(TransientError) as refused:
        deadline.require(8.0, "telegram sendMessage")

    assert refused.value.reason.startswith("telegram sendMessage not started: 11.0s left in this invocation")


def test_outside_an_invocation_and_after_one_nothing_is_refused() -> None:
    deadline.require(8.0, "a script's call")
    with deadline.invocation(context_with(0)):
        pass

    deadline.require(8.0, "the next call, after the invocation ended")
