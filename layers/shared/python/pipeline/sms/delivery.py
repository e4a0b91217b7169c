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
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import SNSEvent
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pipeline.sms.gateways import CONTEXT_KEY
from pipeline.sms.journal import EVIDENCE_CLOSES, Journal

logger = Logger(child=True)
metrics = Metrics()

Applied = Literal["recorded", "closed_unknown", "stale", "not_ours", "unknown_key"]


class DeliveryEvent(BaseModel):
    """The fields used from an End User Messaging SMS event; the rest (the phone too) is ignored."""

    model_config = ConfigDict(defer_build=True, extra="ignore", frozen=True, populate_by_name=True)

    event_type: str = Field(alias="eventType", min_length=1)
    event_timestamp: int = Field(alias="eventTimestamp", ge=0, description="Unix time in milliseconds")
    message_id: str = Field(alias="messageId", min_length=1)
    is_final: bool = Field(alias="isFinal", default=False)
    context: dict[str, str] = Field(default_factory=dict)

    @property
    def delivery_status(self) -> str:
        """TEXT_DELIVERED -> "delivered", TEXT_CARRIER_UNREACHABLE -> "carrier_unreachable"."""
        return self.event_type.removeprefix("TEXT_").lower()

    @property
    def occurred_at(self) -> datetime:
        return datetime.fromtimestamp(self.event_timestamp / 1000, tz=UTC)


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
            delivery = DeliveryEvent.model_validate_json(record.sns.message)
        except ValidationError as error:
            invalid += 1
            fields = sorted({".".join(str(part) for part in e["loc"]) or "message" for e in error.errors()})
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
