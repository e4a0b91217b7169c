"""Where each Telegram update kind keeps its chat and its user, as paths of keys.

Consumers that key data by conversation (`store`, `ai`) or count users (`analytics`) find the
chat and the acting user the same way whatever the kind, from one table instead of a branch per
kind. Paths start at the kind's object (`update[kind]`) and use the Bot API's JSON names
(`from`, not aiogram's `from_user`); tests check every path against aiogram's models.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.telegram import MESSAGE_UPDATE_KINDS

# The `Chat` object of each kind that happens in a chat. Kinds absent here have no chat
# (inline queries, payments, polls, business connections, ...).
CHAT_PATHS: dict[str, tuple[str, ...]] = {
    **{kind: ("chat",) for kind in MESSAGE_UPDATE_KINDS},
    "deleted_business_messages": ("chat",),
    "message_reaction": ("chat",),
    "message_reaction_count": ("chat",),
    # The message the button was attached to (absent for inline-mode messages).
    "callback_query": ("message", "chat"),
    # Set only when an anonymous chat voted.
    "poll_answer": ("voter_chat",),
    "my_chat_member": ("chat",),
    "chat_member": ("chat",),
    "chat_join_request": ("chat",),
    "chat_boost": ("chat",),
    "removed_chat_boost": ("chat",),
    "stopped_message_generation": ("chat",),
}

# The `User` who caused each kind, when there is one. Channel posts have none; a message sent on
# behalf of a chat has none either (then `sender_chat` is set).
USER_PATHS: dict[str, tuple[str, ...]] = {
    **{kind: ("from",) for kind in MESSAGE_UPDATE_KINDS},
    "business_connection": ("user",),
    "message_reaction": ("user",),
    "inline_query": ("from",),
    "chosen_inline_result": ("from",),
    "callback_query": ("from",),
    "shipping_query": ("from",),
    "pre_checkout_query": ("from",),
    "purchased_paid_media": ("from",),
    "poll_answer": ("user",),
    "my_chat_member": ("from",),
    "chat_member": ("from",),
    "chat_join_request": ("from",),
    "managed_bot": ("user",),
    "subscription": ("user",),
}


def dig(value: Any, path: tuple[str, ...]) -> Any:
    """The value at `path` in nested mappings, or None when any step is missing."""
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _object_at(update: Mapping[str, Any], kind: str, paths: Mapping[str, tuple[str, ...]]) -> dict | None:
    path = paths.get(kind)
    found = dig(update.get(kind), path) if path is not None else None
    return found if isinstance(found, dict) else None


def chat_of(update: Mapping[str, Any], kind: str) -> dict | None:
    """The `Chat` object the update of this kind happened in, or None."""
    return _object_at(update, kind, CHAT_PATHS)


def user_of(update: Mapping[str, Any], kind: str) -> dict | None:
    """The `User` object who caused the update of this kind, or None."""
    return _object_at(update, kind, USER_PATHS)


def integer_id(obj: Mapping[str, Any] | None) -> int | None:
    """`obj["id"]` when it is a real integer (Telegram ids are 52-bit integers), else None."""
    value = obj.get("id") if obj is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None
