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

    from pipeline.telegram_bot.calls import ForbiddenCall
    from pipeline.telegram_bot.engine import blocked_by_the_user, classify

    update = Update.de_json(telegram_update(fixture), None)
    assert update.effective_chat is not None and update.effective_user is not None
    chat = update.effective_chat.id
    other = MANAGERS if update.effective_chat.type == "private" else update.effective_user.id
    error = ForbiddenCall(KICKED, "sendMessage", chat if to_the_updates_chat else other)
    assert blocked_by_the_user(update, error) is blocked
    if not blocked:
        refused = classify(error)
        assert type(refused) is PermanentError
        assert refused.reason == f"telegram: forbidden: sendMessage to chat {error.chat_id}: {KICKED}"


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
