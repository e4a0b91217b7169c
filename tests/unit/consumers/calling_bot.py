"""A bot for the Bot API error table's tests (tests/unit/consumers/test_bot_api_errors.py): on
/start it makes the one call TEST_BOT_CALL names ({"method", "params"}), then says AFTER, so a
test sees whether the step went on."""

from __future__ import annotations

import json
import os
from typing import Any

from telegram import Update
from telegram.ext import CommandHandler, ContextTypes

CALL_ENV = "TEST_BOT_CALL"
AFTER = "the step went on"


async def start(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    assert update.effective_chat is not None
    call = json.loads(os.environ[CALL_ENV])
    await context.bot.do_api_request(call["method"], api_kwargs=call["params"])
    await context.bot.send_message(update.effective_chat.id, AFTER)


def build(builder: Any) -> Any:
    application = builder.build()
    application.add_handler(CommandHandler("start", start))
    return application
