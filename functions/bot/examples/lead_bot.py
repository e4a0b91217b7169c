"""An example bot: a short conversation collecting a phone number, confirmed with a button,
that ends in a CRM lead (the crm consumer's own code path, `crm.logic.create_lead`).

    /start    -> "Share your phone" (a reply keyboard with a request_contact button)
    contact   -> "Call you at +375...?" [Yes] [Change]    (a typed number works too)
    [Yes]     -> the lead is created, or (the crm consumer made it at /start) given the phone;
                 "Thanks, we will call you."
    [Change]  -> "Send your number again."
    /cancel   -> the conversation ends.

Plain python-telegram-bot: the handlers would run unchanged under `Application.run_polling()`.
Only `build` differs from a polling bot's main(): it gets the pipeline's ApplicationBuilder
and returns the built Application instead of running it. Deployed with
`-c bot_application=bot.examples.lead_bot:build` (`make local` runs it by default).
"""

from __future__ import annotations

import re
import warnings
from typing import Any

from telegram import (
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    KeyboardButton,
    ReplyKeyboardMarkup,
    ReplyKeyboardRemove,
    Update,
)
from telegram.ext import (
    Application,
    ApplicationBuilder,
    CallbackQueryHandler,
    CommandHandler,
    ContextTypes,
    ConversationHandler,
    MessageHandler,
    filters,
)
from telegram.warnings import PTBUserWarning

from pipeline.telegram_bot.calls import current_event_id

PHONE, CONFIRM = range(2)
NEW = filters.UpdateType.MESSAGE
CONVERSATION = "lead"
_PHONE = re.compile(r"^\+?[0-9][0-9 ()-]{5,18}[0-9]$")

ASK_PHONE = "Hi! Share your phone number and we will call you back."
CONFIRM_PREFIX = "Shall we call you at"
THANKS = "Thanks, we will call you soon."
KNOWN = "Thanks, you are already on our list: we will call you soon."
ASK_AGAIN = "Send your number again."
NOT_A_PHONE = "That does not look like a phone number: try +375291234567, or use the button."
CANCELLED = "Cancelled. Send /start to begin again."


async def start(update: Update, context: ContextTypes.DEFAULT_TYPE) -> int:
    assert update.message is not None
    keyboard = ReplyKeyboardMarkup(
        [[KeyboardButton("Share my phone", request_contact=True)]],
        one_time_keyboard=True,
        resize_keyboard=True,
    )
    await update.message.reply_text(ASK_PHONE, reply_markup=keyboard)
    return PHONE


async def _confirm(update: Update, context: ContextTypes.DEFAULT_TYPE, phone: str) -> int:
    assert update.message is not None and context.user_data is not None
    context.user_data["phone"] = phone
    await update.message.reply_text("Got it.", reply_markup=ReplyKeyboardRemove())
    buttons = InlineKeyboardMarkup(
        [
            [
                InlineKeyboardButton("Yes", callback_data="confirm"),
                InlineKeyboardButton("Change", callback_data="change"),
            ]
        ]
    )
    await update.message.reply_text(f"{CONFIRM_PREFIX} {phone}?", reply_markup=buttons)
    return CONFIRM


async def contact(update: Update, context: ContextTypes.DEFAULT_TYPE) -> int:
    message = update.message
    assert message is not None and message.contact is not None
    if message.contact.user_id not in (None, message.from_user.id if message.from_user else None):
        await message.reply_text("Please share your own number.")
        return PHONE
    return await _confirm(update, context, message.contact.phone_number)


async def typed_phone(update: Update, context: ContextTypes.DEFAULT_TYPE) -> int:
    assert update.message is not None and update.message.text is not None
    text = update.message.text.strip()
    if not _PHONE.fullmatch(text):
        await update.message.reply_text(NOT_A_PHONE)
        return PHONE
    return await _confirm(update, context, text)


async def confirmed(update: Update, context: ContextTypes.DEFAULT_TYPE) -> int:
    from crm.leads import Lead  # the crm consumer's model and claim: one lead per contact
    from crm.logic import create_lead

    query = update.callback_query
    assert query is not None and context.user_data is not None and update.effective_chat is not None
    await query.answer()
    user = query.from_user
    lead = Lead(
        event_id=current_event_id() or f"telegram-bot:{update.update_id}",
        trigger="contact",
        telegram_user_id=user.id,
        chat_id=update.effective_chat.id,
        username=user.username,
        first_name=user.first_name,
        last_name=user.last_name,
        phone=context.user_data.get("phone"),
        language_code=user.language_code,
    )
    outcome = create_lead(lead)  # raises to retry the step while another event writes the lead
    await query.edit_message_text(THANKS if outcome["lead"] in ("created", "updated", "unchanged") else KNOWN)
    context.user_data.pop("phone", None)
    return ConversationHandler.END


async def change(update: Update, context: ContextTypes.DEFAULT_TYPE) -> int:
    query = update.callback_query
    assert query is not None
    await query.answer()
    await query.edit_message_text(ASK_AGAIN)
    return PHONE


async def cancel(update: Update, context: ContextTypes.DEFAULT_TYPE) -> int:
    assert update.message is not None
    await update.message.reply_text(CANCELLED, reply_markup=ReplyKeyboardRemove())
    return ConversationHandler.END


def conversation() -> ConversationHandler[Any]:
    with warnings.catch_warnings():
        # PTB notes that with per_message=False a button is tracked per chat, not per message:
        # what this conversation wants (one open question per chat).
        warnings.simplefilter("ignore", PTBUserWarning)
        return ConversationHandler(
            # New messages only: PTB's message handlers also match edits by default, and an
            # edited "/start" or phone is not a new step (the handlers read `update.message`).
            entry_points=[CommandHandler("start", start, filters=NEW)],
            states={
                PHONE: [
                    MessageHandler(NEW & filters.CONTACT, contact),
                    MessageHandler(NEW & filters.TEXT & ~filters.COMMAND, typed_phone),
                ],
                CONFIRM: [
                    CallbackQueryHandler(confirmed, pattern="^confirm$"),
                    CallbackQueryHandler(change, pattern="^change$"),
                ],
            },
            fallbacks=[CommandHandler("cancel", cancel, filters=NEW)],
            name=CONVERSATION,
            persistent=True,
        )


def build(builder: ApplicationBuilder) -> Application:  # type: ignore[type-arg]
    """What a polling bot's main() does before run_polling(), on the pipeline's builder."""
    application = builder.build()
    application.add_handler(conversation())
    return application
