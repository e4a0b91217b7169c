"""The campaign's senders resend an update as Telegram does: through an outage longer than any the
campaign makes (a whole-pipeline restart), not a fixed 8 tries that a restart outlasts."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from local.chaos import campaign as campaign_module
from local.chaos.campaign import DELIVERY_ATTEMPTS, DELIVERY_WINDOW_SECONDS, Campaign, Options
from local.chaos.workload import Step


class FakeClock:
    """`time` for the campaign module: sleeping moves the clock, nothing waits."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def sender(monkeypatch: pytest.MonkeyPatch, down_for_seconds: float) -> tuple[Campaign, FakeClock]:
    """A campaign whose webhook refuses connections (0) for `down_for_seconds`, then answers 200."""
    clock = FakeClock()
    back_at = clock.now + down_for_seconds
    monkeypatch.setattr(campaign_module, "time", clock)
    monkeypatch.setattr(campaign_module, "post", lambda *request: 200 if clock.now >= back_at else 0)
    campaign = Campaign(Options(seed=31, events=10), say=lambda line: None)
    runtime: Any = SimpleNamespace(
        settings=SimpleNamespace(telegram_bot_id="default", telegram_secret="s"),
        webhook_url="http://127.0.0.1:9/telegram",
    )
    campaign.runtime = runtime
    return campaign, clock


MESSAGE = Step(5, "message", {"chat": 5100700021, "update": 887000001, "step": 1})


def test_an_update_sent_while_the_pipeline_restarts_for_36_seconds_is_accepted_once_it_is_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The long run at 7941330: restarts of up to 36 s; the old 8 tries gave up after 12 s."""
    campaign, _ = sender(monkeypatch, down_for_seconds=36)

    campaign.send(MESSAGE)

    answers = campaign.sent.answers["telegram:default:887000001"]
    assert answers[-1] == 200 and set(answers[:-1]) == {0}
    assert len(answers) > DELIVERY_ATTEMPTS


def test_a_webhook_down_for_longer_than_the_window_is_given_up_on_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    campaign, clock = sender(monkeypatch, down_for_seconds=10 * DELIVERY_WINDOW_SECONDS)
    started = clock.now

    campaign.send(MESSAGE)

    answers = campaign.sent.answers["telegram:default:887000001"]
    assert 200 not in answers and len(answers) >= DELIVERY_ATTEMPTS
    assert DELIVERY_WINDOW_SECONDS <= clock.now - started <= DELIVERY_WINDOW_SECONDS + 3
