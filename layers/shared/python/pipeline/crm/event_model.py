"""A CRM order-status event, read and checked (`pipeline.crm.contract` says how one is
authenticated; `CrmEvent.parse` how its phone is read).

Checked by hand (`pipeline.validation`), not by pydantic: the `sms` consumer reads one at every
first invocation, and pydantic's import and schemas cost a cold start about 0.4x of `import boto3`
(docs/perf.md). tests/unit/webhook/test_crm_event_oracle.py holds it to the pydantic model it
replaced, on generated input. A refusal names fields and why, never a value (a phone number).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pipeline import phones
from pipeline.crm.contract import ORDER_STATUS_CHANGED, PHONE_ERROR_TYPE
from pipeline.envelope import crm_order_key
from pipeline.validation import Fields, refusal

# Routed on as an SNS message attribute, which cannot carry control characters.
STATUS_PATTERN = r"^[^\x00-\x1f\x7f]+$"
# The fields each document declares; a CRM's other keys are its `extra`.
_ORDER_FIELDS = ("id", "status", "previous_status", "transition_id")
_CUSTOMER_FIELDS = ("phone", "name")
_EVENT_FIELDS = ("event_id", "type", "occurred_at", "order", "customer")


def _extra(fields: Fields, declared: tuple[str, ...]) -> dict[str, Any]:
    """The keys a CRM added: kept rather than refused (CRMs add fields over time)."""
    return {key: value for key, value in fields.data.items() if key not in declared}


@dataclass(frozen=True)
class Order:
    id: str
    status: str
    previous_status: str | None = None
    # The CRM's id of this status change in its own history (a status-history record id), when
    # it keeps one: the same id is the same transition; another id into the current status is a
    # re-entry the CRM did not report the exit of (see pipeline.sms.orders). Never a delivery id.
    transition_id: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, data: Any) -> Order:
        fields = Fields("Order", data)
        order = cls(
            id=fields.text("id", min_length=1, max_length=128),
            status=fields.text("status", min_length=1, max_length=64, pattern=STATUS_PATTERN),
            previous_status=fields.text("previous_status", max_length=64, default=None),
            transition_id=fields.text("transition_id", min_length=1, max_length=256, default=None),
            extra=_extra(fields, _ORDER_FIELDS),
        )
        fields.done()
        return order

    def value(self, name: str) -> Any:
        """The field `name`, declared or one the CRM added (None if it has none)."""
        return getattr(self, name) if name in _ORDER_FIELDS else self.extra.get(name)


@dataclass(frozen=True)
class Customer:
    # E.164 (`parse` normalises what the CRM wrote, which may be a national form).
    phone: str
    name: str
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, data: Any, phone_default_region: str | None = None) -> Customer:
        fields = Fields("Customer", data)
        phone = fields.text("phone", max_length=64)
        if "phone" in fields.data and not any(problem["loc"] == ("phone",) for problem in fields.problems):
            try:
                phone = phones.to_e164(phone, phone_default_region)
            except phones.PhoneNumberError as error:
                # The message says why, never which number.
                fields.problems.append(refusal(("phone",), PHONE_ERROR_TYPE, str(error)))
        name = fields.text("name", max_length=256)
        customer = cls(phone=phone, name=name, extra=_extra(fields, _CUSTOMER_FIELDS))
        fields.done()
        return customer

    def value(self, name: str) -> Any:
        """The field `name`, declared or one the CRM added (None if it has none)."""
        return getattr(self, name) if name in _CUSTOMER_FIELDS else self.extra.get(name)


@dataclass(frozen=True)
class CrmEvent:
    """One order-status change. `event_id` is the CRM's id of the request, kept for tracing: what
    the change is (and so which SMS) the sms consumer decides from the order's history."""

    event_id: str
    type: str
    occurred_at: datetime
    order: Order
    customer: Customer
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, data: Any, *, phone_default_region: str | None = None) -> CrmEvent:
        """The event in `data` (a JSON object), or `Invalid` naming every refused field.

        `customer.phone` is normalised to E.164; a national form needs the deployment's default
        region (`phone_default_region`). Without it (a consumer reading a payload the webhook
        already normalised) only international forms are accepted. A phone that is no number
        is refused with the type `contract.PHONE_ERROR_TYPE`.
        """
        fields = Fields("CrmEvent", data)
        event_id = fields.text("event_id", min_length=1, max_length=256)
        kind = fields.choice("type", (ORDER_STATUS_CHANGED,))
        occurred_at = fields.aware_moment("occurred_at")
        order = fields.document("order", Order.parse)
        customer = fields.document("customer", lambda value: Customer.parse(value, phone_default_region))
        extra = _extra(fields, _EVENT_FIELDS)
        fields.done()
        assert order is not None and customer is not None  # done() refused them otherwise
        return cls(event_id, kind, occurred_at, order, customer, extra)

    @property
    def order_key(self) -> str:
        """The order, qualified by the CRM it comes from (`pipeline.envelope.crm_order_key`)."""
        return crm_order_key({"order": {"id": self.order.id}, "source": self.extra.get("source")})

    def normalised_payload(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        """`payload` (the raw JSON this event was validated from) with `customer.phone` in E.164:
        what is published, so no consumer ever sees the number as the CRM wrote it."""
        customer = {**payload["customer"], "phone": self.customer.phone}
        return {**payload, "customer": customer}
