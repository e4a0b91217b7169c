"""Answer users through the Telegram Bot API.

What gets an answer:

- A message starting with a command that has a reply (`/start`, `/help` by default) gets that
  reply with `sendMessage` in the same chat (and topic, and business connection).
- Any other message (plain text, a photo, an unknown command) gets the `"default"` reply when
  one is configured, and nothing otherwise: a bot that answers every line in a group is noise,
  and the CRM team answers real questions themselves.
- A callback query (an inline button press) gets `answerCallbackQuery`, which stops the
  button's loading spinner; Telegram expects it within seconds.

Replies are the team's (`team/autoreply.json`), passed in env AUTOREPLY_REPLIES, the whole table,
e.g. `{"/start": "Hi!", "/help": "...", "default": "We'll be in touch."}`; a null or "" value is
no reply (`pipeline.replies`, which the stack also checks the file with at synth). Command keys
match case-insensitively and without "@botname".

A command naming another bot (`/start@other_bot`, in a group with several bots) gets no reply
at all, not even the default one, when the bot's own username is known: env
TELEGRAM_BOT_USERNAME, from the `telegram_bot_username` deployment setting. Without it, every
command is taken as this bot's.

Failures are judged by the Bot API error table the bot engine reads too
(`pipeline.bot_api_errors`): an answer saying the call's effect already holds (a callback query
already answered, or too late to answer) is success; 429 retries after Telegram's `retry_after`,
5xx and timeouts with backoff; a chat that can no longer be written to (the user blocked the bot,
the bot left the group, the chat is gone) is recorded as `blocked#<chat_id>` in the journal table
and the record acknowledged: retrying cannot help and it is not a fault; a refused token (401)
pauses the record; any other refusal (400) dead-letters it with Telegram's description.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from pipeline.blocked import unreachable
from pipeline.bot_api import BotApi
from pipeline.bot_api_errors import ChatUnreachable
from pipeline.envelope import Envelope
from pipeline.errors import PermanentError
from pipeline.registry import MESSAGE_KINDS
from pipeline.replies import DEFAULT_KEY, RepliesError, replies_in_force
from pipeline.secrets import secret_string, with_refreshed_secret
from pipeline.telegram import TelegramUpdate, bot_command, chat_of, integer_id, own_username, user_of

logger = Logger(child=True)
metrics = Metrics()
# The bot token: re-read once past the cache when Telegram refuses it (401).
TOKEN_SECRET = "telegram_bot_token"  # noqa: S105 - the registry name of the secret, not a value


def replies() -> dict[str, str]:
    """The reply table in force (AUTOREPLY_REPLIES, else the team's file)."""
    try:
        return replies_in_force()
    except RepliesError as error:
        raise PermanentError(str(error)) from None


def reply_text(update: TelegramUpdate) -> str | None:
    table = replies()
    found = bot_command(update)
    if found is not None and not found.addressed_to(own_username()):
        return None  # another bot's command: its bot answers
    if found is not None and found.name in table:
        return table[found.name]
    return table.get(DEFAULT_KEY)


def _call(envelope: Envelope, chat_id: int, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    def send() -> None:
        BotApi(secret_string(TOKEN_SECRET)).call(method, params)

    try:
        # A token refused (401) is re-read once past the cache: a rotated token works at once.
        with_refreshed_secret(TOKEN_SECRET, send)
    except ChatUnreachable as error:
        # The consumer writes only to the update's own chat: it is that chat which is gone.
        return {"reply": "blocked", **unreachable(error, envelope.event_id, chat_id)}
    metrics.add_metric(name="RepliesSent", unit=MetricUnit.Count, value=1)
    logger.debug("reply sent", extra={"chat_id": chat_id, "method": method})
    return {"reply": "sent", "method": method, "chat_id": chat_id}


def message_reply(envelope: Envelope) -> dict[str, Any] | str:
    """The `sendMessage` parameters of this consumer's reply to a message, or why it sends none.
    The benchmarks ask it too (`bench.pipeline`: which updates get a reply)."""
    if envelope.type not in MESSAGE_KINDS:
        return f"{envelope.type} is not answered"
    message = envelope.payload.get(envelope.type)
    chat_id = integer_id(chat_of(envelope.payload, envelope.type))
    if not isinstance(message, Mapping) or chat_id is None:
        return "no chat"
    text = reply_text(TelegramUpdate.parse(envelope.payload))
    if text is None:
        return "no reply for this message"
    params: dict[str, Any] = {"chat_id": chat_id, "text": text}
    if isinstance(message.get("business_connection_id"), str):
        params["business_connection_id"] = message["business_connection_id"]
    if message.get("is_topic_message") is True and isinstance(message.get("message_thread_id"), int):
        params["message_thread_id"] = message["message_thread_id"]
    return params


def _answer_callback(envelope: Envelope) -> dict[str, Any]:
    query = envelope.payload.get("callback_query")
    query_id = query.get("id") if isinstance(query, Mapping) else None
    # The chat the button was in; for a button on an inline-mode message, the user's own chat.
    chat_id = integer_id(chat_of(envelope.payload, envelope.type)) or integer_id(
        user_of(envelope.payload, envelope.type)
    )
    if not isinstance(query_id, str) or chat_id is None:
        raise PermanentError("callback_query without id or user")
    return _call(envelope, chat_id, "answerCallbackQuery", {"callback_query_id": query_id})


def autoreply(envelope: Envelope) -> dict[str, Any]:
    """The worker's `process` for the autoreply consumer."""
    if envelope.type == "callback_query":
        return _answer_callback(envelope)
    reply = message_reply(envelope)
    if isinstance(reply, str):
        return {"reply": "skipped", "reason": reply}
    return _call(envelope, reply["chat_id"], "sendMessage", reply)
