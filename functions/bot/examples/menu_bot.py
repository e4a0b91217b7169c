"""An example bot driven by inline buttons: a persistent `ConversationHandler` of
`CallbackQueryHandler`s, each press answered and the menu's message edited in place.

    /start                 -> "Pick a size" [Small] [Large]
    [Small] / [Large]      -> the message becomes "Pick a topping" [Cheese] [Mushrooms]
    [Cheese] / [Mushrooms] -> "A small pizza with cheese. Order it?" [Order] [Start over]
    [Order]                -> "Ordered: a small pizza with cheese." (the conversation ends)
    [Start over]           -> back to "Pick a size"

Written for the pipeline's tests in the shape of python-telegram-bot's inline-keyboard example
(whose ConversationHandler is built in main(): here in `build`, given `name=` and
`persistent=True` so a press reaches the right step after a restart). Plain PTB otherwise.
"""

from __future__ import annotations

import warnings

from telegram import InlineKeyboardButton, InlineKeyboardMarkup, Update
from telegram.ext import (
    Application,
    ApplicationBuilder,
    CallbackQueryHandler,
    CommandHandler,
    ContextTypes,
    ConversationHandler,
)
from telegram.warnings import PTBUserWarning

SIZE, TOPPING, CONFIRM = range(3)
CONVERSATION = "menu"


def buttons(*labels: str) -> InlineKeyboardMarkup:
    return InlineKeyboardMarkup(
        [[InlineKeyboardButton(label, callback_data=label.lower()) for label in labels]]
    )


async def start(update: Update, context: ContextTypes.DEFAULT_TYPE) -> int:
    assert update.message is not None
    await update.message.reply_text("Pick a size", reply_markup=buttons("Small", "Large"))
    return SIZE


async def start_over(update: Update, context: ContextTypes.DEFAULT_TYPE) -> int:
    query = update.callback_query
    assert query is not None
    await query.answer()
    await query.edit_message_text("Pick a size", reply_markup=buttons("Small", "Large"))
    return SIZE


async def size(update: Update, context: ContextTypes.DEFAULT_TYPE) -> int:
    query = update.callback_query
    assert query is not None and query.data is not None and context.user_data is not None
    await query.answer()
    context.user_data["size"] = query.data
    await query.edit_message_text(
        f"{query.data.capitalize()} it is. Pick a topping", reply_markup=buttons("Cheese", "Mushrooms")
    )
    return TOPPING


async def topping(update: Update, context: ContextTypes.DEFAULT_TYPE) -> int:
    query = update.callback_query
    assert query is not None and query.data is not None and context.user_data is not None
    await query.answer()
    context.user_data["topping"] = query.data
    await query.edit_message_text(
        f"A {context.user_data['size']} pizza with {query.data}. Order it?",
        reply_markup=buttons("Order", "Start over"),
    )
    return CONFIRM


async def order(update: Update, context: ContextTypes.DEFAULT_TYPE) -> int:
    query = update.callback_query
    assert query is not None and context.user_data is not None
    await query.answer("Thanks!")
    await query.edit_message_text(
        f"Ordered: a {context.user_data.pop('size')} pizza with {context.user_data.pop('topping')}."
    )
    return ConversationHandler.END


def build(builder: ApplicationBuilder) -> Application:  # type: ignore[type-arg]
    """What a polling bot's main() does before run_polling(), on the pipeline's builder."""
    with warnings.catch_warnings():
        # per_message=False: one open menu per chat, which is what this conversation wants.
        warnings.simplefilter("ignore", PTBUserWarning)
        conversation: ConversationHandler[ContextTypes.DEFAULT_TYPE] = ConversationHandler(
            entry_points=[CommandHandler("start", start)],
            states={
                SIZE: [CallbackQueryHandler(size, pattern="^(small|large)$")],
                TOPPING: [CallbackQueryHandler(topping, pattern="^(cheese|mushrooms)$")],
                CONFIRM: [
                    CallbackQueryHandler(order, pattern="^order$"),
                    CallbackQueryHandler(start_over, pattern="^start over$"),
                ],
            },
            fallbacks=[CommandHandler("start", start)],
            name=CONVERSATION,
            persistent=True,
        )
    application = builder.build()
    application.add_handler(conversation)
    return application
