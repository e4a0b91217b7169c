"""Asking a CRM's consumer to look at one order again: the event the catch-up sweep publishes.

The `bitrix24` and `amocrm` consumers take it like their CRM's webhook for the order (its
`look_payload`) and read the order afresh; a phone corrected in the CRM since its order event was
published gets the event published again (`pipeline.crm.sync`). The sweep
(`pipeline.crm.sweep`) asks for the orders changed in the CRM; the `sms` consumer for an order
whose SMS the gateway refused for good, when that refusal is redelivered (a DLQ redrive after the
phone was fixed: `pipeline.sms.service`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from pipeline.envelope import Envelope

# The envelope type of a look request; the CRM consumers' filter policies take any type of theirs.
LOOK_EVENT_TYPE = "history.sweep"

# What each CRM's webhook publishes for an order (what its consumer reads the order id from).
LOOK_PAYLOADS: dict[str, Callable[[int], dict[str, Any]]] = {
    "bitrix24": lambda order_id: {"data": {"FIELDS": {"ID": str(order_id)}}},
    "amocrm": lambda order_id: {"lead": {"id": order_id}},
}


def look_request(
    order_key: str, *, event_id: str, correlation_id: str, received_at: datetime, **extra: Any
) -> Envelope | None:
    """The request to look at the order `order_key` (`bitrix24:42`); None when its CRM has no
    consumer that reads orders (the generic `crm` webhook's orders: the CRM pushes them).
    `extra` joins the payload (why it was asked)."""
    source, _, order = order_key.partition(":")
    payload = LOOK_PAYLOADS.get(source)
    if payload is None or not order.isdigit():
        return None
    return Envelope(
        event_id=event_id[:256],
        source=source,  # type: ignore[arg-type]
        type=LOOK_EVENT_TYPE,
        correlation_id=correlation_id,
        received_at=received_at,
        payload={**payload(int(order)), **extra},
    )
