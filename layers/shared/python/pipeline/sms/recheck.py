"""A notification refused for good, redelivered with the phone it was refused for: ask the CRM.

An operator redrives the sms DLQ after fixing a refused phone in the CRM; the redriven event still
carries the old number, and a contact's edit sends no order webhook. So the `sms` consumer asks
the order's CRM consumer to read the order again (`pipeline.crm.look`), which publishes the entry
again if its phone changed (`pipeline.crm.sync`).
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from botocore.exceptions import BotoCoreError, ClientError

from pipeline import aws
from pipeline.crm.event_model import CrmEvent
from pipeline.crm.look import look_request
from pipeline.crm.order_events import TOPIC_ENV
from pipeline.envelope import Envelope, publish_request, sns_attributes
from pipeline.errors import TransientError
from pipeline.observability import mask_phone
from pipeline.sms.clock import iso
from pipeline.sms.journal import Notification, State

logger = Logger(child=True)
metrics = Metrics()


def refused_for_good(record: Notification) -> bool:
    """`failed` on a refusal for good (an invalid number, an opt-out) that nothing ever took."""
    return (
        record.state is State.FAILED
        and not record.failed_retryable
        and record.never_taken
        and record.abandoned_at is None
    )


def ask_crm_to_look(
    now: datetime, record: Notification, event: CrmEvent, envelope: Envelope
) -> dict[str, Any] | None:
    """A notification refused for good comes again with the phone it was refused for: a DLQ
    redrive, most likely after the phone was fixed in the CRM, which this event predates. Its CRM's
    consumer is asked to read the order again (`pipeline.crm.look`); if the phone changed, it
    publishes the entry again with the new one, which the sms consumer sends there once
    (`pipeline.sms.service`). If not, nothing is published and the record stays `failed` for a
    person (`ops journal`). None when the order's CRM has no consumer that reads orders: the
    refusal stands (DLQ)."""
    topic = os.environ.get(TOPIC_ENV)
    look = look_request(
        event.order_key,
        event_id=f"sms-recheck:{event.order_key}:{record.key[:16]}:{iso(now)}",
        correlation_id=envelope.correlation_id,
        received_at=now,
    )
    if look is None or not topic:
        return None
    attributes = sns_attributes({"source": look.source, "type": look.type})
    try:
        aws.client("sns").publish(**publish_request(topic, look, attributes))
    except (ClientError, BotoCoreError) as error:
        raise TransientError(f"asking the CRM to re-read the order failed ({type(error).__name__})") from None
    metrics.add_metric(name="SmsPhoneRecheckRequested", unit=MetricUnit.Count, value=1)
    logger.warning(
        "SMS refused for good redelivered: the CRM is asked to re-read the order's phone",
        extra={
            "notification_key": record.key,
            "order": event.order_key,
            "recipient": mask_phone(record.recipient),
            "failure_reason": record.failure_reason,
        },
    )
    reason = "refused for good; the CRM was asked to re-read the order's phone"
    return {"sent": False, "reason": reason, "key": record.key, "state": record.state.value}
