"""The Telegram `Update`: its kinds, where each keeps its chat and user, and routing attributes.

One table (`KINDS`) says, per update kind, where its chat and the user who caused it live; the
webhook's routing attributes (`update_type`, `chat_type`, `command`, together in
`pipeline.publication`)
and the consumers' lookups (`chat_of`, `user_of`) are all read from it, so a kind is described
once.

`TelegramUpdate` checks only what routing needs (an integer `update_id`, each known kind an object)
and keeps everything else: the envelope carries the body exactly as received, and consumers parse
the parts they use. Unknown keys are allowed so that a kind added to the Bot API after this code
was written is still published (under its own name as `type`) instead of being refused.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.validation import Fields

UNKNOWN_TYPE = "unknown"

KeyPath = tuple[str, ...]


@dataclass(frozen=True)
class KindLayout:
    """Where one update kind keeps things, as paths of keys from the kind's object.

    Paths use the Bot API's JSON names (`from`, not aiogram's `from_user`); tests check every
    path against aiogram's models and its own reading of chat and user (`EventContext`).
    """

    chat: KeyPath | None = None
    """The `Chat` the update happened in; None for kinds without one (inline, payments, polls)."""
    user: KeyPath | None = None
    """The `User` who caused the update; None for kinds without one (channel boosts, polls)."""
    is_message: bool = False
    """The kind's object is a `Message`, the only kind that can carry a bot command."""
    chat_type_only: KeyPath | None = None
    """Where the chat type is for a kind that names it without a `Chat` (inline queries)."""

    @property
    def chat_type(self) -> KeyPath | None:
        """Where the type of the chat ("private", "group", ...) is, when the kind has one."""
        return (*self.chat, "type") if self.chat is not None else self.chat_type_only


_MESSAGE = KindLayout(chat=("chat",), user=("from",), is_message=True)
_IN_CHAT = KindLayout(chat=("chat",))
_BY_USER = KindLayout(user=("from",))
_MEMBER = KindLayout(chat=("chat",), user=("from",))

# Every update kind of the Bot API as of aiogram 3.31 (`aiogram.types.Update`), in its order;
# tests/unit/webhook checks this table against aiogram so a new kind is noticed.
KINDS: dict[str, KindLayout] = {
    "message": _MESSAGE,
    "edited_message": _MESSAGE,
    # Channel posts have no `from` (a post is the channel's); the path is there when it is.
    "channel_post": _MESSAGE,
    "edited_channel_post": _MESSAGE,
    "business_connection": KindLayout(user=("user",)),
    "business_message": _MESSAGE,
    "edited_business_message": _MESSAGE,
    "deleted_business_messages": _IN_CHAT,
    "guest_message": _MESSAGE,
    "message_reaction": KindLayout(chat=("chat",), user=("user",)),
    "message_reaction_count": _IN_CHAT,
    # Inline queries carry the chat type itself (absent when unknown, e.g. secret chats).
    "inline_query": KindLayout(user=("from",), chat_type_only=("chat_type",)),
    "chosen_inline_result": _BY_USER,
    # The chat of the message the button was attached to (absent for inline-mode messages).
    "callback_query": KindLayout(chat=("message", "chat"), user=("from",)),
    "shipping_query": _BY_USER,
    "pre_checkout_query": _BY_USER,
    "purchased_paid_media": _BY_USER,
    "poll": KindLayout(),
    # `voter_chat` is set only when an anonymous chat voted.
    "poll_answer": KindLayout(chat=("voter_chat",), user=("user",)),
    "my_chat_member": _MEMBER,
    "chat_member": _MEMBER,
    "chat_join_request": _MEMBER,
    "chat_boost": _IN_CHAT,
    "removed_chat_boost": _IN_CHAT,
    "managed_bot": KindLayout(user=("user",)),
    "subscription": KindLayout(user=("user",)),
    "stopped_message_generation": _IN_CHAT,
}
UPDATE_KINDS: tuple[str, ...] = tuple(KINDS)
MESSAGE_UPDATE_KINDS: frozenset[str] = frozenset(kind for kind, layout in KINDS.items() if layout.is_message)

# A kind name we would publish for an update key we do not know: Bot API kinds are snake_case.
_FUTURE_KIND = re.compile(r"[a-z][a-z0-9_]{0,63}")
# A bot command entity: "/" then 1-32 letters, digits or underscores (Bot API
# `BotCommand.command`), then optionally "@" and the bot's username (the form used in groups).
_COMMAND = re.compile(r"(?P<name>/[A-Za-z0-9_]{1,32})(?:@(?P<bot>[A-Za-z0-9_]{1,64}))?")
# The environment variable holding the bot's own username (without "@"), where it is configured.
BOT_USERNAME_ENV = "TELEGRAM_BOT_USERNAME"
# Routing attribute values come from the update: keep them short and printable.
_ATTRIBUTE_VALUE = re.compile(r"[a-z_]{1,32}")


class TelegramUpdate:
    """An incoming update: strict integer `update_id`, known kinds objects, unknown keys kept.

    Checked by hand (`pipeline.validation`): the webhook reads one per request, cold or warm,
    and pydantic would cost its cold start about 0.4x of `import boto3`.
    """

    __slots__ = ("_data", "update_id")

    def __init__(self, update_id: int, data: Mapping[str, Any]) -> None:
        self.update_id = update_id
        """Telegram's id; the same update resent keeps it."""
        self._data = data

    @classmethod
    def parse(cls, data: Any) -> TelegramUpdate:
        """The update (a Bot API JSON object), or `Invalid` naming each field refused."""
        fields = Fields("TelegramUpdate", data)
        update_id = fields.integer("update_id", strict=True)
        for kind in UPDATE_KINDS:
            fields.mapping(kind, default=None)
        fields.done()
        return cls(update_id, data)

    def kind_object(self, kind: str) -> Any:
        """The value of `kind` in this update (a known kind or another key), or None."""
        return self._data.get(kind)

    def other_keys(self) -> list[str]:
        """The update's keys that are neither `update_id` nor a kind this code knows."""
        return [key for key in self._data if key != "update_id" and key not in KINDS]


def update_type(update: TelegramUpdate) -> str:
    """The kind of the update: the first known kind present, else an unknown snake_case key."""
    for kind in UPDATE_KINDS:
        if update.kind_object(kind) is not None:
            return kind
    for key in update.other_keys():
        if _FUTURE_KIND.fullmatch(key):
            return key
    return UNKNOWN_TYPE


def dig(value: Any, path: KeyPath) -> Any:
    """The value at `path` in nested mappings, or None when any step is missing."""
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def integer_id(obj: Mapping[str, Any] | None) -> int | None:
    """`obj["id"]` when it is a real integer (Telegram ids are 52-bit integers), else None."""
    value = obj.get("id") if obj is not None else None
    return value if _is_int(value) else None


def _object_at(kind_object: Any, path: KeyPath | None) -> dict[str, Any] | None:
    found = dig(kind_object, path) if path is not None else None
    return found if isinstance(found, dict) else None


def chat_of(update: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    """The `Chat` object the update (a Bot API JSON dict) of this kind happened in, or None."""
    layout = KINDS.get(kind)
    return _object_at(update.get(kind), layout.chat if layout else None)


def user_of(update: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    """The `User` object who caused the update (a Bot API JSON dict) of this kind, or None."""
    layout = KINDS.get(kind)
    return _object_at(update.get(kind), layout.user if layout else None)


def chat_group(update: Mapping[str, Any], kind: str, bot_id: str) -> str:
    """The FIFO message group of an update (a Bot API JSON dict) of this kind: its chat
    (`telegram:<bot>:chat:<id>`), else the user who caused it (`telegram:<bot>:user:<id>`:
    inline queries, payments, a callback on an inline-mode message), else `telegram:<bot>:no-chat`
    (polls, channel boosts without a chat): what an ordered consumer receives in order."""
    chat_id = integer_id(chat_of(update, kind))
    if chat_id is not None:
        return f"telegram:{bot_id}:chat:{chat_id}"
    user_id = integer_id(user_of(update, kind))
    if user_id is not None:
        return f"telegram:{bot_id}:user:{user_id}"
    return f"telegram:{bot_id}:no-chat"


def chat_type(update: TelegramUpdate) -> str | None:
    """Type of the chat the update happened in ("private", "group", ...), when it has one."""
    kind = update_type(update)
    layout = KINDS.get(kind)
    path = layout.chat_type if layout else None
    value = dig(update.kind_object(kind), path) if path is not None else None
    return value if isinstance(value, str) and _ATTRIBUTE_VALUE.fullmatch(value) else None


@dataclass(frozen=True)
class BotCommand:
    """The bot command a message starts with."""

    name: str
    """The command, lowercased and without "@botname" ("/start")."""
    bot: str | None
    """The username after "@" ("/start@MyShopBot" in groups), lowercased; None when absent."""
    bare: bool
    """The message's text is the command alone (nothing but spaces after it)."""

    def addressed_to(self, username: str | None) -> bool:
        """Meant for the bot named `username`: no "@botname", or that one. With `username` None
        (not known) every command counts as ours."""
        return self.bot is None or username is None or self.bot == username.lstrip("@").lower()


def bot_command(update: TelegramUpdate) -> BotCommand | None:
    """The bot command a message starts with, or None.

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
            units = text.encode("utf-16-le", errors="surrogatepass")
            cut = 2 * entity["length"]
            found = _COMMAND.match(units[:cut].decode("utf-16-le", errors="ignore"))
            if found is None:
                return None
            bot = found.group("bot")
            rest = units[cut:].decode("utf-16-le", errors="ignore")
            return BotCommand(
                name=found.group("name").lower(), bot=bot.lower() if bot else None, bare=not rest.strip()
            )
    return None


def command(update: TelegramUpdate, bot_username: str | None = None) -> str | None:
    """The bot command a message starts with, lowercased and without "@botname" ("/start").

    With `bot_username` (this bot's), a command addressed to another bot ("/start@other_bot" in a
    group) is None: it is that bot's to answer. Without it, every command counts.
    """
    found = bot_command(update)
    return found.name if found is not None and found.addressed_to(bot_username) else None


def own_username() -> str | None:
    """This bot's username, from the `telegram_bot_username` setting (None when not configured)."""
    return os.environ.get(BOT_USERNAME_ENV) or None
