"""The pydantic model of a CRM order-status event (`pipeline.crm.contract` says how one is
authenticated and what the phone's validation context is).

Its own module so that only what reads CRM events imports pydantic: the webhook's Telegram
requests never do (docs/perf.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from pipeline import phones
from pipeline.crm.contract import PHONE_ERROR_TYPE, PHONE_REGION_CONTEXT
from pipeline.envelope import crm_order_key


class _Open(BaseModel):
    # CRMs add fields over time: keep them rather than refuse the event.
    # No input in str(ValidationError) either: it may be a phone number and end up in a log.
    model_config = ConfigDict(defer_build=True, extra="allow", frozen=True, hide_input_in_errors=True)


class Order(_Open):
    id: str = Field(min_length=1, max_length=128)
    # Routed on as an SNS message attribute, which cannot carry control characters.
    status: str = Field(min_length=1, max_length=64, pattern=r"^[^\x00-\x1f\x7f]+$")
    previous_status: str | None = Field(default=None, max_length=64)
    # The CRM's id of this status change in its own history (a status-history record id), when
    # it keeps one: the same id is the same transition; another id into the current status is a
    # re-entry the CRM did not report the exit of (see pipeline.sms.orders). Never a delivery id.
    transition_id: str | None = Field(default=None, min_length=1, max_length=256)


class Customer(_Open):
    # As the CRM wrote it on input, E.164 once validated (what the SMS journal keys on).
    phone: str = Field(max_length=64, description="E.164 once validated")
    name: str = Field(max_length=256)

    @field_validator("phone")
    @classmethod
    def _e164(cls, value: str, info: ValidationInfo) -> str:
        context = info.context if isinstance(info.context, Mapping) else {}
        try:
            return phones.to_e164(value, context.get(PHONE_REGION_CONTEXT))
        except phones.PhoneNumberError as error:
            # The message says why, never which number (the input is not part of it).
            raise PydanticCustomError(PHONE_ERROR_TYPE, str(error)) from None


class CrmEvent(_Open):
    """One order-status change. `event_id` is the CRM's id of the request, kept for tracing: what
    the change is (and so which SMS) the sms consumer decides from the order's history."""

    event_id: str = Field(min_length=1, max_length=256)
    type: Literal["order.status_changed"]
    occurred_at: AwareDatetime
    order: Order
    customer: Customer

    @property
    def order_key(self) -> str:
        """The order, qualified by the CRM it comes from (`pipeline.envelope.crm_order_key`)."""
        return crm_order_key(
            {"order": {"id": self.order.id}, "source": (self.model_extra or {}).get("source")}
        )

    def normalised_payload(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        """`payload` (the raw JSON this event was validated from) with `customer.phone` in E.164:
        what is published, so no consumer ever sees the number as the CRM wrote it."""
        customer = {**payload["customer"], "phone": self.customer.phone}
        return {**payload, "customer": customer}
