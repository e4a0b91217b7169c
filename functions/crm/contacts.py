"""The `contact#<user id>` records in the journal table: who owns a contact's lead, and whose phone is on it.

A record is claimed by the event that creates the lead (`event_id`, `status` pending -> pushed,
`lead_id` the CRM's id). The phone on the lead is kept as `phone_sha256` (a digest, to compare:
the number itself is in the conversations table) with `phone_order`, the Telegram `update_id` of
the event it came from. A later phone is put on the lead by one event at a time: its claim
(`update_event_id`, `update_order`, `update_sha256`) is written before the CRM call and folded
into `phone_*` after it, so a retry of that event repeats the call (which the sink makes
harmless) and an earlier event never replaces a later one's phone.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from botocore.exceptions import ClientError

from crm.leads import Lead
from pipeline import aws, formats

# The contacts are written through boto3's resource: built at the init (`pipeline.aws.prepare`).
aws.prepare(resources=("dynamodb",))

PENDING = "pending"
# The contact item's format (`pipeline.formats`); items from before release 0.5.0 have none (0).
CONTACT_SCHEMA_VERSION = formats.by_name("crm_lead_contact").version
PUSHED = "pushed"
# A new user, or a retry of the event that already claimed this user.
CLAIM_CONDITION = "attribute_not_exists(id) OR (#status = :pending AND event_id = :event_id)"
# The lead exists, no later phone is on it, and no other event is putting one on.
UPDATE_CONDITION = (
    "#status = :pushed AND (attribute_not_exists(phone_order) OR phone_order < :order)"
    " AND (attribute_not_exists(update_event_id) OR update_event_id = :event_id)"
)
UPDATE_FIELDS = ("update_event_id", "update_order", "update_sha256", "update_claimed_at")

# What an event with a phone does about a known contact (see `plan_update`).
Plan = Literal["update", "unchanged", "stale", "wait", "no_lead_id"]


def _now() -> str:
    return datetime.now(UTC).isoformat()


def phone_digest(phone: str) -> str:
    """The phone's digits, hashed: "+49 170 1234567" and "+491701234567" are one number."""
    return hashlib.sha256("".join(ch for ch in phone if ch.isdigit()).encode()).hexdigest()


def event_order(event_id: str) -> int:
    """The Telegram `update_id` ending the event id ("telegram:<bot>:<update_id>"): later updates
    have greater ids, whichever consumer sees them first. 0 for an id without one."""
    tail = event_id.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else 0


@dataclass(frozen=True)
class Claim:
    """The record as one event sees it, and what that event is to do."""

    plan: Plan
    lead_id: str | None = None


def plan_update(record: dict[str, Any], event_id: str, order: int, digest: str) -> Plan:
    """What an event bringing a phone does about a claimed contact (a pure decision on the record).

    An update in flight is waited for (or, when it is a later event's, left to win) before the
    phone on the lead is compared: else an earlier number could land after this event's.
    """
    pending = record.get("update_event_id")
    if pending == event_id:
        return "update"  # this event's own claim: a retry after a crash, or after a failed call
    if pending is not None:
        return "stale" if int(record.get("update_order", -1)) > order else "wait"
    if record.get("phone_sha256") == digest:
        return "unchanged"
    if int(record.get("phone_order", -1)) >= order:
        return "stale"  # a later event's phone is on the lead
    if record.get("status") != PUSHED:
        return "wait"  # the lead is still being created by another event
    if not record.get("lead_id"):
        return "no_lead_id"
    return "update"


def contact_record(item: dict[str, Any]) -> dict[str, Any]:
    """A contact item as read ({}: none), of a version this code reads (1 only adds the version)."""
    if item:
        formats.by_name("crm_lead_contact").version_of(item)
    return item


class ContactBook:
    """The `contact#<user id>` records in the journal table (no TTL: a contact stays known)."""

    def __init__(self, table_name: str) -> None:
        self.table = aws.resource("dynamodb").Table(table_name)

    @staticmethod
    def key(user_id: int) -> str:
        return f"contact#{user_id}"

    def claim(self, lead: Lead) -> bool:
        """True when this event owns the user's lead: the user is new, or this event claimed it before."""
        item: dict[str, Any] = {
            "id": self.key(lead.telegram_user_id),
            formats.SCHEMA_VERSION: CONTACT_SCHEMA_VERSION,
            "status": PENDING,
            "event_id": lead.event_id,
            "telegram_user_id": lead.telegram_user_id,
            "claimed_at": _now(),
        }
        if lead.phone:
            item |= {"phone_sha256": phone_digest(lead.phone), "phone_order": event_order(lead.event_id)}
        try:
            self.table.put_item(
                Item=item,
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

    def claim_update(self, lead: Lead, attempts: int = 3) -> Claim:
        """Decide on the current record and, for "update", hold the contact's update slot for this
        event (a conditional write; a record changed meanwhile is read and decided again)."""
        assert lead.phone
        key = {"id": self.key(lead.telegram_user_id)}
        order, digest = event_order(lead.event_id), phone_digest(lead.phone)
        plan: Plan = "wait"
        for _ in range(attempts):
            record = contact_record(self.table.get_item(Key=key, ConsistentRead=True).get("Item") or {})
            plan = plan_update(record, lead.event_id, order, digest)
            if plan != "update":
                return Claim(plan, record.get("lead_id"))
            try:
                self.table.update_item(
                    Key=key,
                    UpdateExpression=(
                        "SET update_event_id = :event_id, update_order = :order,"
                        " update_sha256 = :digest, update_claimed_at = :now"
                    ),
                    ConditionExpression=UPDATE_CONDITION,
                    ExpressionAttributeNames={"#status": "status"},
                    ExpressionAttributeValues={
                        ":pushed": PUSHED,
                        ":order": order,
                        ":event_id": lead.event_id,
                        ":digest": digest,
                        ":now": _now(),
                    },
                )
            except ClientError as error:
                if aws.error_code(error) != "ConditionalCheckFailedException":
                    raise
                continue
            return Claim("update", record["lead_id"])
        return Claim("wait")

    def confirm_update(self, lead: Lead) -> None:
        """The update reached the CRM: its phone is the lead's now, and the slot is free."""
        self._finish_update(
            lead,
            "SET phone_sha256 = update_sha256, phone_order = update_order, phone_updated_at = :now REMOVE "
            + ", ".join(UPDATE_FIELDS),
            {":now": _now()},
        )

    def release_update(self, lead: Lead) -> None:
        """The CRM refused the update: free the slot, so other events are not held behind a dead letter."""
        self._finish_update(lead, "REMOVE " + ", ".join(UPDATE_FIELDS), {})

    def _finish_update(self, lead: Lead, expression: str, values: dict[str, Any]) -> None:
        try:
            self.table.update_item(
                Key={"id": self.key(lead.telegram_user_id)},
                UpdateExpression=expression,
                ConditionExpression="update_event_id = :event_id",
                ExpressionAttributeValues={":event_id": lead.event_id, **values},
            )
        except ClientError as error:
            if aws.error_code(error) != "ConditionalCheckFailedException":
                raise
