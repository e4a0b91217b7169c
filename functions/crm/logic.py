"""A new contact becomes exactly one CRM lead.

Two layers keep it to one:

- the worker's idempotency runs `push_lead` once per update (Telegram's redeliveries, SNS/SQS
  duplicates);
- a contact record `contact#<from.id>` in the journal table runs the push once per user,
  across different updates (a /start, then "hello", then a shared contact).

The record is claimed *before* the push, as `pending` by this event, and confirmed `pushed`
after. A claim by another event means that event owns the lead: its retries (or its redrive
from the DLQ) push it, so this update does nothing. A retry of the owning event finds its own
pending claim and pushes again; only a crash between a successful push and the confirmation can
then repeat the push, which the webhook client's `Idempotency-Key` lets the receiver drop.
A failed push leaves the claim pending: nothing is lost, and no other update creates a second lead.
A lead the CRM refuses is dead-lettered with its claim still pending: once the cause is fixed,
redriving the DLQ creates it.

A known contact's event that brings a phone (a shared contact; the example bot's confirmed
number) adds no second lead: it puts the phone on the lead the record names, through the sink's
update (`crm.contacts`: one event at a time, once per event, never an earlier number over a
later one). While the lead is still being created by another event, or another event's phone
is on its way, the update is retried (TransientError): so whichever consumer sees the contact
first, the end state is one lead with the newest phone.
"""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from crm.contacts import ContactBook
from crm.leads import Lead, lead_from_envelope
from crm.sinks import LeadSink, sink_from_config
from pipeline.envelope import Envelope
from pipeline.errors import AccountRefused, PermanentError, TransientError
from pipeline.observability import mask_phone
from pipeline.secrets import secret_json, with_refreshed_secret

logger = Logger(child=True)
# The sink's configuration and credential (re-read once when the sink refuses it: a new token).
CRM_SECRET = "crm_api"  # noqa: S105 - the registry name of the secret, not a value
metrics = Metrics()


def push_lead(envelope: Envelope) -> dict[str, Any]:
    """The worker's `process` for the crm consumer."""
    lead = lead_from_envelope(envelope)
    if lead is None:
        logger.info("no lead: message has no human sender")
        return {"lead": "skipped", "reason": "no human sender"}
    return create_lead(lead)


def _sink() -> LeadSink:
    return sink_from_config(secret_json(CRM_SECRET))


def create_lead(lead: Lead) -> dict[str, Any]:
    """One lead per contact (the `contact#<user id>` claim), pushed to the configured sink; a known
    contact's new phone goes onto that lead. Also the bot consumer's way to a lead (its example bot)."""
    contacts = ContactBook(os.environ["JOURNAL_TABLE"])
    if not contacts.claim(lead):
        if lead.phone:
            return _update_lead(contacts, lead)
        logger.debug("no lead: contact already known", extra={"telegram_user_id": lead.telegram_user_id})
        return {"lead": "skipped", "reason": "contact already known"}

    lead_id = with_refreshed_secret(CRM_SECRET, lambda: _sink().push(lead))
    contacts.confirm(lead, lead_id)
    metrics.add_metric(name="LeadsCreated", unit=MetricUnit.Count, value=1)
    logger.info(
        "lead created",
        extra={
            "telegram_user_id": lead.telegram_user_id,
            "trigger": lead.trigger,
            "lead_id": lead_id,
            "phone": mask_phone(lead.phone) if lead.phone else None,
        },
    )
    return {"lead": "created", "lead_id": lead_id, "trigger": lead.trigger}


_SKIPPED = {
    "unchanged": "phone already on the lead",
    "stale": "a later phone is on the lead",
    "no_lead_id": "the CRM told no lead id",
}


def _update_lead(contacts: ContactBook, lead: Lead) -> dict[str, Any]:
    """Put a known contact's phone on their lead, once per event and never over a later event's."""
    assert lead.phone
    claim = contacts.claim_update(lead)
    extra = {
        "telegram_user_id": lead.telegram_user_id,
        "lead_id": claim.lead_id,
        "phone": mask_phone(lead.phone),
    }
    if claim.plan == "wait":
        # The lead is being created, or given another phone, by another event: after it, this one.
        raise TransientError("crm: the contact's lead is being written by another event")
    if claim.plan != "update":
        logger.info(f"no lead update: {_SKIPPED[claim.plan]}", extra=extra)
        return {
            "lead": "unchanged" if claim.plan == "unchanged" else "skipped",
            "reason": _SKIPPED[claim.plan],
        }
    assert claim.lead_id is not None

    lead_id = claim.lead_id
    try:
        with_refreshed_secret(CRM_SECRET, lambda: _sink().update(lead_id, lead))
    except (PermanentError, AccountRefused):
        contacts.release_update(lead)  # dead-lettered or paused: its next delivery claims again
        raise
    contacts.confirm_update(lead)
    metrics.add_metric(name="LeadsUpdated", unit=MetricUnit.Count, value=1)
    logger.info("lead updated", extra=extra)
    return {"lead": "updated", "lead_id": claim.lead_id, "trigger": lead.trigger}
