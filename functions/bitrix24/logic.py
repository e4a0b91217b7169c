"""A Bitrix24 deal event becomes the deal's order-status event.

Bitrix24's outgoing webhook names the deal and nothing else (`data[FIELDS][ID]`), and fires
ONCRMDEALUPDATE on every edit of any field. So each event is a cue to read the deal as it is now
(`crm.deal.get`, then `crm.contact.get` for the phone), through the portal's inbound webhook URL
(the `bitrix24_api` secret), and publish its current stage as an order status; the `sms`
consumer's per-order history tells a stage change (one SMS) from an edit or a repeat (none).
Reading the current state also makes late and reordered events harmless: each publishes what is
true when it is read.

- The stage: `STAGE_ID` of `CATEGORY_ID` through `bitrix24_stages` (`pipeline.status_map`).
- When the deal entered it: `MOVED_TIME`, which is also the entry's transition id, so a deal
  moved out and back between two reads still counts as a new entry.
- An ONCRMDEALUPDATE sent more than MOVE_WINDOW after the deal's last move is an edit of another
  field: it is ignored before the contact is read. Without this, the first edit of an old deal
  after the pipeline is connected would look like a new entry and text its customer.

Failures: see `pipeline.crm_sources` (ignored, misconfigured); the portal's transient errors
(QUERY_LIMIT_EXCEEDED, 5xx, no answer) retry with the consumer's backoff.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pipeline.bitrix24 import Bitrix24Rest, Contact, Deal
from pipeline.crm_sources import (
    contact_with_phone,
    ignored,
    mapped_status,
    misconfigured,
    publish,
    refused,
    status_map,
)
from pipeline.envelope import Envelope
from pipeline.errors import PermanentError, RemoteRefused
from pipeline.order_events import OrderStatus

SOURCE = "bitrix24"
SETTING = "bitrix24_stages"
STAGES_ENV = SETTING.upper()
UPDATE_EVENT = "ONCRMDEALUPDATE"
# Bitrix24 sends an event within seconds of the change; a stage move is never this old when its
# own ONCRMDEALUPDATE is sent, an edit of another field usually is.
MOVE_WINDOW = timedelta(minutes=15)


def deal_id_of(payload: Mapping[str, Any]) -> int:
    """`data.FIELDS.ID` of the event the webhook published (it validated it)."""
    try:
        return int(payload["data"]["FIELDS"]["ID"])
    except (KeyError, TypeError, ValueError):
        raise PermanentError("bitrix24 event has no data[FIELDS][ID]") from None


def sent_at(payload: Mapping[str, Any]) -> datetime | None:
    """The event's `ts` (unix seconds, the portal's clock), if it has a valid one."""
    try:
        return datetime.fromtimestamp(int(payload["ts"]), UTC)
    except (KeyError, TypeError, ValueError, OverflowError, OSError):
        return None


def is_edit(event: str, sent: datetime | None, deal: Deal) -> bool:
    """An update sent long after the deal's last stage move did not move it."""
    if event != UPDATE_EVENT or sent is None or deal.moved_time is None:
        return False
    return sent - deal.moved_time > MOVE_WINDOW


def portal() -> Bitrix24Rest:
    # Imported at first use: pipeline.secrets imports Powertools Parameters, and they boto3.
    from pipeline.secrets import secret_json

    url = secret_json("bitrix24_api").get("url")
    if not isinstance(url, str) or not url.strip():
        misconfigured(
            "api_secret",
            "the bitrix24_api secret has no url: put the portal's inbound webhook URL "
            '(https://<portal>/rest/<user>/<code>/) in it as {"url": "..."}',
        )
    return Bitrix24Rest(url.strip())


# What to check when the portal refuses the inbound webhook's credential.
UNAUTHORIZED_HINT = "check the inbound webhook in the bitrix24_api secret (revoked? crm scope?)"


def sync_deal(envelope: Envelope) -> dict[str, Any]:
    """The worker's `process` for the bitrix24 consumer (see the module docstring)."""
    deal_id = deal_id_of(envelope.payload)
    rest = portal()
    try:
        deal = rest.deal(deal_id)
    except RemoteRefused as error:
        if error.kind == "not_found":
            return ignored("deal not found (deleted since the event?)", deal_id=deal_id)
        refused(error, f"bitrix24 deal {deal_id}", UNAUTHORIZED_HINT)
    what = f"bitrix24 deal {deal.id}"
    lookup = status_map(STAGES_ENV).lookup(deal.category_id, deal.stage_id)
    status = mapped_status(lookup, setting=SETTING, pipeline=deal.category_id, stage=deal.stage_id, what=what)
    log_fields = {"deal_id": deal.id, "category_id": deal.category_id, "stage_id": deal.stage_id}
    if status is None:
        return ignored(f"category {deal.category_id!r} is not connected ({SETTING})", **log_fields)
    sent = sent_at(envelope.payload)
    if is_edit(envelope.type, sent, deal):
        return ignored("an edit that did not move the stage", **log_fields)
    found = contact_with_phone(
        rest.contact,
        deal.contact_id,
        what=what,
        status=status,
        unauthorized_hint=UNAUTHORIZED_HINT,
        **log_fields,
    )
    if isinstance(found, dict):
        return found
    contact, phone = found
    return publish(_order(deal, contact, status, phone, sent or envelope.received_at), envelope)


def _order(deal: Deal, contact: Contact, status: str, phone: str, fallback: datetime) -> OrderStatus:
    entered = deal.moved_time or deal.date_modify or fallback
    return OrderStatus(
        source=SOURCE,
        order_id=str(deal.id),
        status=status,
        occurred_at=entered,
        customer_name=contact.display_name,
        phone=phone,
        transition_id=f"{deal.stage_id}@{deal.moved_time.isoformat()}" if deal.moved_time else None,
        details={"deal_id": deal.id, "category_id": deal.category_id, "stage_id": deal.stage_id},
    )
