"""The sms consumer deployed as the stack does it, on moto: queue + DLQ, the journal table with its
`by_state` index, the worker, the reconciler and the delivery-event handler, and the fake gateway.

Modules holding Powertools loggers (`pipeline.sms.service`, `.reconcile`, `.delivery`, the apps)
are imported only inside fixtures, once the Powertools environment is set, as in Lambda.
"""

from __future__ import annotations

import importlib
import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import pytest

from pipeline import aws
from pipeline.crm.event_model import CrmEvent
from pipeline.sms import gateways
from pipeline.sms.gateways import FakeGateway
from pipeline.sms.journal import BY_STATE_INDEX, CLOCK, KEY_PREFIX, Clock, Notification, notification_key
from pipeline.sms.orders import Move
from pipeline.sms.settings import DEFAULTS
from tests.unit.consumer_support import (
    ACCOUNT_ID,
    JOURNAL_TABLE,
    REGION,
    ConsumerQueues,
    Deploy,
    FakeLambdaContext,
    Published,
    crm_envelope,
    crm_event,
)

PHONE = "+375291234567"
MASKED_PHONE = "+37529*****67"
# How long after an `unknown` a gateway miss counts as proof (the default the stack deploys).
LOOKUP_SETTLE_SECONDS: int = DEFAULTS["lookup_settle_seconds"]
SMS_FIXTURE = "sms_ready_for_pickup"
# What the tests run with: small numbers, so retries and deadlines are quick to reach.
SMS_ENVIRONMENT = {
    "SMS_GATEWAY": "fake",
    "SMS_MAX_ATTEMPTS": "3",
    "SMS_RETRY_BASE_SECONDS": "10",
    "SMS_RETRY_MAX_SECONDS": "600",
    "SMS_LEASE_SECONDS": "120",
    "SMS_RECONCILE_DEADLINE_HOURS": "24",
}
_JOURNAL_ID = re.compile(rf"^{KEY_PREFIX}[0-9a-f]{{64}}$")


def add_by_state_index(dynamodb: Any) -> None:
    """The sparse GSI the stack adds to the journal table: pk `sms_state`, sk `state_since`."""
    dynamodb.update_table(
        TableName=JOURNAL_TABLE,
        AttributeDefinitions=[
            {"AttributeName": "sms_state", "AttributeType": "S"},
            {"AttributeName": "state_since", "AttributeType": "S"},
        ],
        GlobalSecondaryIndexUpdates=[
            {
                "Create": {
                    "IndexName": BY_STATE_INDEX,
                    "KeySchema": [
                        {"AttributeName": "sms_state", "KeyType": "HASH"},
                        {"AttributeName": "state_since", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "KEYS_ONLY"},
                }
            }
        ],
    )


def order_event(
    status: str = "ready_for_pickup",
    previous_status: str | None = "paid",
    *,
    event_id: str | None = None,
    order_id: str | None = None,
    phone: str = PHONE,
    occurred_at: str | None = None,
    transition_id: str | None = None,
) -> dict[str, Any]:
    """A CRM order-status event shaped like the fixture: a fresh event id and a fresh order
    (so unrelated tests' events are unrelated orders) unless given."""
    event = crm_event(SMS_FIXTURE)
    event["event_id"] = event_id or f"evt_{uuid.uuid4().hex}"
    event["order"]["status"] = status
    event["order"]["previous_status"] = previous_status
    event["order"]["id"] = order_id or f"ORD-{uuid.uuid4().hex[:12]}"
    # Now, unless given: the fixture's stamp is months old, past every rule's maximum age.
    event["occurred_at"] = occurred_at or CLOCK.now().isoformat()
    if transition_id:
        event["order"]["transition_id"] = transition_id
    event["customer"]["phone"] = phone
    return event


def recent(minutes: int = 0) -> str:
    """A CRM stamp `minutes` after a whole hour an hour before the test's clock (minutes up to
    60): a history within the SMS age setting's default (2 h), with readable gaps."""
    base = CLOCK.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    return (base + timedelta(minutes=minutes)).isoformat()


def move_of(event: dict[str, Any]) -> Move:
    """The move a CRM event is, as the sms consumer reads it (received now)."""
    parsed = CrmEvent.parse(event)
    return Move(
        order_key=parsed.order_key,
        status=parsed.order.status,
        previous_status=parsed.order.previous_status,
        occurred_at=parsed.occurred_at,
        received_at=datetime.now(UTC),
        transition_ref=parsed.order.transition_id,
    )


def key_of(event: dict[str, Any]) -> str:
    """The notification key of the status entry the event starts: named after its move."""
    move = move_of(event)
    return notification_key(event["type"], move.order_key, move.identity, "sms")


def sns_event(message: dict[str, Any] | str) -> dict[str, Any]:
    """A Lambda SNS event as the delivery-event topic invokes `sms_events` with."""
    topic = f"arn:aws:sns:{REGION}:{ACCOUNT_ID}:sms-delivery-events"
    return {
        "Records": [
            {
                "EventSource": "aws:sns",
                "EventVersion": "1.0",
                "EventSubscriptionArn": f"{topic}:{uuid.uuid4()}",
                "Sns": {
                    "Type": "Notification",
                    "MessageId": str(uuid.uuid4()),
                    "TopicArn": topic,
                    "Subject": None,
                    "Message": message if isinstance(message, str) else json.dumps(message),
                    "Timestamp": "2026-01-15T08:04:10.470Z",
                    "SignatureVersion": "1",
                    "Signature": "EXAMPLE",
                    "SigningCertUrl": "https://sns.eu-central-1.amazonaws.com/SimpleNotificationService-0000.pem",
                    "UnsubscribeUrl": "https://sns.eu-central-1.amazonaws.com/?Action=Unsubscribe",
                    "MessageAttributes": {},
                },
            }
        ]
    }


def delivery_message(key: str, event_type: str = "TEXT_DELIVERED", **changes: Any) -> dict[str, Any]:
    """An End User Messaging SMS event (documented shape) for the notification `key`."""
    message = crm_event("sms_eum_text_delivered")
    message.update({"eventType": event_type, "context": {"notification_key": key}, **changes})
    return message


SCHEDULED_EVENT = {
    "version": "0",
    "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
    "detail-type": "Scheduled Event",
    "source": "aws.events",
    "account": ACCOUNT_ID,
    "time": "2026-01-15T08:05:00Z",
    "region": REGION,
    "resources": [f"arn:aws:events:{REGION}:{ACCOUNT_ID}:rule/sms-reconciler"],
    "detail": {},
}


@dataclass
class SmsHarness:
    """The deployed sms pieces, and what SQS, EventBridge and SNS would do to them."""

    queues: ConsumerQueues
    app: ModuleType
    reconciler: ModuleType
    sms_events: ModuleType
    service: ModuleType
    fake: FakeGateway
    context: FakeLambdaContext
    clock: Clock
    last_event: dict[str, Any] | None = None

    @property
    def worker(self) -> Any:
        return self.app.worker

    def publish(self, event: dict[str, Any]) -> Published:
        """What the webhook publishes for this CRM event, delivered to the sms queue."""
        published = crm_envelope(event)
        self.queues.send(published)
        return published

    def deliver(self) -> dict[str, Any]:
        """One Lambda invocation with what the queue hands out now, acknowledged as the ESM does."""
        event = self.queues.receive_event()
        assert event["Records"], "the queue had nothing to deliver"
        self.last_event = event
        response: dict[str, Any] = self.app.lambda_handler(event, self.context)
        self.queues.acknowledge(event, response)
        return response

    def make_visible(self) -> None:
        """The last delivered messages' visibility timeout runs out (redelivery)."""
        assert self.last_event is not None
        for record in self.last_event["Records"]:
            self.queues.sqs.change_message_visibility(
                QueueUrl=self.queues.queue_url, ReceiptHandle=record["receiptHandle"], VisibilityTimeout=0
            )

    def wait_for_retry(self) -> int:
        """Let the retry delay the worker set pass: the clock moves on, SQS shows the message again."""
        outcome = self.worker.last_outcome
        assert outcome is not None and outcome.status == "retry" and outcome.delay_seconds is not None
        self.clock.advance(outcome.delay_seconds)
        self.make_visible()
        return int(outcome.delay_seconds)

    def reconcile(self) -> dict[str, int]:
        result: dict[str, int] = self.reconciler.lambda_handler(SCHEDULED_EVENT, self.context)
        return result

    def delivery_event(self, *messages: dict[str, Any] | str) -> dict[str, int]:
        counts: dict[str, int] = {}
        for message in messages:
            for name, count in self.sms_events.lambda_handler(sns_event(message), self.context).items():
                counts[name] = counts.get(name, 0) + count
        return counts

    def record(self, event: dict[str, Any]) -> Notification:
        found = self.service.runtime().journal.get(key_of(event))
        assert found is not None, "no journal record for this event"
        return found  # type: ignore[no-any-return]

    def journal_records(self) -> list[dict[str, Any]]:
        items = aws.resource("dynamodb").Table(JOURNAL_TABLE).scan()["Items"]
        return [item for item in items if _JOURNAL_ID.match(item["id"])]

    def forget_idempotency(self) -> int:
        """Drop Powertools' idempotency records, as their in-progress expiry or their TTL would.

        What is left to stop a duplicate is the SMS journal alone.
        """
        table = aws.resource("dynamodb").Table(JOURNAL_TABLE)
        dropped = 0
        for item in table.scan()["Items"]:
            if not _JOURNAL_ID.match(item["id"]):
                table.delete_item(Key={"id": item["id"]})
                dropped += 1
        return dropped


def set_sms_environment(monkeypatch: pytest.MonkeyPatch, **overrides: str) -> None:
    for name, value in {**SMS_ENVIRONMENT, **overrides}.items():
        monkeypatch.setenv(name, value)
    for name in ("SMS_RULES_JSON", "SMS_FAKE_SCRIPT", "SMS_ORIGINATION_IDENTITY", "SMS_CONFIGURATION_SET"):
        if name not in overrides:
            monkeypatch.delenv(name, raising=False)


@pytest.fixture
def sms_reset(aws_env: None) -> Iterator[None]:
    """No runtime, fake gateway or clock offset leaks between tests, and the SMS clock moves only
    when a test advances it: a test at a rule's boundary (a second before a horizon) must not
    cross it because a loaded machine took that second between two calls."""
    service = importlib.import_module("pipeline.sms.service")
    service.reset_runtime()
    gateways.reset_fake_gateway()
    CLOCK.reset()
    CLOCK.stop(datetime.now(UTC))
    yield
    service.reset_runtime()
    gateways.reset_fake_gateway()
    CLOCK.reset()


@pytest.fixture
def sms(
    moto_aws: None,
    deploy: Deploy,
    import_app: Callable[[str], ModuleType],
    lambda_context: FakeLambdaContext,
    monkeypatch: pytest.MonkeyPatch,
    sms_reset: None,
) -> SmsHarness:
    add_by_state_index(aws.client("dynamodb"))
    app = import_app("sms")
    queues = deploy(app.worker, "sms")
    set_sms_environment(monkeypatch)  # after the registry's environment: the fake gateway
    return SmsHarness(
        queues=queues,
        app=app,
        reconciler=import_app("reconciler"),
        sms_events=import_app("sms_events"),
        service=importlib.import_module("pipeline.sms.service"),
        fake=gateways.fake_gateway(),
        context=lambda_context,
        clock=CLOCK,
    )
