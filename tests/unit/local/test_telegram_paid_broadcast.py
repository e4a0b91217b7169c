"""The Telegram stand-in's send limits and `allow_paid_broadcast` (`local.fakes.telegram_limits`):
Telegram's "up to 1000 messages per second, ignoring broadcasting limits" for paid messages, the
free rate (30 a second) for the others, each chat's spacing for both. A fixed clock: every
message falls in one second, whatever the machine's speed."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from local.fakes.telegram import DEFAULT_BOT_TOKEN, TelegramFake
from local.fakes.telegram_limits import SendLimits
from pipeline.pacing import TELEGRAM_MESSAGES_PER_SECOND


@pytest.fixture
def telegram() -> Iterator[TelegramFake]:
    fake = TelegramFake(limits=SendLimits(), clock=lambda: 1_000.0)
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


def send(fake: TelegramFake, chat_id: int, **params: Any) -> tuple[int, dict[str, Any]]:
    body = json.dumps({"chat_id": chat_id, "text": "Sale!", **params}).encode()
    request = urllib.request.Request(  # noqa: S310 - the stand-in on loopback
        f"{fake.url}/bot{DEFAULT_BOT_TOKEN}/sendMessage", body, {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - loopback
            return int(answer.status), json.loads(answer.read())
    except urllib.error.HTTPError as error:
        with error:
            return int(error.code), json.loads(error.read())


def test_paid_broadcast_messages_pass_the_free_rate_which_still_holds_the_others(
    telegram: TelegramFake,
) -> None:
    paid = [send(telegram, 10_000 + n, allow_paid_broadcast=True)[0] for n in range(100)]
    assert paid == [200] * 100
    free = [send(telegram, 20_000 + n) for n in range(TELEGRAM_MESSAGES_PER_SECOND + 1)]
    assert [status for status, _ in free] == [200] * TELEGRAM_MESSAGES_PER_SECOND + [429]
    assert free[-1][1]["parameters"]["retry_after"] >= 1
    # A chat's spacing holds for paid messages too (one a second in a private chat).
    status, answer = send(telegram, 10_000, allow_paid_broadcast=True)
    assert status == 429 and answer["description"].startswith("Too Many Requests: retry after")
    assert telegram.limit_counts()["refused"] == {"global": 1, "chat": 1}
