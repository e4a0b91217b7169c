"""Telegram's send limits: the stand-in enforces them (429 with retry_after past them), and the
sending consumers' pacing (`pipeline.pacing`) keeps a burst of 500 replies within them.

Time is virtual (`VirtualClock`): it moves only when every sending environment sleeps, so what
the stand-in sees depends on the pacing, never on the machine's speed or load.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from local.fakes.telegram import DEFAULT_BOT_TOKEN, TelegramFake
from local.fakes.telegram_limits import SendLimits
from pipeline import pacing
from pipeline.bot_api import BotApi
from pipeline.errors import TransientError
from pipeline.registry import CONSUMERS, Consumer, by_name

BURST = 500
START = 1_000.0


class VirtualClock:
    """A clock for `participants` threads: time jumps to the earliest wake-up once all of them
    sleep (or are done), so a thread's work between sleeps takes no virtual time."""

    def __init__(self, participants: int) -> None:
        self.now = START
        self._active = participants
        self._sleepers: list[tuple[float, int]] = []
        self._numbers = itertools.count()
        self._changed = threading.Condition()

    def __call__(self) -> float:
        with self._changed:
            return self.now

    def sleep(self, seconds: float) -> None:
        with self._changed:
            wake = self.now + seconds
            heapq.heappush(self._sleepers, (wake, next(self._numbers)))
            self._active -= 1
            self._advance()
            while self.now < wake:
                self._changed.wait()

    def done(self) -> None:
        with self._changed:
            self._active -= 1
            self._advance()

    def _advance(self) -> None:
        if self._active or not self._sleepers:
            return
        self.now = max(self.now, self._sleepers[0][0])
        while self._sleepers and self._sleepers[0][0] <= self.now:
            heapq.heappop(self._sleepers)
            self._active += 1  # woken here, so no other wake-up can pass it by
        self._changed.notify_all()


def spread(chats: list[int], environments: int) -> list[list[int]]:
    """The replies each environment sends: a chat's replies in one environment (one batch)."""
    shares: list[list[int]] = [[] for _ in range(environments)]
    for chat in chats:
        shares[hash(chat) % environments].append(chat)
    return shares


def send_burst(fake: TelegramFake, shares: list[list[int]], clock: VirtualClock, rate: float | None) -> int:
    """Every environment sends its replies through `BotApi` (paced at `rate`, or not at all);
    returns how many calls failed with a TransientError (Telegram's 429)."""
    failures: list[TransientError] = []

    def environment(chats: list[int]) -> None:
        pacer = pacing.Pacer(rate, clock=clock, sleep=clock.sleep) if rate else None
        api = BotApi(DEFAULT_BOT_TOKEN, base_url=fake.url, pacer=pacer)
        try:
            for chat in chats:
                try:
                    api.call("sendMessage", {"chat_id": chat, "text": "Hello!"})
                except TransientError as error:
                    failures.append(error)
        finally:
            clock.done()

    threads = [threading.Thread(target=environment, args=(chats,)) for chats in shares]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(failures)


@pytest.fixture
def limited() -> Iterator[tuple[TelegramFake, VirtualClock, Consumer]]:
    autoreply = by_name("autoreply")
    clock = VirtualClock(autoreply.max_concurrency)
    with TelegramFake(limits=SendLimits(), clock=clock) as fake:
        yield fake, clock, autoreply  # type: ignore[misc]


def test_a_burst_of_500_replies_stays_within_telegrams_limits(
    limited: tuple[TelegramFake, VirtualClock, Consumer], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, clock, autoreply = limited
    monkeypatch.delenv(pacing.SEND_RATE_ENV, raising=False)
    rate = float(autoreply.environment[pacing.SEND_RATE_ENV])
    chats = [700_000 + n for n in range(400)] + [700_000 + n for n in range(80)]
    chats += [-1001234, -4567] * 10  # two busy groups
    assert len(chats) == BURST
    # Every environment the consumer may run in at once sends its share at once.
    failures = send_burst(fake, spread(chats, autoreply.max_concurrency), clock, rate)
    assert fake.limiter is not None
    counts = fake.limiter.counts()
    assert failures == 0
    assert counts["refused"] == {}
    assert counts["accepted"] == BURST
    assert counts["max_per_second"] <= pacing.TELEGRAM_MESSAGES_PER_SECOND
    # Paced, not stalled: the burst took about BURST / (HEADROOM x 30) seconds of virtual time.
    assert clock.now - START < BURST / (pacing.HEADROOM * pacing.TELEGRAM_MESSAGES_PER_SECOND) + 30


def test_a_burst_unpaced_is_refused_by_the_stand_in(
    limited: tuple[TelegramFake, VirtualClock, Consumer], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, clock, autoreply = limited
    monkeypatch.delenv(pacing.SEND_RATE_ENV, raising=False)
    unpaced = 100  # enough to see the refusals; the paced test sends the 500
    chats = [700_000 + n for n in range(unpaced)]
    failures = send_burst(fake, spread(chats, autoreply.max_concurrency), clock, None)
    assert fake.limiter is not None
    counts = fake.limiter.counts()
    assert counts["accepted"] == pacing.TELEGRAM_MESSAGES_PER_SECOND
    assert failures == counts["refused"]["global"] == unpaced - pacing.TELEGRAM_MESSAGES_PER_SECOND


def call(fake: TelegramFake, method: str, params: dict[str, object]) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(  # noqa: S310 - the fake's http URL
        f"{fake.url}/bot{DEFAULT_BOT_TOKEN}/{method}",
        data=json.dumps(params).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request) as response:  # noqa: S310
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_the_stand_in_answers_429_with_retry_after_past_each_limit() -> None:
    now = [START]
    with TelegramFake(limits=SendLimits(per_second=3), clock=lambda: now[0]) as fake:
        assert call(fake, "sendMessage", {"chat_id": 1, "text": "a"})[0] == 200
        status, body = call(fake, "sendMessage", {"chat_id": 1, "text": "b"})  # same chat, same second
        assert status == 429
        assert body["parameters"] == {"retry_after": 1}
        assert call(fake, "sendMessage", {"chat_id": 2, "text": "c"})[0] == 200
        assert call(fake, "sendMessage", {"chat_id": 3, "text": "d"})[0] == 200
        assert call(fake, "sendMessage", {"chat_id": 4, "text": "e"})[0] == 429  # 4th this second
        assert call(fake, "answerCallbackQuery", {"callback_query_id": "q"})[0] == 200  # not a message
        for _ in range(20):  # a group: 20 a minute, spread over a minute
            now[0] += 2.5
            assert call(fake, "sendMessage", {"chat_id": -100, "text": "g"})[0] == 200
        now[0] += 2.5
        status, body = call(fake, "sendMessage", {"chat_id": -100, "text": "g"})
        assert status == 429
        assert body["parameters"] == {"retry_after": 10}  # the first of the last 60 s leaves in 10 s
        assert fake.limiter is not None
        assert fake.limiter.counts()["refused"] == {"chat": 1, "global": 1, "group": 1}


def test_the_stand_in_enforces_nothing_unless_asked() -> None:
    with TelegramFake() as fake:
        statuses = {call(fake, "sendMessage", {"chat_id": 1, "text": "a"})[0] for _ in range(40)}
        assert statuses == {200}
        request = urllib.request.Request(  # noqa: S310
            f"{fake.url}/_limits", data=b'{"enforce": true}', headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request) as response:  # noqa: S310
            assert json.loads(response.read())["enforce"] is True
        assert call(fake, "sendMessage", {"chat_id": 1, "text": "a"})[0] == 200
        assert call(fake, "sendMessage", {"chat_id": 1, "text": "a"})[0] == 429


def test_the_registry_shares_the_budget_between_a_sending_consumers_environments() -> None:
    senders = [c for c in CONSUMERS if pacing.SEND_RATE_ENV in c.environment]
    assert {c.name for c in senders} == {"autoreply", "bot", "broadcast"}
    assert all(c.sends_to_telegram for c in senders)
    for consumer in senders:
        rate = float(consumer.environment[pacing.SEND_RATE_ENV])
        assert rate * consumer.max_concurrency <= pacing.TELEGRAM_MESSAGES_PER_SECOND
    # The share follows the concurrency (one source): more environments, each a smaller share.
    [autoreply] = [c for c in senders if c.name == "autoreply"]
    doubled = dataclasses.replace(autoreply, max_concurrency=2 * autoreply.max_concurrency)
    assert float(doubled.environment[pacing.SEND_RATE_ENV]) == pytest.approx(
        float(autoreply.environment[pacing.SEND_RATE_ENV]) / 2
    )
    with pytest.raises(ValueError, match="sends_to_telegram"):
        Consumer(
            name="x",
            description="",
            filter_policy={},
            max_concurrency=10,
            environment=pacing.paced_environment(5),
        )


def test_a_chat_whose_next_message_is_far_off_is_retried_later_not_waited_for() -> None:
    now = [START]
    pacer = pacing.Pacer(10, clock=lambda: now[0], sleep=lambda s: None, max_wait=5)
    delays = [pacer.reserve(-100) for _ in range(2)]
    assert delays == [0.0, 3.0]  # a group: 20 a minute
    with pytest.raises(TransientError) as raised:
        pacer.reserve(-100)
    assert raised.value.retry_after == pytest.approx(6.0)


def test_the_bot_api_client_paces_by_its_environments_share_and_only_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    autoreply = by_name("autoreply")
    monkeypatch.setenv(pacing.SEND_RATE_ENV, autoreply.environment[pacing.SEND_RATE_ENV])
    api = BotApi(DEFAULT_BOT_TOKEN, base_url="http://127.0.0.1:9")
    assert api.pacer is pacing.shared()
    assert api.pacer is not None
    budget = pacing.HEADROOM * pacing.TELEGRAM_MESSAGES_PER_SECOND
    assert api.pacer.interval == pytest.approx(autoreply.max_concurrency / budget)
    assert [
        m for m in ("sendMessage", "copyMessage", "forwardMessages", "sendPhoto") if pacing.is_message(m)
    ] == [
        "sendMessage",
        "copyMessage",
        "forwardMessages",
        "sendPhoto",
    ]
    assert not any(pacing.is_message(m) for m in ("answerCallbackQuery", "sendChatAction", "editMessageText"))
    monkeypatch.delenv(pacing.SEND_RATE_ENV)
    assert BotApi(DEFAULT_BOT_TOKEN).pacer is None
