"""The Telegram `Update` as the webhook ingests it, and the routing attributes derived from it.

The model checks only what routing needs (an integer `update_id`, each known kind an object) and
keeps everything else: the envelope carries the body exactly as received, and consumers parse
the parts they use. Unknown keys are allowed so that a kind added to the Bot API after this code
was written is still published (under its own name as `type`) instead of being refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt

UNKNOWN_TYPE = "unknown"

# Every update kind of the Bot API as of aiogram 3.31 (`aiogram.types.Update`), in its order;
# tests/unit/webhook checks this tuple against aiogram so a new kind is noticed.
UPDATE_KINDS: tuple[str, ...] = (
    "message",
    "edited_message",
    "channel_post",
    "edited_channel_post",
    "business_connection",
    "business_message",
    "edited_business_message",
    "deleted_business_messages",
    "guest_message",
    "message_reaction",
    "message_reaction_count",
    "inline_query",
    "chosen_inline_result",
    "callback_query",
    "shipping_query",
    "pre_checkout_query",
    "purchased_paid_media",
    "poll",
    "poll_answer",
    "my_chat_member",
    "chat_member",
    "chat_join_request",
    "chat_boost",
    "removed_chat_boost",
    "managed_bot",
    "subscription",
    "stopped_message_generation",
)

# Kinds whose value is a `Message`: the ones that can carry a bot command.
MESSAGE_UPDATE_KINDS: frozenset[str] = frozenset(
    {
        "message",
        "edited_message",
        "channel_post",
        "edited_channel_post",
        "business_message",
        "edited_business_message",
        "guest_message",
    }
)

# Where each kind keeps the type of the chat it happened in ("private", "group", ...), as a
# path of keys from the kind's object. Kinds absent here have no chat (inline results,
# payments, polls, business connections, ...).
CHAT_TYPE_PATHS: dict[str, tuple[str, ...]] = {
    **{kind: ("chat", "type") for kind in MESSAGE_UPDATE_KINDS},
    "deleted_business_messages": ("chat", "type"),
    "message_reaction": ("chat", "type"),
    "message_reaction_count": ("chat", "type"),
    "callback_query": ("message", "chat", "type"),
    # Inline queries carry the chat type itself (absent when unknown, e.g. secret chats).
    "inline_query": ("chat_type",),
    "my_chat_member": ("chat", "type"),
    "chat_member": ("chat", "type"),
    "chat_join_request": ("chat", "type"),
    "chat_boost": ("chat", "type"),
    "removed_chat_boost": ("chat", "type"),
    "stopped_message_generation": ("chat", "type"),
}

# A kind name we would publish for an update key we do not know: Bot API kinds are snake_case.
_FUTURE_KIND = re.compile(r"[a-z][a-z0-9_]{0,63}")
# A bot command: "/" then 1-32 letters, digits or underscores (Bot API `BotCommand.command`).
_COMMAND = re.compile(r"/[A-Za-z0-9_]{1,32}")
# Routing attribute values come from the update: keep them short and printable.
_ATTRIBUTE_VALUE = re.compile(r"[a-z_]{1,32}")

KindObject = dict[str, Any] | None


class TelegramUpdate(BaseModel):
    """An incoming update: strict integer `update_id`, known kinds objects, unknown keys kept."""

    model_config = ConfigDict(extra="allow", frozen=True)

    update_id: StrictInt = Field(description="Telegram's id; the same update resent keeps it")

    message: KindObject = None
    edited_message: KindObject = None
    channel_post: KindObject = None
    edited_channel_post: KindObject = None
    business_connection: KindObject = None
    business_message: KindObject = None
    edited_business_message: KindObject = None
    deleted_business_messages: KindObject = None
    guest_message: KindObject = None
    message_reaction: KindObject = None
    message_reaction_count: KindObject = None
    inline_query: KindObject = None
    chosen_inline_result: KindObject = None
    callback_query: KindObject = None
    shipping_query: KindObject = None
    pre_checkout_query: KindObject = None
    purchased_paid_media: KindObject = None
    poll: KindObject = None
    poll_answer: KindObject = None
    my_chat_member: KindObject = None
    chat_member: KindObject = None
    chat_join_request: KindObject = None
    chat_boost: KindObject = None
    removed_chat_boost: KindObject = None
    managed_bot: KindObject = None
    subscription: KindObject = None
    stopped_message_generation: KindObject = None

    def kind_object(self, kind: str) -> Any:
        """The value of `kind` in this update (a known field or an extra key), or None."""
        if kind in UPDATE_KINDS:
            return getattr(self, kind)
        return (self.model_extra or {}).get(kind)


def update_type(update: TelegramUpdate) -> str:
    """The kind of the update: the first known kind present, else an unknown snake_case key."""
    for kind in UPDATE_KINDS:
        if getattr(update, kind) is not None:
            return kind
    for key in update.model_extra or {}:
        if _FUTURE_KIND.fullmatch(key):
            return key
    return UNKNOWN_TYPE


def _dig(value: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def chat_type(update: TelegramUpdate) -> str | None:
    """Type of the chat the update happened in ("private", "group", ...), when it has one."""
    kind = update_type(update)
    path = CHAT_TYPE_PATHS.get(kind)
    if path is None:
        return None
    value = _dig(update.kind_object(kind), path)
    return value if isinstance(value, str) and _ATTRIBUTE_VALUE.fullmatch(value) else None


def command(update: TelegramUpdate) -> str | None:
    """The bot command a message starts with, lowercased and without "@botname" ("/start").

    Telegram marks it with a `bot_command` entity at offset 0; entity offsets and lengths count
    UTF-16 code units, so the text is cut in UTF-16.
    """
    kind = update_type(update)
    if kind not in MESSAGE_UPDATE_KINDS:
        return None
    message = update.kind_object(kind)
    text, entities = message.get("text"), message.get("entities")
    if not isinstance(text, str) or not isinstance(entities, list):
        return None
    for entity in entities:
        if (
            isinstance(entity, Mapping)
            and entity.get("type") == "bot_command"
            and _is_int(entity.get("offset"))
            and entity["offset"] == 0
            and _is_int(entity.get("length"))
            and entity["length"] > 0
        ):
            units = text.encode("utf-16-le", errors="surrogatepass")[: 2 * entity["length"]]
            found = _COMMAND.match(units.decode("utf-16-le", errors="ignore"))
            return found.group(0).lower() if found else None
    return None
