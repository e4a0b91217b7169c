"""Telegram's 429 slows the whole bot, shared across environments, and no pacing wait outlives
the invocation (`pipeline.pacing`), through the Telegram stand-in and moto's journal table.

Time is a test clock: a sleep moves it, nothing really waits, and every figure asserted follows
from the pacing, never from the machine's speed.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from local.fakes.telegram import DEFAULT_BOT_TOKEN, TelegramFake
from local.fakes.telegram_limits import SendLimits
from pipeline import aws, deadline, pacing
from pipeline.bot_api import TIMEOUT_SECONDS, BotApi
from pipeline.errors import HandedBack
from pipeline.registry import by_name
from tests.unit.consumer_support import JOURNAL_TABLE

START = 1_767_225_600.0  # epoch seconds: the not-before is shared between hosts
RATE = float(by_name("autoreply").environment[pacing.SEND_RATE_ENV])


class Clock:
    def __init__(self) -> None:
        self.now = START
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def invocation(clock: Clock, seconds_left: float) -> Any:
    """An invocation with `seconds_left` from now, on the test clock."""
    end = clock.now + seconds_left
    return deadline.invocation(
        SimpleNamespace(get_remaining_time_in_millis=lambda: int((end - clock.now) * 1000))
    )


def environment(clock: Clock) -> pacing.Pacer:
    """One Lambda environment's pacer, sharing the bot-wide not-before through the journal."""
    return pacing.Pacer(RATE, clock=clock, sleep=clock.sleep, bot_wide=pacing.BotWideWait(JOURNAL_TABLE))


def sent_to(fake: TelegramFake) -> list[tuple[Any, bool]]:
    """(chat, accepted) of every sendMessage the stand-in answered (a fault's 429: not accepted)."""
    calls = [c for c in fake.calls() if c["path"].endswith("/sendMessage")]
    return [(c["body"]["chat_id"], c["fault"] is None and c["status"] == 200) for c in calls]


def test_a_429_in_one_environment_holds_every_other_until_telegrams_time_counted_from_its_answer(
    moto_aws: None,
) -> None:
    clock = Clock()
    with TelegramFake() as fake:
        first, second, third = (
            BotApi(DEFAULT_BOT_TOKEN, base_url=fake.url, pacer=environment(clock)) for _ in range(3)
        )
        fake.add_faults({"rate_limit_next": 1, "retry_after": 7, "match": "sendMessage"})
        with invocation(clock, 29), pytest.raises(HandedBack) as handed:
            first.call("sendMessage", {"chat_id": 11, "text": "a"})
        assert handed.value.delay == pytest.approx(7.0)  # back in its queue, not slept on

        clock.now += 2  # another environment's message, 2 s after Telegram answered
        with invocation(clock, 29):
            second.call("sendMessage", {"chat_id": 22, "text": "b"})
        assert clock.slept == [pytest.approx(5.0)]  # what was left of the 7 s, not 7 again
        assert clock.now == pytest.approx(START + 7)

        clock.now = START + 3  # a third, with too little time left to wait the 4 s
        with invocation(clock, deadline.needed(TIMEOUT_SECONDS) + 2), pytest.raises(HandedBack) as later:
            third.call("sendMessage", {"chat_id": 33, "text": "c"})
        assert later.value.delay == pytest.approx(4.0)
        assert sent_to(fake) == [(11, False), (22, True)]  # nothing sent before Telegram's time
    item = aws.client("dynamodb").get_item(TableName=JOURNAL_TABLE, Key={"id": {"S": pacing.NOT_BEFORE_KEY}})
    assert float(item["Item"]["not_before"]["N"]) == pytest.approx(START + 7)
    assert item["Item"]["schema_version"] == {"N": "1"}


def test_the_bot_wide_not_before_only_moves_later(moto_aws: None) -> None:
    """Two environments' 429s answered in either order: the later time stays."""
    clock = Clock()
    early, late = environment(clock), environment(clock)
    late.flood({"parameters": {"retry_after": 30}}, START)
    early.flood({"parameters": {"retry_after": 5}}, START + 1)
    assert pacing.BotWideWait(JOURNAL_TABLE).read() == pytest.approx(START + 30)
    with invocation(clock, 29), pytest.raises(HandedBack) as handed:
        early.reserve(11, TIMEOUT_SECONDS)  # its own 429 said 6 s; the bot's says 30
    assert handed.value.delay == pytest.approx(30.0)


def test_a_group_is_paced_at_20_a_minute_and_a_private_chat_at_one_a_second_within_the_time_left(
    moto_aws: None,
) -> None:
    """With 13 s left (the call and its record need 11): a private chat's next message waits its
    second; a group's would wait 3 s and is handed back instead, never slept on."""
    clock = Clock()
    with TelegramFake(limits=SendLimits(), clock=clock) as fake:
        api = BotApi(DEFAULT_BOT_TOKEN, base_url=fake.url, pacer=environment(clock))
        with invocation(clock, deadline.needed(TIMEOUT_SECONDS) + 2):
            api.call("sendMessage", {"chat_id": 11, "text": "a"})
            api.call("sendMessage", {"chat_id": 11, "text": "b"})
            api.call("sendMessage", {"chat_id": -1001234, "text": "c"})
            with pytest.raises(HandedBack) as handed:
                api.call("sendMessage", {"chat_id": -1001234, "text": "d"})
        # The private chat's second, then the environment's share of the bot's rate before the group.
        assert clock.slept == [pytest.approx(pacing.TELEGRAM_CHAT_INTERVAL_SECONDS), pytest.approx(1 / RATE)]
        assert handed.value.delay == pytest.approx(60 / pacing.TELEGRAM_GROUP_MESSAGES_PER_MINUTE)
        assert sent_to(fake) == [(11, True), (11, True), (-1001234, True)]
        assert fake.limiter is not None and fake.limiter.counts()["refused"] == {}


CHATS = [11, 12, -1001234, -4567]
step = st.one_of(
    st.tuples(
        st.just("send"),
        st.integers(0, 1),  # which environment
        st.sampled_from(CHATS),
        st.floats(0, 4),  # time passing before it
        st.floats(0, 30),  # time left in the invocation
    ),
    st.tuples(st.just("429"), st.integers(0, 1), st.sampled_from(CHATS), st.floats(0, 4), st.integers(0, 60)),
)


@given(steps=st.lists(step, min_size=1, max_size=40))
# Found by this test: a 429 at a clock with a fraction below the millisecond was shared rounded to
# the nearest millisecond, half a millisecond early; the not-before is now stored rounded up.
@example(
    steps=[
        ("send", 0, 11, 0.0, 0.0),
        ("send", 0, 11, 1.0625, 0.0),
        ("429", 0, 11, 0.0, 1),
        ("send", 1, 11, 0.0, 12.0),
    ]
)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_pacer_never_sends_before_the_bot_wide_or_the_chats_time_and_never_waits_past_the_invocation(
    moto_aws: None, steps: list[tuple[str, int, int, float, float]]
) -> None:
    aws.client("dynamodb").delete_item(TableName=JOURNAL_TABLE, Key={"id": {"S": pacing.NOT_BEFORE_KEY}})
    clock = Clock()
    pacers = [environment(clock), environment(clock)]
    not_before = 0.0  # the latest time any 429 asked the bot to wait until
    last_sent: list[dict[int, float]] = [{}, {}]  # per environment: each chat's last message
    last_any = [float("-inf"), float("-inf")]
    for kind, env, chat, passing, value in steps:
        clock.now += passing
        pacer = pacers[env]
        if kind == "429":
            handed = pacer.flood(
                {"ok": False, "error_code": 429, "parameters": {"retry_after": value}}, clock.now
            )
            not_before = max(not_before, clock.now + value)
            assert handed.delay == pytest.approx(value)
            continue
        with invocation(clock, value):
            try:
                wait = pacer.reserve(chat, TIMEOUT_SECONDS)
            except HandedBack as handed:
                assert handed.delay > 0
                assert handed.delay > pacer.max_wait or value - handed.delay < deadline.needed(
                    TIMEOUT_SECONDS
                )
                continue
        # It never waits past the invocation, less the call and its record (with no time left
        # for the call, nothing is waited: the call's own deadline check refuses it).
        assert wait == 0 or wait <= min(pacer.max_wait, value - deadline.needed(TIMEOUT_SECONDS)) + 1e-9
        clock.sleep(wait)
        at = clock.now
        assert at >= not_before - 1e-6
        previous = last_sent[env].get(chat)
        assert previous is None or at - previous >= pacing.chat_interval(chat) - 1e-6
        assert at - last_any[env] >= pacer.interval - 1e-6
        last_sent[env][chat] = at
        last_any[env] = at
