"""Bots that would lose steps across Lambda instances, each refused when the engine builds it
(pipeline.telegram_bot.inspection): the same conversation, made unsafe in one way each."""

from __future__ import annotations

import warnings
from typing import Any

from bot.examples import lead_bot
from telegram.ext import (
    Application,
    ApplicationBuilder,
    CallbackQueryHandler,
    CommandHandler,
    ConversationHandler,
)
from telegram.warnings import PTBUserWarning

AppType = Application[Any, Any, Any, Any, Any, Any]


def _conversation(name: str, persistent: bool, **states: Any) -> ConversationHandler[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBUserWarning)  # per_message=False with buttons: wanted
        return ConversationHandler(
            entry_points=[CommandHandler("start", lead_bot.start)],
            states={lead_bot.PHONE: [CallbackQueryHandler(lead_bot.change)], **states},
            fallbacks=[],
            name=name,
            persistent=persistent,
        )


def not_persistent(builder: ApplicationBuilder) -> AppType:  # type: ignore[type-arg]
    application = builder.build()
    application.add_handler(_conversation("survey", persistent=False))
    return application


def not_persistent_in_a_later_group(builder: ApplicationBuilder) -> AppType:  # type: ignore[type-arg]
    application = lead_bot.build(builder)
    application.add_handler(_conversation("survey", persistent=False), group=1)
    return application


def not_persistent_nested_in_a_state(builder: ApplicationBuilder) -> AppType:  # type: ignore[type-arg]
    application = builder.build()
    inner = _conversation("details", persistent=False)
    application.add_handler(_conversation("survey", persistent=True, **{"details": [inner]}))
    return application


def arbitrary_callback_data(builder: ApplicationBuilder) -> AppType:  # type: ignore[type-arg]
    application = builder.arbitrary_callback_data(True).build()
    application.add_handler(_conversation("survey", persistent=True))
    return application
