"""The envelope every event travels in, from the webhook through SNS to each consumer queue.

The SNS `Message` (and, with raw message delivery, the SQS message body) is the envelope's
JSON. Consumers key idempotency on `event_id`, which is stable for the same business event
(the same Telegram update, the same CRM event), never on an SQS message id.

The events topic is an SNS FIFO topic: every publish names a message group (what must stay in
order: a Telegram chat, a CRM order) and a deduplication id (what SNS drops a repeat of within
five minutes). `fifo_keys` derives both, and `publish_request` is the one request every
publisher sends, so the webhook and the CRM sources' consumers cannot group or dedupe apart.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any, Literal, get_args

from pipeline.formats import SCHEMA_VERSION, by_name
from pipeline.registry import CRM_CHANGE_KEY
from pipeline.validation import Fields, Invalid, refusal

# `crm`: order-status events; `bitrix24`, `amocrm`: those CRMs' own webhook events; `broadcast`:
# one page of a broadcast's chats (`pipeline.broadcast`, published by `ops broadcast create`).
Source = Literal["telegram", "crm", "bitrix24", "amocrm", "broadcast"]

# The envelope's format (`pipeline.formats`): what the webhook and the CRM sources publish today.
FORMAT = by_name("envelope")
# SNS limit for a whole message: body plus attributes (256 KiB).
SNS_MAX_MESSAGE_BYTES = 262_144


@dataclass(frozen=True)
class Envelope:
    """One business event. `payload` is the original body exactly as received.

    Checked when made, as it is read (`pipeline.validation`: no pydantic on the cold path); an
    invalid one raises `Invalid`. Its JSON holds the values the pydantic model it replaced wrote.
    """

    event_id: str
    """Stable id of the business event."""
    source: Source
    type: str
    """Update kind or CRM event type."""
    correlation_id: str
    """Traces one event across every log."""
    received_at: datetime
    payload: dict[str, Any]
    # Written with every envelope; a body without it (published before release 0.5.0) is version 0.
    schema_version: int = FORMAT.version

    def __post_init__(self) -> None:
        for name, value in _checked(vars(self)).items():
            object.__setattr__(self, name, value)

    @classmethod
    def parse(cls, data: Any, *, stored: bool = False) -> Envelope:
        """An envelope from its document (`to_document`); `stored`: as a queue or DLQ holds it,
        of any version this code reads (one without `schema_version` is version 0). A version
        newer than this code reads is refused."""
        if isinstance(data, Mapping):
            if stored and SCHEMA_VERSION not in data:
                data = {**data, SCHEMA_VERSION: 0}
            try:
                FORMAT.version_of(data)
            except ValueError as error:  # FormatTooNew: a newer version, or one that is no number
                raise Invalid(_TITLE, [refusal((), "value_error", f"Value error, {error}")]) from None
        return cls(**_checked(data))

    @classmethod
    def from_json(cls, body: str | bytes) -> Envelope:
        """A body as a queue or DLQ holds it, of any version this code reads."""
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as error:
            raise Invalid(_TITLE, [refusal((), "json_invalid", f"Invalid JSON: {error}")]) from None
        return cls.parse(data, stored=True)

    def to_json(self) -> str:
        document = {name: getattr(self, name) for name in _FIELDS}
        return json.dumps(document, separators=(",", ":"), ensure_ascii=False, default=_json_value)

    def to_document(self) -> dict[str, Any]:
        """The envelope as plain JSON values (a copy: what the journal's idempotency layer hashes)."""
        document: dict[str, Any] = json.loads(self.to_json())
        return document


_TITLE = "Envelope"
_FIELDS = ("event_id", "source", "type", "correlation_id", "received_at", "payload", SCHEMA_VERSION)
SOURCES: tuple[str, ...] = get_args(Source)


def _checked(data: Any) -> dict[str, Any]:
    """Every field of an envelope document checked (all refusals at once), as the values to hold."""
    fields = Fields(_TITLE, data, known=_FIELDS)
    values = {
        "event_id": fields.text("event_id", min_length=1),
        "source": fields.choice("source", SOURCES),
        "type": fields.text("type", min_length=1),
        "correlation_id": fields.text("correlation_id", min_length=1),
        "received_at": fields.moment("received_at"),
        "payload": fields.mapping("payload"),
        SCHEMA_VERSION: fields.integer(SCHEMA_VERSION, default=FORMAT.version),
    }
    fields.done()
    return values


def _json_value(value: Any) -> Any:
    """A value of a payload that JSON has no type for, as pydantic's JSON wrote it."""
    if isinstance(value, datetime | date | time):
        text = value.isoformat()
        return text[:-6] + "Z" if text.endswith("+00:00") else text
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def telegram_event_id(bot_id: str, update_id: int) -> str:
    """Telegram resends the same update with the same `update_id`: the id must not change."""
    return f"telegram:{bot_id}:{update_id}"


def crm_event_id(crm_event_id: str) -> str:
    return f"crm:{crm_event_id}"


def telegram_bot_of(event_id: str) -> str:
    """The bot id inside a `telegram_event_id` ("telegram:<bot_id>:<update_id>")."""
    return event_id.split(":")[1] if event_id.count(":") >= 2 else "-"


# -- FIFO keys --------------------------------------------------------------------------------------
# SNS (and SQS) FIFO: MessageGroupId and MessageDeduplicationId are 1-128 characters of
# alphanumerics and punctuation, i.e. printable ASCII without the space (SNS Publish API).
FIFO_ID_MAX = 128
_FIFO_ID = re.compile(r"[!-~]{1,128}")


def fifo_id(value: str, *, prefix: str = "") -> str:
    """`value` when SNS accepts it as a group or deduplication id, else `prefix` + its sha256."""
    if _FIFO_ID.fullmatch(value):
        return value
    return f"{prefix}sha256:{hashlib.sha256(value.encode()).hexdigest()}"


def _at(document: Mapping[str, Any], path: str) -> Any:
    value: Any = document
    for key in path.split("."):
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


# The CRMs whose consumers publish `crm` order events (`payload.source.crm` names which one).
CRM_ORDER_SOURCES = ("bitrix24", "amocrm")


def crm_order_key(payload: Mapping[str, Any]) -> str:
    """A `crm` order event's order, qualified by the CRM it comes from: Bitrix24 deal 42
    (`bitrix24:42`), amoCRM lead 42 (`amocrm:42`) and a templated sender's order 42 (`crm:42`)
    are three orders, in the journal, the FIFO groups and the ops output alike."""
    source = payload.get("source")
    origin = source.get("crm") if isinstance(source, Mapping) else None
    qualifier = origin if origin in CRM_ORDER_SOURCES else "crm"
    return f"{qualifier}:{_at(payload, 'order.id')}"


# Per CRM source: what its events are grouped by, and where the payload names it.
ORDER_GROUPS: dict[str, tuple[str, str]] = {
    "crm": ("order", "order.id"),
    "bitrix24": ("deal", "data.FIELDS.ID"),
    "amocrm": ("lead", "lead.id"),
}


@dataclass(frozen=True)
class FifoKeys:
    group_id: str
    deduplication_id: str


def message_group(envelope: Envelope) -> str:
    """What must stay in order with this event: its Telegram chat (or, without a chat, its user,
    else a group saying so), its CRM order (one order's changes in order; orders independent, so
    one stuck order holds only itself and SNS's per-group throughput is never the whole CRM's)."""
    payload = envelope.payload
    if envelope.source == "telegram":
        # Imported for Telegram events only: the CRM sources' consumers never need it.
        from pipeline.telegram import chat_group

        return fifo_id(chat_group(payload, envelope.type, telegram_bot_of(envelope.event_id)))
    if envelope.source == "broadcast":  # pages are independent: each its own group
        return fifo_id(envelope.event_id, prefix="broadcast:")
    noun, path = ORDER_GROUPS[envelope.source]
    order_id = _at(payload, path)
    if envelope.source == "crm" and order_id not in (None, ""):
        order_id = crm_order_key(payload)
    group = (
        f"{envelope.source}:{noun}:{order_id}"
        if order_id not in (None, "")
        else f"{envelope.source}:no-{noun}"
    )
    return fifo_id(group, prefix=f"{envelope.source}:")


def deduplication_id(envelope: Envelope) -> str:
    """What SNS drops a repeat of within 5 minutes: the event id (a Telegram update resent with
    the same `update_id`; a Bitrix24/amoCRM delivery, fresh per delivery), except for a `crm`
    event, whose id a CRM may reuse for another change: the hash of the change (CRM_CHANGE_KEY)."""
    if envelope.source == "crm":
        document = envelope.to_document()
        values = [_at(document, path) for path in CRM_CHANGE_KEY]
        digest = hashlib.sha256(dumps(values).encode()).hexdigest()
        return f"crm:{digest}"
    return fifo_id(envelope.event_id, prefix=f"{envelope.source}:")


def fifo_keys(envelope: Envelope) -> FifoKeys:
    return FifoKeys(message_group(envelope), deduplication_id(envelope))


def publish_request(
    topic_arn: str, envelope: Envelope, message_attributes: dict[str, dict[str, str]]
) -> dict[str, Any]:
    """The SNS `Publish` arguments for one envelope on the (FIFO) events topic."""
    keys = fifo_keys(envelope)
    return {
        "TopicArn": topic_arn,
        "Message": envelope.to_json(),
        "MessageAttributes": message_attributes,
        "MessageGroupId": keys.group_id,
        "MessageDeduplicationId": keys.deduplication_id,
    }


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
