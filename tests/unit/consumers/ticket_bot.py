"""A test bot handing out ticket numbers from `bot_data`, the state every chat shares: the
shape of issue 22's race (two chats' steps read the same counter, one commit loses)."""

from __future__ import annotations

from typing import Any

from telegram import Update
from telegram.ext import Application, ApplicationBuilder, CommandHandler, ContextTypes

TICKET = "Your ticket is #{}."


async def ticket(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    assert update.message is not None
    number = context.bot_data.get("next", 1)
    await update.message.reply_text(TICKET.format(number))
    context.bot_data["next"] = number + 1


def build(builder: ApplicationBuilder) -> Application[Any, Any, Any, Any, Any, Any]:  # type: ignore[type-arg]
    application = builder.build()
    application.add_handler(CommandHandler("ticket", ticket))
    return application
