"""`pipeline.deadline`: a call that cannot be taken back starts only with the time to make it and
record it, and only an open invocation's clock counts."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline import deadline, pacing
from pipeline.bot_api import BotApi
from pipeline.errors import TransientError
from pipeline.http import JsonHttpClient, JsonResponse
from pipeline.registry import by_name


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


class FakeClock:
    """Invocation time: the pacer sleeps on it, Telegram's answers and the records advance it."""

    def __init__(self) -> None:
        self.now = 0.0

    def advance(self, seconds: float) -> None:
        self.now += max(0.0, seconds)


def reply_batch(
    monkeypatch: pytest.MonkeyPatch, timeout: float, chats: list[int], answers: list[float]
) -> list[int]:
    """The chats of the batch's records whose reply was refused for time: each record is one
    `BotApi.call` (paced as autoreply's environments are, then Telegram answering after its
    `answers` seconds), then its record written (RECORD_WRITE_SECONDS), all on one clock."""
    clock = FakeClock()

    def telegram(self: Any, url: str, payload: Any, headers: Any = None) -> JsonResponse:
        clock.advance(answers.pop(0))
        return JsonResponse(200, {"ok": True, "result": {"message_id": 1}})

    monkeypatch.setattr(JsonHttpClient, "post", telegram)
    autoreply = by_name("autoreply")
    pacer = pacing.Pacer(
        pacing.send_rate(autoreply.max_concurrency), clock=lambda: clock.now, sleep=clock.advance
    )
    api = BotApi(TOKEN, base_url="http://telegram.invalid", pacer=pacer)
    context = SimpleNamespace(get_remaining_time_in_millis=lambda: int((timeout - clock.now) * 1000))
    refused: list[int] = []
    with deadline.invocation(context):
        for chat in chats:
            try:
                api.call("sendMessage", {"chat_id": chat, "text": "Hi!"})
            except TransientError:
                refused.append(chat)
                continue
            clock.advance(RECORD_WRITE_SECONDS)
    return refused


TOKEN = "123456:" + "A" * 35
# One conditional write of the idempotency record, generously.
RECORD_WRITE_SECONDS = 0.1


@given(
    chats=st.lists(st.sampled_from([11, 12, 13]), min_size=1, max_size=by_name("autoreply").batch_size),
    answers=st.lists(
        st.floats(min_value=0.0, max_value=1.0 - RECORD_WRITE_SECONDS, exclude_max=True),
        min_size=by_name("autoreply").batch_size,
        max_size=by_name("autoreply").batch_size,
    ),
)
@settings(max_examples=300, deadline=None)
def test_at_the_least_batch_timeout_no_reply_of_a_batch_is_refused_for_time(
    chats: list[int], answers: list[float]
) -> None:
    """Generated batches of autoreply's size, private chats mixed or one, Telegram answering
    within a chat's pacing second: at the registry's least timeout every reply is sent (seed 7
    dead-lettered 18 messages refused for time when the timeout ignored the batch's pacing)."""
    autoreply = by_name("autoreply")
    with pytest.MonkeyPatch.context() as monkeypatch:
        refused = reply_batch(
            monkeypatch, autoreply.least_batch_timeout_seconds, chats, answers[: len(chats)]
        )
    assert refused == []


def test_hypothesis_a_send_written_just_under_its_chats_second_leaves_the_last_reply_its_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The generator's case (chats [11] x 10, Telegram answering in 0.890625 s): each record was
    written 9.375 ms before its chat's next slot, and the remaining time, whole milliseconds, was
    11.009 s against the 11.009375 needed to wait and then call: the last reply was handed back at
    the least timeout when it was 20 s. The least timeout now has `pacing.PACING_SLACK_SECONDS`."""
    autoreply = by_name("autoreply")
    assert reply_batch(monkeypatch, 20.0, [11] * 10, [0.890625] * 10) == [11]
    least = autoreply.least_batch_timeout_seconds
    assert reply_batch(monkeypatch, least, [11] * 10, [0.890625] * 10) == []


def test_a_second_under_the_least_batch_timeout_a_full_batch_to_one_chat_has_a_reply_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bound is tight but for its slack: the rule the registry enforces is the one the batch needs."""
    autoreply = by_name("autoreply")
    chats = [11] * autoreply.batch_size
    least = autoreply.least_batch_timeout_seconds
    refused = reply_batch(monkeypatch, least - 1 - pacing.PACING_SLACK_SECONDS, chats, [0.0] * len(chats))
    assert refused == [11]  # the last one: a fresh invocation sends it


def test_chaos_seed_7_three_replies_to_one_chat_in_12_s_and_the_timeout_that_allowed_it_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The generator's smallest case of the seed-7 dead letters: at 12 s (the least per record
    then), a third reply to one chat waited out two pacing seconds and was refused; every retry
    came back behind its chat's others and was refused again. The registry refuses that timeout."""
    assert reply_batch(monkeypatch, 12.0, [11, 11, 11], [0.0, 0.0, 0.0]) == [11]
    with pytest.raises(ValueError, match="after a batch of 3 in one chat: at least 14"):
        dataclasses.replace(by_name("autoreply"), batch_size=3, timeout_seconds=12)
