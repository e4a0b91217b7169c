"""Pausing a consumer's record while its remote refuses the whole account (`AccountRefused`).

The worker (`pipeline.worker`, whose module docstring says when and why) calls these: how long a
paused record stays away, the re-send of an unordered consumer's record (its receive count, which
feeds the redrive policy, starts anew; its first send time is carried along so the bound holds),
and the journal note of the consumer's latest pause that `ops doctor` reads.
"""

from __future__ import annotations

import math
import time
from typing import Any, NamedTuple

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from pipeline import aws
from pipeline.errors import AccountRefused
from pipeline.formats import by_name as by_format
from pipeline.observability import mask_phones
from pipeline.registry import Consumer
from pipeline.retention import CONSUMER_QUEUE_RETENTION

# SQS's longest delay of a sent message: how long an unordered consumer's paused record stays away.
PAUSE_SECONDS = 900
# SQS caps a message's visibility timeout at 12 hours.
MAX_VISIBILITY_SECONDS = 43_200
# The message attribute carrying a re-sent paused record's first send time (epoch milliseconds).
FIRST_SENT_ATTRIBUTE = "first_sent_at"
# The journal item holding a consumer's latest pause (`ops doctor` reads it).
PAUSED_KEY = "{consumer}#paused"
PAUSED_FORMAT = by_format("consumer_paused")
# AccountPaused{consumer, cause}: one per paused record (`infra.constructs.monitoring` alarms on it).
PAUSED_METRIC = "AccountPaused"
RETENTION_SECONDS = int(CONSUMER_QUEUE_RETENTION.total_seconds())
# What each cause of a pause means, and what fixes it (`pipeline.errors.ACCOUNT_CAUSES`); the
# alarms (`infra.constructs.monitoring`) and `ops doctor` say them.
PAUSE_CAUSES = {
    "unauthorized": "the token or webhook code is revoked or expired, also after re-reading its secret",
    "blocked": "the vendor blocked the account (amoCRM 403, a Bitrix24 portal deleted or REST blocked)",
    "unpaid": "the plan ended or does not include the API (amoCRM 402, Bitrix24 ACCESS_DENIED)",
    "out_of_balance": "the SMS gateway has no balance left",
    "flood_control": "Telegram's 429 asked the whole bot to wait longer than the hand-back cap",
}
PAUSE_FIXES = {
    "unauthorized": "put the new token in the consumer's secret (it is re-read at the next refusal)",
    "blocked": "have the vendor unblock the account",
    "unpaid": "pay for the plan",
    "out_of_balance": "top up the gateway's balance",
    "flood_control": "wait it out; if it recurs, lower telegram_messages_per_second",
}

# A consumer whose latest pause is older than this many of its pause waits has resumed: a record
# still refused comes back each wait and notes its pause again.
STILL_PAUSED_WAITS = 2


def pause_seconds(consumer: Consumer) -> int:
    """How long a record paused for an account refusal stays away (see the module docstring):
    SQS's longest delay for an unordered consumer (re-sent, its receive count starts anew); for an
    ordered one a visibility long enough that its queue's redrive count of receives outlasts the
    queue's retention (the bot: 4 days / 50 receives = 1 h 55 min). A consumer's own
    `retry.pause_seconds` wins (the chaos campaign's pauses of seconds)."""
    if consumer.retry.pause_seconds is not None:
        return consumer.retry.pause_seconds
    if not consumer.ordered:
        return PAUSE_SECONDS
    spread = math.ceil(RETENTION_SECONDS / consumer.redrive_max_receive_count)
    return min(MAX_VISIBILITY_SECONDS, max(PAUSE_SECONDS, spread))


def first_sent_ms(record: SQSRecord) -> int:
    """When the record's first copy was sent: its `first_sent_at` attribute, else its own (now
    when SQS gave none: an unknown age never dead-letters a record)."""
    carried = (record.raw_event.get("messageAttributes") or {}).get(FIRST_SENT_ATTRIBUTE) or {}
    value = str(carried.get("stringValue") or record.attributes.sent_timestamp or "")
    return int(value) if value.isdigit() and int(value) > 0 else int(time.time() * 1000)


def outliving_age(consumer: Consumer, record: SQSRecord, delay: int, receive_count: int) -> float | None:
    """The record's age in seconds when keeping it `delay` more would outlive its queue's
    retention (or, ordered, its redrive count of receives); None while it may be kept."""
    age = time.time() - first_sent_ms(record) / 1000
    if age + delay < RETENTION_SECONDS and not (
        consumer.ordered and receive_count >= consumer.redrive_max_receive_count
    ):
        return None
    return age


def resend(queue_url: str, record: SQSRecord, first_sent: int, delay: int) -> None:
    """A copy of the record with its first send time, delayed; the caller then acknowledges the
    original. A crash between the two leaves both: the event's second run is a duplicate
    (idempotency). A failed send raises: the record fails and comes back after the visibility
    timeout."""
    attributes: dict[str, Any] = {
        name: {"DataType": value.get("dataType") or "String", "StringValue": value["stringValue"]}
        for name, value in (record.raw_event.get("messageAttributes") or {}).items()
        if value.get("stringValue")
    }
    attributes[FIRST_SENT_ATTRIBUTE] = {"DataType": "Number", "StringValue": str(first_sent)}
    aws.client("sqs").send_message(
        QueueUrl=queue_url, MessageBody=record.body, MessageAttributes=attributes, DelaySeconds=delay
    )


class Paused(NamedTuple):
    """A consumer's latest pause as noted (`seconds` None: the note does not say, its consumer's now)."""

    cause: str
    reason: str
    paused_at: float
    seconds: float | None


def pause_of(item: dict[str, Any]) -> Paused:
    """A `<consumer>#paused` item (low-level attribute values) of a version this code reads."""
    PAUSED_FORMAT.version_of(item)
    seconds = item.get("pause_seconds", {}).get("N")
    return Paused(
        item.get("cause", {}).get("S", "?"),
        item.get("reason", {}).get("S", ""),
        float(item.get("paused_at", {}).get("N", "0")),
        float(seconds) if seconds is not None else None,
    )


def note(journal_table: str, consumer: Consumer, error: AccountRefused) -> None:
    """Write the consumer's latest pause (`<consumer>#paused`) to the journal."""
    now = int(time.time())
    item = {
        "id": {"S": PAUSED_KEY.format(consumer=consumer.name)},
        **PAUSED_FORMAT.written(),
        "cause": {"S": error.cause},
        "reason": {"S": mask_phones(error.reason)[:1000]},
        "paused_at": {"N": str(now)},
        "pause_seconds": {"N": str(pause_seconds(consumer))},
        "expiration": {"N": str(now + RETENTION_SECONDS)},
    }
    aws.client("dynamodb").put_item(TableName=journal_table, Item=item)
