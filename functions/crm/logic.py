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
redriving the DLQ creates it. (A contact who shares their phone after their lead was created
adds no second lead; the number is in the conversations table.)
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from botocore.exceptions import ClientError

from crm.leads import Lead, lead_from_envelope
from crm.sinks import sink_from_config
from pipeline import aws
from pipeline.envelope import Envelope
from pipeline.observability import mask_phone

logger = Logger(child=True)
metrics = Metrics()

PENDING = "pending"
PUSHED = "pushed"
# A new user, or a retry of the event that already claimed this user.
CLAIM_CONDITION = "attribute_not_exists(id) OR (#status = :pending AND event_id = :event_id)"


def _now() -> str:
    return datetime.now(UTC).isoformat()


class ContactBook:
    """The `contact#<user id>` records in the journal table (no TTL: a contact stays known)."""

    def __init__(self, table_name: str) -> None:
        self.table = aws.resource("dynamodb").Table(table_name)

    @staticmethod
    def key(user_id: int) -> str:
        return f"contact#{user_id}"

    def claim(self, lead: Lead) -> bool:
        """True when this event owns the user's lead: the user is new, or this event claimed it before."""
        try:
            self.table.put_item(
                Item={
                    "id": self.key(lead.telegram_user_id),
                    "status": PENDING,
                    "event_id": lead.event_id,
                    "telegram_user_id": lead.telegram_user_id,
                    "claimed_at": _now(),
                },
                ConditionExpression=CLAIM_CONDITION,
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues={":pending": PENDING, ":event_id": lead.event_id},
            )
        except ClientError as error:
            if aws.error_code(error) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def confirm(self, lead: Lead, lead_id: str | None) -> None:
        self.table.update_item(
            Key={"id": self.key(lead.telegram_user_id)},
            UpdateExpression="SET #status = :pushed, pushed_at = :now, lead_id = :lead_id",
            ConditionExpression="event_id = :event_id",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues={
                ":pushed": PUSHED,
                ":now": _now(),
                ":lead_id": lead_id,
                ":event_id": lead.event_id,
            },
        )


def push_lead(envelope: Envelope) -> dict[str, Any]:
    """The worker's `process` for the crm consumer."""
    lead = lead_from_envelope(envelope)
    if lead is None:
        logger.info("no lead: message has no human sender")
        return {"lead": "skipped", "reason": "no human sender"}
    return create_lead(lead)


def create_lead(lead: Lead) -> dict[str, Any]:
    """One lead per contact (the `contact#<user id>` claim), pushed to the configured sink; also
    the bot consumer's way to create a lead (its example bot)."""
    contacts = ContactBook(os.environ["JOURNAL_TABLE"])
    if not contacts.claim(lead):
        logger.info("no lead: contact already known", extra={"telegram_user_id": lead.telegram_user_id})
        return {"lead": "skipped", "reason": "contact already known"}

    from pipeline.secrets import secret_json  # at first use: it imports Powertools Parameters, and boto3

    lead_id = sink_from_config(secret_json("crm_api")).push(lead)
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
