"""An example bot that remembers what a user told it across restarts: a persistent
`ConversationHandler` over a reply keyboard, its answers kept in `user_data`.

    /start        -> a greeting (naming what it already knows) and a keyboard of topics
    "Age"/"City"  -> "Your age? ..."; the next text is kept as the answer
    "Something else..." -> asks for the topic's name first, then for the answer
    "Done"        -> everything it learned; the conversation ends (user_data stays)
    /show_data    -> what it knows, at any time (outside the conversation)

Written for the pipeline's tests in the shape of python-telegram-bot's persistent-conversation
example: plain PTB, only `build` differs from a polling bot's main(). Its conversation state and
`user_data` live in the `bot_state` table, so a new worker process (a restart, a cold start)
carries on where the last one stopped (tests/e2e/test_bot_examples_restart.py).
"""

from __future__ import annotations

import warnings

from telegram import ReplyKeyboardMarkup, ReplyKeyboardRemove, Update
from telegram.ext import (
    Application,
    ApplicationBuilder,
    CommandHandler,
    ContextTypes,
    ConversationHandler,
    MessageHandler,
    filters,
)
from telegram.warnings import PTBUserWarning

CHOOSING, TYPING_REPLY, TYPING_CHOICE = range(3)
CONVERSATION = "profile"
TOPICS = ReplyKeyboardMarkup([["Age", "City"], ["Something else..."], ["Done"]], one_time_keyboard=True)
ANSWER = filters.TEXT & ~(filters.COMMAND | filters.Regex("^Done$"))


def known(user_data: dict[str, str]) -> str:
    return "; ".join(f"{topic}: {value}" for topic, value in user_data.items() if topic != "choice")


async def start(update: Update, context: ContextTypes.DEFAULT_TYPE) -> int:
    assert update.message is not None and context.user_data is not None
    facts = known(context.user_data)
    greeting = f"Hi again! I know your {facts}." if facts else "Hi! Tell me about yourself."
    await update.message.reply_text(f"{greeting} Pick a topic.", reply_markup=TOPICS)
    return CHOOSING


async def topic_chosen(update: Update, context: ContextTypes.DEFAULT_TYPE) -> int:
    assert update.message is not None and update.message.text is not None and context.user_data is not None
    topic = update.message.text.lower()
    context.user_data["choice"] = topic
    before = context.user_data.get(topic)
    await update.message.reply_text(
        f"Your {topic}? Last time you said {before}." if before else f"Your {topic}? Tell me."
    )
    return TYPING_REPLY


async def other_topic(update: Update, context: ContextTypes.DEFAULT_TYPE) -> int:
    assert update.message is not None
    await update.message.reply_text("Which topic? For example: favourite food.")
    return TYPING_CHOICE


async def answered(update: Update, context: ContextTypes.DEFAULT_TYPE) -> int:
    assert update.message is not None and update.message.text is not None and context.user_data is not None
    topic = context.user_data.pop("choice")
    context.user_data[topic] = update.message.text
    await update.message.reply_text(f"Noted. So far: {known(context.user_data)}.", reply_markup=TOPICS)
    return CHOOSING


async def show_data(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    assert update.message is not None and context.user_data is not None
    await update.message.reply_text(f"What I know: {known(context.user_data) or 'nothing yet'}.")


async def done(update: Update, context: ContextTypes.DEFAULT_TYPE) -> int:
    assert update.message is not None and context.user_data is not None
    context.user_data.pop("choice", None)
    await update.message.reply_text(
        f"I learned: {known(context.user_data)}. Until next time!", reply_markup=ReplyKeyboardRemove()
    )
    return ConversationHandler.END


def build(builder: ApplicationBuilder) -> Application:  # type: ignore[type-arg]
    """What a polling bot's main() does before run_polling(), on the pipeline's builder (which
    brings the persistence: no PicklePersistence here)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBUserWarning)
        conversation: ConversationHandler[ContextTypes.DEFAULT_TYPE] = ConversationHandler(
            entry_points=[CommandHandler("start", start)],
            states={
                CHOOSING: [
                    MessageHandler(filters.Regex("^(Age|City)$"), topic_chosen),
                    MessageHandler(filters.Regex("^Something else...$"), other_topic),
                ],
                TYPING_CHOICE: [MessageHandler(ANSWER, topic_chosen)],
                TYPING_REPLY: [MessageHandler(ANSWER, answered)],
            },
            fallbacks=[MessageHandler(filters.Regex("^Done$"), done)],
            name=CONVERSATION,
            persistent=True,
        )
    application = builder.build()
    application.add_handler(conversation)
    application.add_handler(CommandHandler("show_data", show_data))
    return application
