"""The bot's Bot API transport (`pipeline.telegram_bot.transport.PooledRequest`) against the
Telegram stand-in over HTTP: what python-telegram-bot sends arrives as Telegram reads it, a
failure is the error PTB's own HTTPXRequest raised for it, and no call is ever sent twice."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from telegram import Bot, InputMediaPhoto
from telegram.error import NetworkError, RetryAfter, TimedOut
from telegram.request import RequestData
from telegram.request._requestparameter import RequestParameter

from local.fakes.telegram import TelegramFake
from pipeline.telegram_bot.transport import POOL_FULL, PooledRequest
from tests.unit.consumers.conftest import BOT_TOKEN

CHAT = 424242
# A hung answer is waited for this long: far beyond any answer the stand-in gives at once.
HUNG_READ_TIMEOUT = 0.3
HANG_SECONDS = 30  # the stand-in holds the answer; its stop ends the wait
PNG = bytes.fromhex("89504e470d0a1a0a") + b"\x00" * 64


@pytest.fixture(scope="module")
def stand_in() -> Iterator[TelegramFake]:
    fake = TelegramFake(token=BOT_TOKEN, strict=True)
    with fake:
        yield fake


@pytest.fixture
def telegram(stand_in: TelegramFake) -> TelegramFake:
    stand_in.clear_faults()
    stand_in.clear_calls()
    return stand_in


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def send_message(telegram: TelegramFake, request: PooledRequest, **timeouts: float) -> tuple[int, bytes]:
    data = RequestData(
        [RequestParameter.from_input("chat_id", CHAT), RequestParameter.from_input("text", "hi")]
    )
    url = f"{telegram.url}/bot{BOT_TOKEN}/sendMessage"
    return run(request.do_request(url, "POST", data, **timeouts))  # type: ignore[no-any-return]


def calls(telegram: TelegramFake, method: str) -> list[dict[str, Any]]:
    return [c for c in telegram.calls() if c["path"].endswith(f"/{method}")]


def test_what_ptb_sends_arrives_as_telegram_reads_it_text_and_files(telegram: TelegramFake) -> None:
    """The stand-in is strict (aiogram's model of each method): a body it could not read as
    Telegram does would be a 400, which PTB raises."""

    async def session() -> None:
        bot = Bot(
            BOT_TOKEN,
            base_url=f"{telegram.url}/bot",
            request=PooledRequest(),
            get_updates_request=PooledRequest(),
        )
        async with bot:
            await bot.send_message(CHAT, "Привет & <b>you</b>")
            await bot.send_photo(CHAT, PNG, caption="a photo")

    run(session())
    [text] = calls(telegram, "sendMessage")
    assert text["body"] == {"chat_id": str(CHAT), "text": "Привет & <b>you</b>"}
    assert text["headers"]["content-type"] == "application/x-www-form-urlencoded"
    assert text["headers"]["user-agent"] == PooledRequest.USER_AGENT
    [photo] = calls(telegram, "sendPhoto")
    assert photo["status"] == 200 and photo["headers"]["content-type"].startswith("multipart/form-data")
    assert 'name="caption"' in photo["body"] and 'filename="' in photo["body"]


def test_an_album_sends_each_file_as_the_part_its_media_names(telegram: TelegramFake) -> None:
    """`attach://<name>` in the media JSON, each file a part of that name (the stand-in's strict
    check would take those parts for unknown parameters: checked here instead)."""
    telegram.strict = False
    try:

        async def album() -> None:
            async with Bot(BOT_TOKEN, base_url=f"{telegram.url}/bot", request=PooledRequest()) as bot:
                await bot.send_media_group(
                    CHAT, [InputMediaPhoto(PNG), InputMediaPhoto(PNG[:-1], caption="two")]
                )

        run(album())
    finally:
        telegram.strict = True
    [call] = calls(telegram, "sendMediaGroup")
    assert call["status"] == 200
    attached = re.findall(r"attach://(\w+)", call["body"])
    assert len(attached) == 2
    assert all(f'name="{name}"' in call["body"] for name in attached)


def test_a_hung_answer_is_timed_out_and_never_sent_again(telegram: TelegramFake) -> None:
    telegram.add_faults({"hang_next": 1, "seconds": HANG_SECONDS})
    with pytest.raises(TimedOut):
        send_message(telegram, PooledRequest(), read_timeout=HUNG_READ_TIMEOUT)
    assert len(calls(telegram, "sendMessage")) == 1


def test_an_answer_lost_after_the_effect_is_a_network_error_and_never_sent_again(
    telegram: TelegramFake,
) -> None:
    """The message went out, its answer did not come back: only the journal may decide a resend."""
    telegram.add_faults({"drop_answer_next": 1})
    with pytest.raises(NetworkError) as raised:
        send_message(telegram, PooledRequest())
    assert not isinstance(raised.value, TimedOut)
    [call] = calls(telegram, "sendMessage")
    assert call["status"] == 200  # Telegram took it


def test_a_server_error_or_a_429_is_an_answer_for_ptb_to_judge_not_a_transport_error(
    telegram: TelegramFake,
) -> None:
    telegram.add_faults({"fail_next": 1, "status": 502})
    status, _ = send_message(telegram, PooledRequest())
    assert status == 502
    telegram.add_faults({"rate_limit_next": 1, "retry_after": 7, "match": "/sendMessage"})

    async def through_ptb() -> None:
        async with Bot(BOT_TOKEN, base_url=f"{telegram.url}/bot", request=PooledRequest()) as bot:
            await bot.send_message(CHAT, "hi")

    with pytest.raises(RetryAfter) as raised:
        run(through_ptb())
    assert raised.value.retry_after == 7
    assert len(calls(telegram, "sendMessage")) == 2  # each sent once: PTB retries neither


def test_a_full_pool_waits_its_timeout_then_raises_without_sending(telegram: TelegramFake) -> None:
    """One connection, held by a hung call: the next call gives up after `pool_timeout`."""
    telegram.add_faults({"hang_next": 1, "seconds": HANG_SECONDS})
    request = PooledRequest(connection_pool_size=1, pool_timeout=0.2)

    async def two_calls() -> list[Any]:
        data = RequestData([RequestParameter.from_input("chat_id", CHAT)])
        url = f"{telegram.url}/bot{BOT_TOKEN}/sendChatAction"
        hung = asyncio.ensure_future(request.do_request(url, "POST", data, read_timeout=3.0))
        while not calls(telegram, "sendChatAction"):  # the first holds the connection
            await asyncio.sleep(0.01)
        second = await asyncio.gather(request.do_request(url, "POST", data), return_exceptions=True)
        hung.cancel()
        return second

    [error] = run(two_calls())
    assert isinstance(error, TimedOut) and str(error) == POOL_FULL
    assert len(calls(telegram, "sendChatAction")) == 1


def test_a_refused_connection_is_a_network_error_as_httpx_connect_error_was() -> None:
    with socket.socket() as listener:  # a port nobody listens on once closed
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
    with pytest.raises(NetworkError) as raised:
        run(PooledRequest().do_request(f"http://127.0.0.1:{port}/bot{BOT_TOKEN}/getMe", "POST"))
    assert not isinstance(raised.value, TimedOut)
    assert "NewConnectionError" in str(raised.value) and BOT_TOKEN not in str(raised.value)


def test_the_response_hook_sees_each_answer_in_the_callers_context(telegram: TelegramFake) -> None:
    """The local runtime's crash hooks read the journal's step from a context variable: the call
    runs in a thread, which must carry the caller's context."""
    import contextvars

    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker")
    seen: list[tuple[str, str]] = []
    request = PooledRequest(
        on_response=lambda headers: seen.append((marker.get("none"), headers["content-type"]))
    )

    async def marked() -> tuple[int, bytes]:
        marker.set("the update's step")
        data = RequestData([RequestParameter.from_input("chat_id", CHAT)])
        return await request.do_request(f"{telegram.url}/bot{BOT_TOKEN}/sendChatAction", "POST", data)

    assert run(marked())[0] == 400  # no action given: Telegram's answer, still an answer
    assert seen == [("the update's step", "application/json")]


# What the stand-in does with one call, and what the transport must make of it.
BEHAVIOURS = {
    "answer": ({}, 200),
    "fail": ({"fail_next": 1, "status": 503}, 503),
    "rate_limit": ({"rate_limit_next": 1, "retry_after": 3}, 429),
    "drop_answer": ({"drop_answer_next": 1}, NetworkError),
    "hang": ({"hang_next": 1, "seconds": HANG_SECONDS}, TimedOut),
}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(sorted(BEHAVIOURS)), min_size=1, max_size=6))
def test_generated_sequences_of_answers_and_failures_each_send_exactly_one_call(
    telegram: TelegramFake, sequence: list[str]
) -> None:
    """Whatever came before on the pool's connections (a hang, a lost answer, an error kept
    alive), each call reaches Telegram exactly once and ends as PTB's HTTPXRequest ended it,
    and no error names the bot's token."""
    telegram.clear_faults()
    telegram.clear_calls()
    request = PooledRequest(connection_pool_size=2)
    for index, behaviour in enumerate(sequence):
        faults, expected = BEHAVIOURS[behaviour]
        if faults:
            telegram.add_faults(faults)
        timeouts = {"read_timeout": HUNG_READ_TIMEOUT} if behaviour == "hang" else {}
        if isinstance(expected, int):
            status, _ = send_message(telegram, request, **timeouts)
            assert status == expected, (index, behaviour)
        else:
            with pytest.raises(expected) as raised:
                send_message(telegram, request, **timeouts)
            assert isinstance(raised.value, TimedOut) == (expected is TimedOut)
            # The token is in every call's path: no error, nor its cause, may quote it.
            assert BOT_TOKEN not in f"{raised.value} {raised.value.__cause__!r}"
        assert len(calls(telegram, "sendMessage")) == index + 1, (index, behaviour)
