"""The envelope every event travels in, from the webhook through SNS to each consumer queue.

The SNS `Message` (and, with raw message delivery, the SQS message body) is the envelope's
JSON. Consumers key idempotency on `event_id`, which is stable for the same business event
(the same Telegram update, the same CRM event), never on an SQS message id.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# `crm`: order-status events; `bitrix24`, `amocrm`: those CRMs' own webhook events.
Source = Literal["telegram", "crm", "bitrix24", "amocrm"]

# SNS limit for a whole message: body plus attributes (256 KiB).
SNS_MAX_MESSAGE_BYTES = 262_144


class Envelope(BaseModel):
    """One business event. `payload` is the original body exactly as received."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    event_id: str = Field(min_length=1, description="Stable id of the business event")
    source: Source
    type: str = Field(min_length=1, description="Update kind or CRM event type")
    correlation_id: str = Field(min_length=1, description="Traces one event across every log")
    received_at: datetime
    payload: dict[str, Any]

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, body: str | bytes) -> Envelope:
        return cls.model_validate_json(body)


def telegram_event_id(bot_id: str, update_id: int) -> str:
    """Telegram resends the same update with the same `update_id`: the id must not change."""
    return f"telegram:{bot_id}:{update_id}"


def crm_event_id(crm_event_id: str) -> str:
    return f"crm:{crm_event_id}"


def utc_now() -> datetime:
    return datetime.now(UTC)


def sns_attributes(attributes: dict[str, str | None]) -> dict[str, dict[str, str]]:
    """SNS `MessageAttributes` from plain strings; empty values are left out (SNS rejects them)."""
    return {name: {"DataType": "String", "StringValue": value} for name, value in attributes.items() if value}


def message_size(message: str, attributes: dict[str, dict[str, str]]) -> int:
    """Bytes SNS counts against its limit: the message plus each attribute's name, type and value."""
    size = len(message.encode())
    for name, attr in attributes.items():
        size += len(name.encode()) + len(attr["DataType"].encode()) + len(attr["StringValue"].encode())
    return size


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
