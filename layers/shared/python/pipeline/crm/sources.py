"""What the consumers of CRM webhooks (`bitrix24`, `amocrm`) share: mapping, refusals, publishing.

Each reads the deal or lead the CRM only named, maps its stage (`pipeline.crm.status_map`), reads
the contact's phone and publishes the order-status event (`pipeline.crm.order_events`). What can go
wrong ends in one of two ways, both logged with the reason and counted, never silently:

- **ignored** (`CrmEventsIgnored`, info log): nothing the SMS could be about: a deal of a pipeline
  the deployment does not connect, a deal deleted since, an edit that did not move the stage, a
  status no SMS rule sends for whose contact has no phone;
- **misconfigured** (`CrmSourceMisconfigured`, error log, alarmed, and the record dead-lettered
  with the reason, for a redrive once it is fixed): a stage missing from the status map, no
  contact or no usable phone where an SMS rule applies, the API credential revoked or short of
  rights. Redelivering it would only fail again, so nothing retries it.
- **hidden** (`CrmOrdersHidden`, warning log, alarmed): the CRM says the order exists but the
  integration's user may not read it (a Bitrix24 deal of a pipeline or department the inbound
  webhook's user has no read right on, an amoCRM lead outside the token user's rights). The
  CRM's list methods leave such an order's history out silently, so only reading the order itself
  tells it from one with no history yet; the log names the order and the right to grant. Nothing
  is marked handled: once the right is granted, the order's next event (or move) reads it whole.

The CRM itself was answered 200 when the webhook published its event: it never retries, and so
never floods, what can only succeed after a person acts.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, NoReturn, Protocol, TypeVar

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from pipeline.crm.order_events import InvalidCustomerPhone, OrderStatus, publish_order_status
from pipeline.crm.status_map import Lookup, StatusMap, parse_status_map
from pipeline.envelope import Envelope
from pipeline.errors import PermanentError, RemoteRefused
from pipeline.observability import mask_phone
from pipeline.sms.rules import SmsRules, load_rules

logger = Logger(child=True)
metrics = Metrics()

IGNORED_METRIC = "CrmEventsIgnored"
MISCONFIGURED_METRIC = "CrmSourceMisconfigured"
HIDDEN_METRIC = "CrmOrdersHidden"


class SourceMisconfigured(PermanentError):
    """A CRM event that cannot become an order event until a person fixes the configuration."""

    def __init__(self, reason: str, kind: str) -> None:
        super().__init__(reason)
        self.kind = kind


def status_map(variable: str) -> StatusMap:
    """The deployment's map from the consumer's environment (validated at synth)."""
    return parse_status_map(os.environ.get(variable, ""), variable)


def ignored(why: str, **log_fields: Any) -> dict[str, Any]:
    metrics.add_metric(name=IGNORED_METRIC, unit=MetricUnit.Count, value=1)
    logger.info("CRM event ignored", extra={"reason": why, **log_fields})
    return {"published": False, "reason": why}


class OrderHidden(Exception):
    """The CRM refused to show one order to the integration's user, whose credential has just
    read the order's history: the order, not the credential, is out of its rights. `right` says
    which right to grant; `reason` is the CRM's answer."""

    def __init__(self, right: str, reason: str) -> None:
        super().__init__(right)
        self.right = right
        self.reason = reason


def hidden(what: str, error: OrderHidden, **log_fields: Any) -> dict[str, Any]:
    """Count, log (naming the order and the missing right) and skip an order the integration may
    not read; alarmed (`CrmOrdersHidden-<crm>`), as its SMS may be lost."""
    metrics.add_metric(name=HIDDEN_METRIC, unit=MetricUnit.Count, value=1)
    logger.warning(
        "CRM order hidden from the integration's user",
        extra={"what": what, "missing_right": error.right, "crm_answer": error.reason, **log_fields},
    )
    return {"published": False, "hidden": True, "reason": f"{what} is hidden: {error.right}"}


def misconfigured(kind: str, reason: str, **log_fields: Any) -> NoReturn:
    """Count, log and raise: the worker dead-letters the record with `reason`."""
    metrics.add_metric(name=MISCONFIGURED_METRIC, unit=MetricUnit.Count, value=1)
    logger.error("CRM source misconfigured", extra={"kind": kind, "reason": reason, **log_fields})
    raise SourceMisconfigured(reason, kind)


def refused(error: RemoteRefused, what: str, unauthorized_hint: str) -> NoReturn:
    """A definite refusal of the CRM's API: its credential (`unauthorized_hint` says which to
    check), or the call itself, is wrong; a person must act."""
    if error.kind == "unauthorized":
        misconfigured("unauthorized", f"{what}: {error.reason}; {unauthorized_hint}")
    misconfigured("api_refused", f"{what}: {error.reason}")


class Contact(Protocol):
    @property
    def id(self) -> int: ...

    def phone(self) -> str | None: ...


ContactT = TypeVar("ContactT", bound=Contact)


def contact_with_phone(
    read: Callable[[int], ContactT],
    contact_id: int | None,
    *,
    what: str,
    status: str,
    unauthorized_hint: str,
    **log_fields: Any,
) -> tuple[ContactT, str] | dict[str, Any]:
    """The deal's or lead's contact and the phone to text, or the outcome without one
    (`missing_phone`: ignored, or misconfiguration where an SMS rule applies)."""
    if contact_id is None:
        return missing_phone(status, f"{what} has no contact", **log_fields)
    try:
        contact = read(contact_id)
    except RemoteRefused as error:
        if error.kind == "not_found":
            return missing_phone(status, f"{what}: its contact {contact_id} is gone", **log_fields)
        refused(error, f"{what}: contact {contact_id}", unauthorized_hint)
    phone = contact.phone()
    if phone is None:
        return missing_phone(status, f"{what}: contact {contact.id} has no phone", **log_fields)
    return contact, phone


def mapped_status(lookup: Lookup, *, setting: str, pipeline: str, stage: str, what: str) -> str | None:
    """The order status of a stage; None when its pipeline is not connected (the caller ignores
    the event); a stage missing from a connected pipeline is misconfiguration."""
    if lookup.kind == "pipeline_not_connected":
        return None
    if lookup.kind == "unknown_stage" or lookup.status is None:
        misconfigured(
            "unknown_stage",
            f"{what}: stage {stage!r} of pipeline {pipeline!r} is not in {setting};"
            " add it and redrive the DLQ",
        )
    return lookup.status


def rules() -> SmsRules:
    return load_rules()


def missing_phone(order_status: str, why: str, **log_fields: Any) -> dict[str, Any]:
    """No phone to text: misconfiguration if an SMS rule may send for the status, else ignored."""
    if rules().sends_for(order_status):
        misconfigured("no_phone", f"{why}, and status {order_status!r} has an SMS rule", **log_fields)
    return ignored(f"{why}; no SMS rule for status {order_status!r}", **log_fields)


def publish(order: OrderStatus, envelope: Envelope) -> dict[str, Any]:
    """Publish the order event; an invalid phone is misconfiguration only where a rule applies."""
    try:
        event_id = publish_order_status(order, correlation_id=envelope.correlation_id)
    except InvalidCustomerPhone as error:
        return missing_phone(order.status, error.reason, order_id=order.order_id)
    logger.info(
        "Order status published",
        extra={
            "order_id": order.order_id,
            "status": order.status,
            "event_id": event_id,
            "recipient": mask_phone(order.phone),
        },
    )
    metrics.add_metric(name="OrderEventsPublished", unit=MetricUnit.Count, value=1)
    return {"published": True, "event_id": event_id, "order_id": order.order_id, "status": order.status}
