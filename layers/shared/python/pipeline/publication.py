"""What the webhook publishes for a Telegram update: its envelope and its SNS routing attributes.

Apart from `pipeline.telegram` (the update's model) so that the envelope, which groups Telegram
events by chat with `pipeline.telegram.chat_group`, and the update's model do not import each
other.
"""

from __future__ import annotations

from typing import Any

from pipeline.envelope import Envelope, telegram_event_id, utc_now
from pipeline.telegram import TelegramUpdate, chat_type, command, update_type


def publication(
    update: TelegramUpdate, payload: dict[str, Any], *, bot_id: str, correlation_id: str
) -> tuple[Envelope, dict[str, str | None]]:
    """What the webhook publishes for a validated update: the envelope around `payload` (the body
    exactly as received) and the SNS routing attributes (None: the attribute is left out).
    """
    kind = update_type(update)
    envelope = Envelope(
        event_id=telegram_event_id(bot_id, update.update_id),
        source="telegram",
        type=kind,
        correlation_id=correlation_id,
        received_at=utc_now(),
        payload=payload,
    )
    attributes = {
        "source": "telegram",
        "type": kind,
        "chat_type": chat_type(update),
        "command": command(update),
    }
    return envelope, attributes
