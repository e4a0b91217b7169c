"""An amoCRM lead status change becomes the lead's order-status event.

amoCRM's "lead status changed" webhook names the lead, its new and old status and pipeline, but
not the customer: the lead is read through the API v4 with its contacts
(`GET /api/v4/leads/{id}?with=contacts`), then its main contact for the phone
(`GET /api/v4/contacts/{id}`), with the account's long-lived token (the `amocrm_api` secret,
`{"base_url": "https://<subdomain>.amocrm.ru", "token": "..."}`).

What is published is the lead's status as the API shows it now, so a late or repeated webhook
(amoCRM retries one it got no 2xx for) publishes what is true when it is read, and the `sms`
consumer's per-order history makes a repeat send nothing. The webhook's old status becomes the
event's `previous_status` only while the lead is still in the status the webhook reported.

Failures: see `pipeline.crm_sources` (ignored, misconfigured); the API's transient errors (429,
5xx, no answer) retry with the consumer's backoff.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pipeline.amocrm import AmoCrmApi, Lead
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
from pipeline.status_map import StatusMap

SOURCE = "amocrm"
SETTING = "amocrm_statuses"
STATUSES_ENV = SETTING.upper()


def change_of(payload: Mapping[str, Any]) -> dict[str, int | None]:
    """The lead's change as the webhook published it (it validated it)."""
    lead = payload.get("lead")
    if not isinstance(lead, Mapping):
        raise PermanentError("amocrm event has no lead")

    def number(key: str) -> int | None:
        value = lead.get(key)
        return int(value) if isinstance(value, int | str) and str(value).strip().isdigit() else None

    change = {
        key: number(key) for key in ("id", "status_id", "pipeline_id", "old_status_id", "old_pipeline_id")
    }
    if change["id"] is None or change["status_id"] is None or change["pipeline_id"] is None:
        raise PermanentError("amocrm event lacks the lead's id, status_id or pipeline_id")
    return change


def account() -> AmoCrmApi:
    # Imported at first use: pipeline.secrets imports Powertools Parameters, and they boto3.
    from pipeline.secrets import secret_json

    secret = secret_json("amocrm_api")
    base_url, token = secret.get("base_url"), secret.get("token")
    if (
        not isinstance(base_url, str)
        or not base_url.strip()
        or not isinstance(token, str)
        or not token.strip()
    ):
        misconfigured(
            "api_secret",
            'the amocrm_api secret needs {"base_url": "https://<subdomain>.amocrm.ru", "token": '
            '"<long-lived token>"}',
        )
    return AmoCrmApi(base_url.strip(), token.strip())


# What to check when amoCRM refuses the token.
UNAUTHORIZED_HINT = "the long-lived token in the amocrm_api secret was revoked or expired"


def _previous(statuses: StatusMap, change: Mapping[str, int | None], lead: Lead) -> str | None:
    """The webhook's old status, while the lead is still where the webhook said it went."""
    if (lead.status_id, lead.pipeline_id) != (change["status_id"], change["pipeline_id"]):
        return None
    old_status = change["old_status_id"]
    if old_status is None:
        return None
    return statuses.lookup(change["old_pipeline_id"] or lead.pipeline_id, old_status).status


def sync_lead(envelope: Envelope) -> dict[str, Any]:
    """The worker's `process` for the amocrm consumer (see the module docstring)."""
    change = change_of(envelope.payload)
    lead_id = int(change["id"] or 0)
    api = account()
    try:
        lead = api.lead(lead_id)
    except RemoteRefused as error:
        if error.kind == "not_found":
            return ignored("lead not found (deleted since the event?)", lead_id=lead_id)
        refused(error, f"amocrm lead {lead_id}", UNAUTHORIZED_HINT)
    what = f"amocrm lead {lead.id}"
    statuses = status_map(STATUSES_ENV)
    lookup = statuses.lookup(lead.pipeline_id, lead.status_id)
    pipeline, stage = str(lead.pipeline_id), str(lead.status_id)
    status = mapped_status(lookup, setting=SETTING, pipeline=pipeline, stage=stage, what=what)
    log_fields = {"lead_id": lead.id, "pipeline_id": lead.pipeline_id, "status_id": lead.status_id}
    if status is None:
        return ignored(f"pipeline {pipeline!r} is not connected ({SETTING})", **log_fields)
    found = contact_with_phone(
        api.contact,
        lead.main_contact_id,
        what=what,
        status=status,
        unauthorized_hint=UNAUTHORIZED_HINT,
        **log_fields,
    )
    if isinstance(found, dict):
        return found
    contact, phone = found
    entered: datetime = lead.updated_at or envelope.received_at
    order = OrderStatus(
        source=SOURCE,
        order_id=str(lead.id),
        status=status,
        previous_status=_previous(statuses, change, lead),
        occurred_at=entered,
        customer_name=contact.name or "",
        phone=phone,
        details={"lead_id": lead.id, "pipeline_id": lead.pipeline_id, "status_id": lead.status_id},
    )
    return publish(order, envelope)
