"""How long a message can come back, and so how long everything that deduplicates it must last.

One computed bound, used by the CDK stack (queue retention), the workers (the shortest
idempotency TTL they accept), the SMS journal (its record retention) and the local runtime:

    REDELIVERY_BOUND = CONSUMER_QUEUE_RETENTION + DLQ_RETENTION + REDELIVERY_MARGIN

(the docs state the resulting numbers; tests/unit/test_readme.py checks them against these).

Why that sum, counted from the moment a consumer records an event as done: a copy of the
event (a Telegram or CRM resend, an SNS duplicate, a redelivery) can be dead-lettered only when
it could not see that record, i.e. before it existed or while it was in progress. The worker
dead-letters with SendMessage, a new message whose DLQ retention starts then; an operator's
`python -m ops dlq redrive` may move it back on its last DLQ day, and a redrive gives it a
fresh retention period in the consumer queue, where it may wait until its last day there
before it is received. Every later copy sees the record and is skipped as a duplicate.

A message dead-lettered again after a redrive starts a new round trip: the bound covers one.

No CDK import: `infra` reads these values to build the stack, the layer to check settings.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime, timedelta

from pipeline.registry import CONSUMERS, Consumer

DAY = timedelta(days=1)

# SQS's limit on MessageRetentionPeriod.
SQS_MAX_RETENTION = timedelta(days=14)
# SQS's default retention, now set explicitly on every consumer queue: long enough for an outage
# of a remote to pass; any longer lengthens the bound (and every idempotency record) with it.
CONSUMER_QUEUE_RETENTION = timedelta(days=4)
# A dead letter stays inspectable and redrivable as long as SQS allows.
DLQ_RETENTION = SQS_MAX_RETENTION


def retry_schedule(consumer: Consumer) -> timedelta:
    """The longest a message of this consumer is retried before the worker dead-letters it:
    each delivery can wait its longest backoff, or a crash's visibility timeout, before the next
    (as `pipeline.sms.reconcile.redelivery_horizon` counts one attempt)."""
    per_attempt = consumer.visibility_timeout_seconds + consumer.retry.max_delay_seconds
    return timedelta(seconds=consumer.retry.max_receive_count * per_attempt)


def redelivery_margin(consumers: Iterable[Consumer] = CONSUMERS) -> timedelta:
    """A whole day, or the registry's longest retry schedule rounded up to days if that is longer.

    The SMS journal writes its record on a message's first attempt, and that message is
    dead-lettered (starting its DLQ retention) only after its last retry; a copy dead-lettered
    while a record was in progress is at most one worker timeout (under 15 minutes) late; and a
    day absorbs clock differences between hosts. Whole days keep the bound in the SMS journal's
    unit.
    """
    longest = max((retry_schedule(consumer) for consumer in consumers), default=timedelta(0))
    return max(DAY, DAY * math.ceil(longest / DAY))


REDELIVERY_MARGIN = redelivery_margin()
# The longest a message can take to come back after its event was recorded as done.
REDELIVERY_BOUND = CONSUMER_QUEUE_RETENTION + DLQ_RETENTION + REDELIVERY_MARGIN

# The longest bot-wide flood wait (a Telegram 429's `retry_after`, `pipeline.pacing`) a record is
# handed back for, uncounted and unalarmed: a 96th of its queue's retention (1 h of 4 days). A
# longer one is a pause (`pipeline.worker`: alarmed, `ops doctor` says it), never a sleep, and no
# record waits past its retention without a dead letter naming why.
TELEGRAM_RETRY_AFTER_CAP_SECONDS = int(CONSUMER_QUEUE_RETENTION.total_seconds()) // 96

# The Powertools idempotency TTL every worker uses by default and the shortest it accepts.
IDEMPOTENCY_TTL_SECONDS = int(REDELIVERY_BOUND.total_seconds())
# The shortest SMS journal retention accepted, in its unit (days).
SMS_RETENTION_MIN_DAYS = math.ceil(REDELIVERY_BOUND / DAY)
# The CRM resends a webhook it got no 2xx for over hours to a few days; each resend is a new
# message with a bound of its own, so an SMS key must outlive the resends by the bound.
CRM_RESEND_WINDOW = timedelta(days=3)
SMS_RETENTION_DAYS = math.ceil((REDELIVERY_BOUND + CRM_RESEND_WINDOW) / DAY)


def describe_bound() -> str:
    """The bound and its terms, e.g. for error messages."""
    return (
        f"{REDELIVERY_BOUND.days} days = consumer queue {CONSUMER_QUEUE_RETENTION.days} d"
        f" + DLQ {DLQ_RETENTION.days} d + margin {REDELIVERY_MARGIN.days} d"
    )


def check_idempotency_ttl(seconds: int) -> int:
    """Refuse an idempotency TTL shorter than the bound: a redriven message would find its
    record gone and repeat a completed side effect (a second reply, lead or Bedrock call)."""
    if seconds < IDEMPOTENCY_TTL_SECONDS:
        raise ValueError(
            f"must be at least {IDEMPOTENCY_TTL_SECONDS} ({describe_bound()}): a message can come"
            " back that long after it was processed (a DLQ redrive restarts its queue retention),"
            " and a record expired by then lets it repeat its side effects"
        )
    return seconds


# How long the conversations table keeps a Telegram update (its text, names, ids) for the console
# and the `ai` consumer's labels: long enough to look back on a support case, then gone (TTL).
CONVERSATION_RETENTION = timedelta(days=90)


def conversation_expiration(received_at: datetime) -> int:
    """The TTL (epoch seconds) of the conversations item of an update received at `received_at`."""
    return int((received_at + CONVERSATION_RETENTION).timestamp())
