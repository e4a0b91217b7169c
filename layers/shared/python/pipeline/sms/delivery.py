"""Delivery events of AWS End User Messaging SMS: the journal's delivery status, and closing unknowns.

The configuration set used for sending has an SNS event destination; `sms_events` is subscribed
to that topic. Each SNS message is one event, e.g.

    {"eventType": "TEXT_DELIVERED", "eventTimestamp": 1686975103470, "isFinal": true,
     "messageId": "862a...", "messageStatus": "DELIVERED", "context": {"notification_key": "<key>"}, ...}

`context` is the `Context` given to SendTextMessage, so it carries our key. Any event for a
message proves the gateway took it: a record not yet `accepted` (unknown, or pending a resend an
operator asked for, or failed) becomes `accepted` and is never sent again. The delivery status
(`TEXT_DELIVERED` -> "delivered", `TEXT_BLOCKED` -> "blocked", ...) is kept apart from the send
state, and an older event never overwrites a newer one. Applying an event twice changes nothing,
so SNS's at-least-once delivery needs no idempotency layer here.

An event is read by hand (`pipeline.validation`), not by pydantic: `sms_events` reads one at its
cold start, where importing pydantic and building a model costs about 0.4x of `import boto3`
(docs/perf.md). `DeliveryEvent.from_json` accepts and refuses what the pydantic model it replaced
did (tests/unit/sms/test_sms_settings_oracle.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import SNSEvent

from pipeline.json_text import parse_json
from pipeline.sms.gateways import CONTEXT_KEY
from pipeline.sms.journal import EVIDENCE_CLOSES, Journal
from pipeline.validation import Fields, Invalid, aliased

logger = Logger(child=True)
metrics = Metrics()

Applied = Literal["recorded", "closed_unknown", "stale", "not_ours", "unknown_key"]


@dataclass(frozen=True)
class DeliveryEvent:
    """The fields used from an End User Messaging SMS event; the rest (the phone too) is ignored.

    Checked when made; an invalid one raises `Invalid`, naming each field (never its value: an
    event may hold a phone number) by its key in the event (`eventType`, or `event_type` where the
    event gives that name instead), as pydantic named it.
    """

    event_type: str
    event_timestamp: int
    """Unix time in milliseconds."""
    message_id: str
    is_final: bool = False
    context: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, value in _checked(vars(self)).items():
            object.__setattr__(self, name, value)

    @classmethod
    def parse(cls, data: Any) -> DeliveryEvent:
        """An event from its JSON object: each field by its key in the event (`eventType`) or its
        name here (`event_type`); other keys are ignored."""
        return cls(**_checked(data))

    @classmethod
    def from_json(cls, text: str | bytes) -> DeliveryEvent:
        """An event from its JSON text (an SNS message); text that is not JSON, or JSON that is not
        an object, is refused as a whole (loc `()`)."""
        return parse_json(_TITLE, text, cls.parse)

    @property
    def delivery_status(self) -> str:
        """TEXT_DELIVERED -> "delivered", TEXT_CARRIER_UNREACHABLE -> "carrier_unreachable"."""
        return self.event_type.removeprefix("TEXT_").lower()

    @property
    def occurred_at(self) -> datetime:
        return datetime.fromtimestamp(self.event_timestamp / 1000, tz=UTC)


_TITLE = "DeliveryEvent"
# Field -> its key in an event.
_ALIASES = {
    "event_type": "eventType",
    "event_timestamp": "eventTimestamp",
    "message_id": "messageId",
    "is_final": "isFinal",
}


def _checked(data: Any) -> dict[str, Any]:
    """Every field checked (all refusals at once), read by its key in the event, else by its name."""
    fields = Fields(_TITLE, data)

    def key(name: str) -> str:
        return aliased(fields.data, _ALIASES.get(name, name), name)

    values = {
        "event_type": fields.text(key("event_type"), min_length=1),
        "event_timestamp": fields.number(key("event_timestamp"), ge=0),
        "message_id": fields.text(key("message_id"), min_length=1),
        "is_final": fields.boolean(key("is_final"), default=False),
        "context": fields.text_mapping("context", default={}),
    }
    fields.done()
    return values


def apply_delivery_event(journal: Journal, event: DeliveryEvent) -> Applied:
    key = event.context.get(CONTEXT_KEY)
    if not key or not event.event_type.startswith("TEXT_"):
        return "not_ours"
    saved = journal.record_delivery(
        key,
        status=event.delivery_status,
        event_at=event.occurred_at,
        final=event.is_final,
        message_id=event.message_id,
    )
    if saved is None:
        return "unknown_key" if journal.get(key) is None else "stale"
    if saved.state in EVIDENCE_CLOSES and journal.resolve_accepted(
        key,
        via=f"delivery_event:{event.event_type}",
        message_id=event.message_id,
        from_states=EVIDENCE_CLOSES,
    ):
        metrics.add_metric(name="SmsUnknownClosedByDeliveryEvent", unit=MetricUnit.Count, value=1)
        return "closed_unknown"
    return "recorded"


def handle_sns_event(event: dict[str, Any], journal: Journal) -> dict[str, int]:
    """Apply every delivery event of an SNS invocation; counts per outcome.

    An unreadable message raises after the others are applied, so the asynchronous invocation
    is retried and then kept by the function's on-failure destination: nothing is lost.
    """
    counts: dict[str, int] = {}
    invalid = 0
    for record in SNSEvent(event).records:
        try:
            delivery = DeliveryEvent.from_json(record.sns.message)
        except Invalid as error:
            invalid += 1
            fields = error.field_names(whole="message")
            logger.error("Unreadable SMS delivery event", extra={"fields": fields})
            continue
        applied = apply_delivery_event(journal, delivery)
        counts[applied] = counts.get(applied, 0) + 1
        logger.info(
            "SMS delivery event",
            extra={
                "notification_key": delivery.context.get(CONTEXT_KEY),
                "event_type": delivery.event_type,
                "applied": applied,
            },
        )
        metrics.add_metric(name="SmsDeliveryEvents", unit=MetricUnit.Count, value=1)
    if invalid:
        metrics.add_metric(name="SmsDeliveryEventsUnreadable", unit=MetricUnit.Count, value=invalid)
        raise ValueError(f"{invalid} unreadable SMS delivery event(s)")
    return counts
