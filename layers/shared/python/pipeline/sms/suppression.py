"""The suppression list of HTTP gateways and local runs: numbers that replied STOP, or that
`ops sms opt-out` put there (End User Messaging keeps its own list; this one is checked too).

One journal item per number, `id = sms-optout#<sha256 of the E.164 number>`, `schema_version` 1:
the number itself is not stored, only its masked form for people. It has no TTL: an opt-out
holds until an opt-in (a START reply, `ops sms opt-in`; its owner is the shop).

Functions of the journal *table* (a boto3 Table), not of `pipeline.sms.journal.Journal`: the
webhook's inbound STOP route (`webhook.sms_inbound`) writes the list with PutItem and DeleteItem
only, and imports nothing of the send journal.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from pipeline.formats import SCHEMA_VERSION
from pipeline.formats import by_name as by_format
from pipeline.observability import mask_phone
from pipeline.sms.clock import iso

PREFIX = "sms-optout#"
# The suppression item's version (`pipeline.formats`).
FORMAT = by_format("sms_suppression")
# Words an inbound SMS opts out / back in with (the keywords carriers and AWS honour).
STOP_WORDS = frozenset({"STOP", "STOPALL", "UNSUBSCRIBE", "CANCEL", "END", "QUIT", "OPTOUT", "OPT-OUT"})
START_WORDS = frozenset({"START", "UNSTOP", "YES", "OPTIN", "OPT-IN"})


def suppression_id(phone: str) -> str:
    return PREFIX + hashlib.sha256(phone.strip().encode()).hexdigest()


def opted_out(table: Any, phone: str) -> bool:
    item = table.get_item(Key={"id": suppression_id(phone)}, ConsistentRead=True).get("Item")
    return item is not None


def opt_out(table: Any, phone: str, *, by: str, now: datetime) -> bool:
    """Put the number on the list; False if it was on it already."""
    item = {
        "id": suppression_id(phone),
        SCHEMA_VERSION: FORMAT.version,
        "phone_masked": mask_phone(phone),
        "opted_out_at": iso(now),
        "by": by,
    }
    try:
        table.put_item(Item=item, ConditionExpression="attribute_not_exists(id)")
    except table.meta.client.exceptions.ConditionalCheckFailedException:
        return False
    return True


def opt_in(table: Any, phone: str) -> bool:
    """Take the number off the list; False if it was not on it."""
    answer = table.delete_item(Key={"id": suppression_id(phone)}, ReturnValues="ALL_OLD")
    return "Attributes" in answer


def inbound_keyword(text: str) -> str | None:
    """ "stop" or "start" for an inbound SMS that is one of the keywords, else None."""
    word = text.strip().upper()
    return "stop" if word in STOP_WORDS else "start" if word in START_WORDS else None
