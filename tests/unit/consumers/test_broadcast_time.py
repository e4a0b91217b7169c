"""A broadcast page whose invocations each have time for only a few chats (Telegram answering
slowly): an invocation that sent some hands the rest back, uncounted, so a page that advances never
runs out of attempts (chaos seed 46: the campaign's 12 s invocations sent a few chats each between
slow answers, and two pages were dead-lettered "retries exhausted after 8 attempts: telegram
sendMessage not started: 9.6s left in this invocation, 11s needed")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from local.fakes.telegram import TelegramFake
from pipeline import broadcast as jobs
from pipeline import deadline, pacing
from pipeline.bot_api import TIMEOUT_SECONDS
from tests.unit.consumer_support import FakeLambdaContext
from tests.unit.consumers.conftest import DeployedConsumer
from tests.unit.consumers.test_broadcast import job, received, sender, start  # noqa: F401 - fixture

CHATS = [2_000_000 + n for n in range(40)]
# Each answer this late, and each invocation this much time beyond what a call needs: two or three
# chats an invocation, more invocations than the queue's receives.
ANSWER_SECONDS = 0.3
SPARE_SECONDS = 0.8


@dataclass
class SlowAnswersContext(FakeLambdaContext):
    """An invocation whose time left is spent by Telegram's slow answers only: `seconds`, less
    ANSWER_SECONDS for each sendMessage the stand-in answered since the invocation began. Counted,
    not read off the wall clock, so each invocation has time for the same few chats however busy
    this machine is (on the wall clock, a loaded machine's slower start left an invocation time for
    none: a run at three test workers dead-lettered the page)."""

    telegram: TelegramFake | None = None
    seconds: float = 0.0

    def __post_init__(self) -> None:
        self.answered_before = self._answered()

    def _answered(self) -> int:
        assert self.telegram is not None
        return sum(call["path"].endswith("/sendMessage") for call in self.telegram.calls())

    def get_remaining_time_in_millis(self) -> int:
        spent = ANSWER_SECONDS * (self._answered() - self.answered_before)
        return int((self.seconds - spent) * 1000)


def test_chaos_seed_46_a_page_that_advances_a_few_chats_an_invocation_is_never_dead_lettered(
    sender: DeployedConsumer,  # noqa: F811 - the fixture imported above
    telegram: TelegramFake,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No pacing wait: only the slow answers spend the invocations' time.
    monkeypatch.setattr(pacing, "_shared", pacing.Pacer(1000.0))
    telegram.keep_every_call()
    telegram.add_faults({"hang_next": len(CHATS), "seconds": ANSWER_SECONDS, "match": "sendMessage"})
    broadcast_id = start(sender, CHATS)
    seconds = deadline.needed(TIMEOUT_SECONDS) + SPARE_SECONDS

    invocations = 0
    while invocations < 60:
        sender.let_time_pass()
        if sender.queues.approximate_counts() == (0, 0):
            break
        event = sender.queues.receive_event(max_messages=1)
        response: dict[str, Any] = sender.app.lambda_handler(
            event, SlowAnswersContext(telegram=telegram, seconds=seconds)
        )
        sender.queues.acknowledge(event, response)
        invocations += 1

    assert sender.queues.dead_letters() == []
    assert set(received(telegram)) == set(CHATS) and set(received(telegram).values()) == {1}
    assert job(broadcast_id)["state"] == jobs.DONE
    assert invocations > sender.queues.consumer.redrive_max_receive_count
