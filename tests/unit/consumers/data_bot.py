"""A test bot using python-telegram-bot's chat and user data the ways PTB documents: a group's
migration to a supergroup (`migrate_chat_data`), another chat's data changed and marked
(`mark_data_for_update_persistence`), dropped chat and user data, another chat's data read, and
a chat's data changed by handlers of two groups."""

from __future__ import annotations

from typing import Any

from telegram import Update
from telegram.ext import (
    Application,
    ApplicationBuilder,
    CommandHandler,
    ContextTypes,
    MessageHandler,
    filters,
)


async def migrate(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    """PTB's documented handling of a group becoming a supergroup."""
    context.application.migrate_chat_data(message=update.message)


async def note(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    """`/note <text>`: the chat's note, and how many notes the user wrote."""
    assert context.chat_data is not None and context.user_data is not None
    context.chat_data["note"] = " ".join(context.args or [])
    context.user_data["notes"] = context.user_data.get("notes", 0) + 1


async def tell(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    """`/tell <chat id> <text>`: another chat's note, marked for the persistence as PTB says."""
    chat_id, *words = context.args or []
    context.application.chat_data[int(chat_id)]["note"] = " ".join(words)
    context.application.mark_data_for_update_persistence(chat_ids=int(chat_id))


async def peek(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    """`/peek <chat id>`: replies with another chat's note."""
    assert update.message is not None
    [chat_id] = context.args or []
    await update.message.reply_text(f"note: {context.application.chat_data[int(chat_id)].get('note')}")


async def forget_chat(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    """`/forgetchat <chat id>`."""
    [chat_id] = context.args or []
    context.application.drop_chat_data(int(chat_id))


async def forget_user(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    """`/forgetuser <user id>`."""
    [user_id] = context.args or []
    context.application.drop_user_data(int(user_id))


async def forget_then_fail(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    """`/forgetbroken <chat id>`: drops a chat's data, then fails (a handler bug)."""
    [chat_id] = context.args or []
    context.application.drop_chat_data(int(chat_id))
    raise ValueError("handler bug after a drop")


async def count(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    """`/count`, group 0."""
    assert context.chat_data is not None
    context.chat_data["count"] = context.chat_data.get("count", 0) + 1


async def seen(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    """`/count`, group 1: the same update, the same chat's data."""
    assert context.chat_data is not None
    context.chat_data["seen"] = context.chat_data.get("seen", 0) + 1


def build(builder: ApplicationBuilder) -> Application[Any, Any, Any, Any, Any, Any]:  # type: ignore[type-arg]
    application = builder.build()
    application.add_handler(MessageHandler(filters.StatusUpdate.MIGRATE, migrate))
    application.add_handler(CommandHandler("note", note))
    application.add_handler(CommandHandler("tell", tell))
    application.add_handler(CommandHandler("peek", peek))
    application.add_handler(CommandHandler("forgetchat", forget_chat))
    application.add_handler(CommandHandler("forgetuser", forget_user))
    application.add_handler(CommandHandler("forgetbroken", forget_then_fail))
    application.add_handler(CommandHandler("count", count))
    application.add_handler(CommandHandler("count", seen), group=1)
    return application
