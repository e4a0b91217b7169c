"""What a lead is and how it is read from a Telegram message."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pipeline.envelope import Envelope
from pipeline.telegram import TelegramUpdate, chat_of, command, integer_id, own_username, user_of

Trigger = Literal["start", "contact", "first_message"]


@dataclass(frozen=True)
class Lead:
    """One new contact, as every CRM client receives it (the generic webhook posts it as is).

    Made by `lead_from_envelope` from values it checked: no pydantic on the consumer's cold path.
    """

    event_id: str
    trigger: Trigger
    telegram_user_id: int
    chat_id: int
    username: str | None = None
    first_name: str | None = None
    last_name: str | None = None
    phone: str | None = None
    language_code: str | None = None
    text: str | None = None
    source: Literal["telegram"] = "telegram"

    def to_document(self) -> dict[str, Any]:
        """What the generic webhook posts: every field, by name."""
        return asdict(self)

    @property
    def display_name(self) -> str:
        name = " ".join(part for part in (self.first_name, self.last_name) if part)
        if name and self.username:
            return f"{name} (@{self.username})"
        return name or (f"@{self.username}" if self.username else f"Telegram user {self.telegram_user_id}")


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _own_phone(message: Mapping[str, Any], user_id: int) -> str | None:
    """The phone of a shared contact when it is the sender's own (Telegram's "share my number" button).

    A user may also forward someone else's contact card: that number is not the lead's.
    """
    contact = message.get("contact")
    if not isinstance(contact, Mapping):
        return None
    owner = contact.get("user_id")
    if owner is not None and owner != user_id:
        return None
    return _text(contact.get("phone_number"))


def lead_from_envelope(envelope: Envelope) -> Lead | None:
    """The lead a message would make, or None when it has no human sender (channel, bot, anonymous admin).

    Every message of a user the bot has not seen yet is a new contact; `trigger` records why it
    counts: a /start, a shared contact, or simply a first message.
    """
    message = envelope.payload.get(envelope.type)
    if not isinstance(message, Mapping):
        return None
    user = user_of(envelope.payload, envelope.type)
    user_id, chat_id = integer_id(user), integer_id(chat_of(envelope.payload, envelope.type))
    if user is None or user_id is None or chat_id is None or user.get("is_bot") is True:
        return None
    phone = _own_phone(message, user_id)
    if command(TelegramUpdate.parse(envelope.payload), own_username()) == "/start":
        trigger: Trigger = "start"
    elif isinstance(message.get("contact"), Mapping):
        trigger = "contact"
    else:
        trigger = "first_message"
    return Lead(
        event_id=envelope.event_id,
        trigger=trigger,
        telegram_user_id=user_id,
        chat_id=chat_id,
        username=_text(user.get("username")),
        first_name=_text(user.get("first_name")),
        last_name=_text(user.get("last_name")),
        phone=phone,
        language_code=_text(user.get("language_code")),
        text=_text(message.get("text")) or _text(message.get("caption")),
    )
