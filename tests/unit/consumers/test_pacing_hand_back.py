"""A pacing wait the invocation cannot make hands the record back to its queue, uncounted: the bot
consumer's FIFO record by its visibility with its chat's later updates (order kept), autoreply's
standard record re-sent delayed; a flood wait past the cap is a pause. Real handlers, the Telegram
stand-in, moto's queues and journal; the pacing's clock and the invocation's time left are a test
clock (nothing really waits)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from local.fakes.telegram import TelegramFake
from pipeline import aws, deadline, pacing
from pipeline.bot_api import TIMEOUT_SECONDS
from pipeline.pause import PAUSED_KEY, pause_seconds
from pipeline.registry import by_name
from pipeline.retention import TELEGRAM_RETRY_AFTER_CAP_SECONDS
from tests.unit.consumer_support import (
    JOURNAL_TABLE,
    FakeLambdaContext,
    journal_items,
    telegram_envelope,
    telegram_update,
)
from tests.unit.consumers.conftest import DeployedConsumer, FakeHttpServer, Scripted
from tests.unit.consumers.test_bot import EXAMPLE, contact, start, texts

START = 1_767_225_600.0


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class ClockContext(FakeLambdaContext):
    """An invocation whose time left runs on the test clock."""

    clock: Clock | None = None
    seconds: float = 29.0

    def __post_init__(self) -> None:
        assert self.clock is not None
        self.end = self.clock.now + self.seconds

    def get_remaining_time_in_millis(self) -> int:
        assert self.clock is not None
        return int((self.end - self.clock.now) * 1000)


def paced(consumer: DeployedConsumer, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """The consumer paced as deployed (its environment's share), on the test clock."""
    rate = by_name(consumer.queues.consumer.name).environment[pacing.SEND_RATE_ENV]
    monkeypatch.setenv(pacing.SEND_RATE_ENV, rate)
    pacer = pacing.Pacer(
        float(rate), clock=clock, sleep=clock.sleep, bot_wide=pacing.BotWideWait(JOURNAL_TABLE)
    )
    monkeypatch.setattr(pacing, "_shared", pacer)


def run(consumer: DeployedConsumer, clock: Clock, seconds: float = 29.0) -> dict[str, Any]:
    """One invocation on what the queue delivers now; acknowledged as the event source does."""
    event = consumer.queues.receive_event()
    response: dict[str, Any] = consumer.app.lambda_handler(event, ClockContext(clock=clock, seconds=seconds))
    consumer.queues.acknowledge(event, response)
    return response


@pytest.fixture
def bot(
    deploy_bot: Callable[[str], DeployedConsumer],
    put_secret: Callable[[str, str], None],
    http_fake: FakeHttpServer,
) -> DeployedConsumer:
    consumer = deploy_bot(EXAMPLE)
    put_secret("crm_api", f'{{"kind": "webhook", "url": "{http_fake.base_url}/leads"}}')
    http_fake.default = Scripted(200, {"id": "lead-1"})
    return consumer


def test_a_429_hands_the_chats_updates_back_in_order_uncounted_and_they_resume_after_it(
    bot: DeployedConsumer, telegram: TelegramFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    paced(bot, clock, monkeypatch)
    telegram.add_faults({"rate_limit_next": 1, "retry_after": 30, "match": "sendMessage"})
    bot.queues.send(telegram_envelope(start()))
    bot.queues.send(telegram_envelope(contact()))

    response = run(bot, clock)

    # Both stay in the queue, hidden for Telegram's 30 s (the contact held behind the /start).
    assert len(response["batchItemFailures"]) == 2
    assert [round(wait) for wait in bot.waiting()] == [30, 30]
    assert bot.app.worker.last_outcome.status == "held"
    assert bot.app.worker.counts["handed_back"] == 1
    assert bot.dead_letter_reasons() == []
    assert not [item for item in journal_items() if "#attempts#" in item["id"]]  # not an attempt

    clock.now += 30
    bot.let_time_pass()
    for _ in range(2):  # moto hands out a FIFO group's messages one receive at a time here
        assert run(bot, clock)["batchItemFailures"] == []
        clock.now += pacing.TELEGRAM_CHAT_INTERVAL_SECONDS  # the chat's next message, its second later
    assert bot.waiting() == [] and bot.dead_letter_reasons() == []
    assert bot.app.worker.counts["processed"] == 2
    assert texts(telegram)[0].startswith("Hi! Share your phone number")  # the /start first


def test_a_flood_wait_past_the_cap_is_a_flood_control_pause_not_a_sleep(
    bot: DeployedConsumer, telegram: TelegramFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    paced(bot, clock, monkeypatch)
    telegram.add_faults(
        {"rate_limit_next": 1, "retry_after": TELEGRAM_RETRY_AFTER_CAP_SECONDS + 1, "match": "sendMessage"}
    )
    bot.queues.send(telegram_envelope(start()))

    response = run(bot, clock)

    assert len(response["batchItemFailures"]) == 1
    outcome = bot.app.worker.last_outcome
    assert outcome.status == "paused" and "account refused (flood_control)" in (outcome.reason or "")
    assert [round(wait) for wait in bot.waiting()] == [pause_seconds(bot.queues.consumer)]
    note = aws.client("dynamodb").get_item(
        TableName=JOURNAL_TABLE, Key={"id": {"S": PAUSED_KEY.format(consumer="bot")}}
    )
    assert note["Item"]["cause"] == {"S": "flood_control"}
    assert bot.dead_letter_reasons() == []


def test_a_groups_reply_due_later_than_the_invocation_can_wait_is_re_sent_delayed_not_retried(
    autoreply: DeployedConsumer, telegram: TelegramFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two replies to one group with 13 s left (the call and its record need 11): the second is
    due 3 s later (20 a minute), so it goes back to the queue with that delay, acknowledged here:
    not slept on, not counted, not dead-lettered; the next invocation sends it."""
    clock = Clock()
    paced(autoreply, clock, monkeypatch)
    update = telegram_update("group_command")
    for n in range(2):
        autoreply.queues.send(telegram_envelope({**update, "update_id": 820_000_000 + n}))

    response = run(autoreply, clock, seconds=deadline.needed(TIMEOUT_SECONDS) + 2)

    assert response["batchItemFailures"] == []  # one sent, one re-sent delayed
    assert autoreply.app.worker.counts["handed_back"] == 1
    assert [round(wait) for wait in autoreply.waiting()] == [60 / pacing.TELEGRAM_GROUP_MESSAGES_PER_MINUTE]
    assert clock.now - START < 1  # not slept on
    assert len(sent_messages(telegram)) == 1

    clock.now += 3
    autoreply.let_time_pass()
    assert run(autoreply, clock)["batchItemFailures"] == []
    assert len(sent_messages(telegram)) == 2
    assert autoreply.queues.approximate_counts() == (0, 0) and autoreply.dead_letter_reasons() == []


def sent_messages(telegram: TelegramFake) -> list[dict[str, Any]]:
    return [c for c in telegram.calls() if c["path"].endswith("/sendMessage") and c["status"] == 200]
