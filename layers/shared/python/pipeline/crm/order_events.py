"""What a CRM source's consumer publishes: the order-status event the `sms` consumer reads.

Bitrix24 and amoCRM do not post this pipeline's JSON contract; their consumers (`bitrix24`,
`amocrm`) read the deal or lead and its contact through the CRM's API and publish, to the same
events topic, exactly the `crm` event a templated sender would post to `POST /crm/events`:
validated by `pipeline.crm.event_model.CrmEvent` (the customer's phone in E.164), with the `source`, `type`
and `status` attributes the webhook sets. From there on nothing tells the two apart.

The event id is derived from the order's state (source, order, status, when it entered it), so
the same state read twice (a redelivery, the same change reported twice) publishes one event
id, and the `sms` consumer's own per-order history decides what is new.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from pipeline import aws, phones
from pipeline.crm.contract import ORDER_STATUS_CHANGED, PHONE_ERROR_TYPE
from pipeline.crm.event_model import CrmEvent
from pipeline.envelope import Envelope, crm_event_id, publish_request, sns_attributes, utc_now
from pipeline.errors import PermanentError, TransientError
from pipeline.validation import Invalid

TOPIC_ENV = "EVENTS_TOPIC_ARN"


class InvalidCustomerPhone(PermanentError):
    """The contact's phone is not a number an SMS can go to (the reason says why, never which)."""


@dataclass(frozen=True)
class OrderStatus:
    """One order's current status as read from its CRM, and whom to tell."""

    source: str  # "bitrix24", "amocrm"
    order_id: str
    status: str
    occurred_at: datetime  # when the order entered `status`, as the CRM tells it
    customer_name: str
    phone: str  # as the CRM holds it; E.164 once published
    previous_status: str | None = None
    # The CRM's name for this entry into the status (Bitrix24: the stage and its MOVED_TIME),
    # so a return into the same status the pipeline did not see leave counts as a new entry.
    transition_id: str | None = None
    # The CRM's own fields (deal id, stage id, pipeline), kept in the payload for tracing.
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def event_id(self) -> str:
        state = "\x1f".join(
            (self.source, self.order_id, self.status, self.occurred_at.isoformat(), self.transition_id or "")
        )
        return f"{self.source}:{self.order_id}:{hashlib.sha256(state.encode()).hexdigest()[:32]}"

    def payload(self) -> dict[str, Any]:
        order: dict[str, Any] = {"id": self.order_id, "status": self.status}
        if self.previous_status is not None:
            order["previous_status"] = self.previous_status
        if self.transition_id is not None:
            order["transition_id"] = self.transition_id
        return {
            "event_id": self.event_id,
            "type": ORDER_STATUS_CHANGED,
            "occurred_at": self.occurred_at.isoformat(),
            "order": order,
            "customer": {"phone": self.phone, "name": self.customer_name},
            "source": {"crm": self.source, **self.details},
        }


def order_event(order: OrderStatus, phone_default_region: str | None) -> tuple[CrmEvent, dict[str, Any]]:
    """The validated event and the payload to publish (phone in E.164); InvalidCustomerPhone if
    the contact's number is not one, PermanentError for any other refusal."""
    payload = order.payload()
    try:
        event = CrmEvent.parse(payload, phone_default_region=phone_default_region or None)
    except Invalid as error:
        problems = error.errors(include_input=False)
        if all(problem["type"] == PHONE_ERROR_TYPE for problem in problems):
            why = "; ".join(str(problem["msg"]) for problem in problems)
            raise InvalidCustomerPhone(
                f"{order.source} order {order.order_id}: customer phone: {why}"
            ) from None
        fields = ", ".join(error.field_names(whole=""))
        raise PermanentError(
            f"{order.source} order {order.order_id}: not a valid order event ({fields})"
        ) from None
    return event, event.normalised_payload(payload)


def publish_order_status(order: OrderStatus, *, correlation_id: str) -> str:
    """Publish `order` as a `crm` order-status event; its event id. TransientError when SNS
    cannot be reached (the record is retried), PermanentError when the event is not valid."""
    region = os.environ.get(phones.DEFAULT_REGION_ENV, "").strip() or None
    event, payload = order_event(order, region)
    envelope = Envelope(
        event_id=crm_event_id(event.event_id),
        source="crm",
        type=event.type,
        correlation_id=correlation_id,
        received_at=utc_now(),
        payload=payload,
    )
    attributes = {"source": "crm", "type": event.type, "status": event.order.status}
    try:
        aws.client("sns").publish(
            **publish_request(os.environ[TOPIC_ENV], envelope, sns_attributes(dict(attributes)))
        )
    except (ClientError, BotoCoreError) as error:
        raise TransientError(f"publishing the order event failed ({type(error).__name__})") from None
    return envelope.event_id
