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
from pipeline.crm_sources import ignored, mapped_status, misconfigured, missing_phone, publish, status_map
from pipeline.envelope import Envelope
from pipeline.errors import PermanentError, RemoteRefused
from pipeline.order_events import OrderStatus
from pipeline.secrets import secret_json
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


def _refused(refused: RemoteRefused, what: str) -> Any:
    kind = "unauthorized" if refused.kind == "unauthorized" else "api_refused"
    hint = (
        "; the long-lived token in the amocrm_api secret was revoked or expired"
        if kind == "unauthorized"
        else ""
    )
    misconfigured(kind, f"{what}: {refused.reason}{hint}")


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
    except RemoteRefused as refused:
        if refused.kind == "not_found":
            return ignored("lead not found (deleted since the event?)", lead_id=lead_id)
        return _refused(refused, f"amocrm lead {lead_id}")
    what = f"amocrm lead {lead.id}"
    statuses = status_map(STATUSES_ENV)
    lookup = statuses.lookup(lead.pipeline_id, lead.status_id)
    pipeline, stage = str(lead.pipeline_id), str(lead.status_id)
    status = mapped_status(lookup, setting=SETTING, pipeline=pipeline, stage=stage, what=what)
    log_fields = {"lead_id": lead.id, "pipeline_id": lead.pipeline_id, "status_id": lead.status_id}
    if status is None:
        return ignored(f"pipeline {pipeline!r} is not connected ({SETTING})", **log_fields)
    if lead.main_contact_id is None:
        return missing_phone(status, f"{what} has no contact", **log_fields)
    try:
        contact = api.contact(lead.main_contact_id)
    except RemoteRefused as refused:
        if refused.kind == "not_found":
            return missing_phone(status, f"{what}: its contact {lead.main_contact_id} is gone", **log_fields)
        return _refused(refused, f"{what}: contact {lead.main_contact_id}")
    phone = contact.phone()
    if phone is None:
        return missing_phone(status, f"{what}: contact {contact.id} has no phone", **log_fields)
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
