"""The bot engine's rules on single Bot API calls, without a queue: which 403 means the user
blocked the bot, and what makes a replayed call the same call (pipeline.telegram_bot)."""

from __future__ import annotations

import pytest

from pipeline.errors import PermanentError
from tests.unit.consumer_support import telegram_update
from tests.unit.consumers.test_bot import ANNA, BLUE, KICKED, MANAGERS, RED


@pytest.mark.parametrize(
    ("fixture", "to_the_updates_chat", "blocked"),
    [
        ("private_start", True, True),  # the user blocked the bot
        ("private_start", False, False),  # a group the bot forwards to removed it
        ("group_command", True, False),  # removed from the group the user wrote in: an error too
        ("group_command", False, False),  # the user's private chat, from a group's update
    ],
)
def test_only_a_403_from_the_updates_own_private_chat_means_blocked(
    fixture: str, to_the_updates_chat: bool, blocked: bool
) -> None:
    from telegram import Update

    from pipeline.bot_api_errors import classify as judge
    from pipeline.telegram_bot.calls import refused
    from pipeline.telegram_bot.engine import blocked_by_the_user, classify

    update = Update.de_json(telegram_update(fixture), None)
    assert update.effective_chat is not None and update.effective_user is not None
    chat = update.effective_chat.id
    other = MANAGERS if update.effective_chat.type == "private" else update.effective_user.id
    error = refused(
        judge("sendMessage", 403, {"description": KICKED}), chat if to_the_updates_chat else other
    )
    assert blocked_by_the_user(update, error) is blocked
    if not blocked:
        failure = classify(error)
        assert isinstance(failure, PermanentError)
        assert failure.reason == f"telegram sendMessage to chat {error.chat_id}: HTTP 403 {KICKED}"


def test_the_call_digest_ignores_upload_names_but_not_the_files_or_their_order() -> None:
    import hashlib

    from telegram import InputMediaPhoto
    from telegram.request import RequestData
    from telegram.request._requestparameter import RequestParameter

    from pipeline.telegram_bot.calls import call_digest

    def album(*files: bytes) -> RequestData:
        media = [InputMediaPhoto(data) for data in files]
        return RequestData(
            [RequestParameter.from_input("chat_id", ANNA), RequestParameter.from_input("media", media)]
        )

    assert call_digest("sendMediaGroup", album(RED, BLUE)) == call_digest("sendMediaGroup", album(RED, BLUE))
    assert call_digest("sendMediaGroup", album(RED, BLUE)) != call_digest("sendMediaGroup", album(BLUE, RED))
    assert call_digest("sendMediaGroup", album(RED, BLUE)) != call_digest("sendMediaGroup", album(RED, RED))
    # A call without uploads digests as before (journal entries written before still match).
    text = RequestData(
        [RequestParameter.from_input("chat_id", ANNA), RequestParameter.from_input("text", "Hi")]
    )
    before = hashlib.sha256(f"sendMessage\nchat_id={ANNA}\ntext=Hi".encode()).hexdigest()
    assert call_digest("sendMessage", text) == before


def test_the_bots_messages_are_paced_by_its_environments_share_and_its_other_calls_are_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bot consumer's Bot API calls go through `pipeline.pacing` like autoreply's: a message
    waits for its slot (the sleep it is given), a callback answer does not."""
    import asyncio
    from typing import Any

    from telegram.request import BaseRequest, RequestData
    from telegram.request._requestparameter import RequestParameter

    from pipeline import pacing
    from pipeline.registry import by_name
    from pipeline.telegram_bot.calls import JournaledRequest, journaled

    class Inner(BaseRequest):
        @property
        def read_timeout(self) -> float | None:
            return None

        async def initialize(self) -> None: ...

        async def shutdown(self) -> None: ...

        async def do_request(self, url: str, method: str, request_data: Any = None, **timeouts: Any) -> Any:
            return 200, b'{"ok": true, "result": true}'

    class NoJournal:
        def get(self, event_id: str, index: int) -> None:
            return None

        def put(self, *args: Any) -> None:
            return None

    now = [1000.0]
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    bot = by_name("bot")
    rate = float(bot.environment[pacing.SEND_RATE_ENV])
    monkeypatch.setattr(pacing, "_shared", pacing.Pacer(rate, clock=lambda: now[0]))
    monkeypatch.setenv(pacing.SEND_RATE_ENV, bot.environment[pacing.SEND_RATE_ENV])
    monkeypatch.setattr(asyncio, "sleep", sleep)
    request = JournaledRequest(Inner(), NoJournal())  # type: ignore[arg-type]

    def data(**params: object) -> RequestData:
        return RequestData([RequestParameter.from_input(name, value) for name, value in params.items()])

    async def step() -> None:
        with journaled("evt-1"):
            base = "https://api.telegram.org/botTOKEN"
            await request.do_request(f"{base}/sendMessage", "POST", data(chat_id=ANNA, text="one"))
            await request.do_request(f"{base}/answerCallbackQuery", "POST", data(callback_query_id="q"))
            await request.do_request(f"{base}/sendMessage", "POST", data(chat_id=ANNA, text="two"))

    asyncio.run(step())
    # The first message at once; the callback answer unpaced; the second a chat's second apart.
    assert slept == [0.0, pacing.TELEGRAM_CHAT_INTERVAL_SECONDS]
