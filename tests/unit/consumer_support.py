"""Helpers for the consumer worker tests: moto tables and queues, real-shaped SQS events.

A consumer is "deployed" the way the CDK stack does it: its queue with a redrive policy to its
DLQ, its environment variables, its worker bound to them. Messages are sent to the moto queue
and received back, so receipt handles, receive counts and visibility changes are SQS's own;
`ConsumerQueues.acknowledge` then deletes what the Lambda event source mapping would delete.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cache
from pathlib import Path
from typing import Any, Protocol

import pytest
from aiogram.dispatcher.middlewares.user_context import UserContextMiddleware
from aiogram.types import Update

from infra.tables import TTL_ATTRIBUTE
from pipeline import aws
from pipeline.envelope import Envelope, crm_event_id, fifo_keys, utc_now
from pipeline.pacing import SEND_RATE_ENV
from pipeline.publication import publication
from pipeline.registry import Consumer, secret_env_var, table_env_var
from pipeline.retention import CONSUMER_QUEUE_RETENTION, DLQ_RETENTION, IDEMPOTENCY_TTL_SECONDS
from pipeline.telegram import TelegramUpdate
from pipeline.worker import ConsumerWorker

REGION = "eu-central-1"
ACCOUNT_ID = "123456789012"
BOT_ID = "default"
JOURNAL_TABLE = "journal"
CONVERSATIONS_TABLE = "conversations"
BOT_STATE_TABLE = "bot_state"
TABLE_NAMES = {"journal": JOURNAL_TABLE, "conversations": CONVERSATIONS_TABLE, "bot_state": BOT_STATE_TABLE}
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
# An ordered consumer's queues, as `local.resources.FIFO_QUEUE_ATTRIBUTES` creates them (not
# imported: a scaffolded consumer's test runs in a copy of the project without `local/`).
FIFO_QUEUE_ATTRIBUTES = {
    "FifoQueue": "true",
    "ContentBasedDeduplication": "false",
    "DeduplicationScope": "messageGroup",
    "FifoThroughputLimit": "perMessageGroupId",
}
TELEGRAM_FIXTURE_NAMES = sorted(path.stem for path in (FIXTURES / "telegram").glob("*.json"))


@cache
def _validated_update(name: str) -> str:
    text = (FIXTURES / "telegram" / f"{name}.json").read_text()
    Update.model_validate(json.loads(text))  # real-shaped: valid for aiogram's Bot API model
    return text


def telegram_update(name: str) -> dict[str, Any]:
    """A fresh copy of a Telegram fixture, checked against aiogram's `Update`."""
    update: dict[str, Any] = json.loads(_validated_update(name))
    return update


def crm_event(name: str = "order_status_changed") -> dict[str, Any]:
    event: dict[str, Any] = json.loads((FIXTURES / "crm" / f"{name}.json").read_text())
    return event


@dataclass(frozen=True)
class Published:
    """An envelope and the SNS message attributes the webhook publishes it with."""

    envelope: Envelope
    attributes: dict[str, str]

    @property
    def body(self) -> str:
        return self.envelope.to_json()


def telegram_envelope(update: dict[str, Any]) -> Published:
    """What the webhook publishes for this update (same id, type and routing attributes)."""
    parsed = TelegramUpdate.parse(update)
    envelope, attributes = publication(parsed, update, bot_id=BOT_ID, correlation_id=str(uuid.uuid4()))
    return Published(envelope, {name: value for name, value in attributes.items() if value})


def crm_envelope(event: dict[str, Any]) -> Published:
    envelope = Envelope(
        event_id=crm_event_id(event["event_id"]),
        source="crm",
        type=event["type"],
        correlation_id=str(uuid.uuid4()),
        received_at=utc_now(),
        payload=event,
    )
    return Published(envelope, {"source": "crm", "type": event["type"], "status": event["order"]["status"]})


def bitrix24_envelope(deal_id: int, event: str = "ONCRMDEALUPDATE", ts: float | None = None) -> Published:
    """What the webhook publishes for a Bitrix24 deal event (`webhook.ingest.ingest_bitrix24`:
    the outgoing webhook's fields, without the `auth` block's tokens)."""
    envelope = Envelope(
        event_id=f"bitrix24:local.bitrix24.test:deal:{deal_id}:{uuid.uuid4().hex}",
        source="bitrix24",
        type=event,
        correlation_id=str(uuid.uuid4()),
        received_at=utc_now(),
        payload={
            "event": event,
            "event_handler_id": "13",
            "data": {"FIELDS": {"ID": str(deal_id)}},
            "ts": str(int(ts if ts is not None else time.time())),
            "auth": {"domain": "local.bitrix24.test", "member_id": "0" * 32},
        },
    )
    return Published(envelope, {"source": "bitrix24", "type": event})


def amocrm_envelope(lead_id: int, status_id: int, old_status_id: int, pipeline_id: int) -> Published:
    """What the webhook publishes for one lead of an amoCRM status webhook (`ingest_amocrm`)."""
    envelope = Envelope(
        event_id=f"amocrm:29085955:lead:{lead_id}:{uuid.uuid4().hex}",
        source="amocrm",
        type="lead.status_changed",
        correlation_id=str(uuid.uuid4()),
        received_at=utc_now(),
        payload={
            "account": {"id": 29085955, "subdomain": "localshop"},
            "lead": {
                "id": lead_id,
                "status_id": status_id,
                "pipeline_id": pipeline_id,
                "old_status_id": old_status_id,
                "old_pipeline_id": pipeline_id,
            },
        },
    )
    return Published(envelope, {"source": "amocrm", "type": "lead.status_changed"})


@dataclass
class FakeLambdaContext:
    """The `context` Lambda hands a function (what Powertools reads of it)."""

    function_name: str = "consumer"
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 256
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_stream_name: str = "2026/01/15/[$LATEST]0123456789abcdef"

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:{REGION}:{ACCOUNT_ID}:function:{self.function_name}"

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return 29_000


def lambda_sqs_record(message: dict[str, Any], queue_arn: str) -> dict[str, Any]:
    """An SQS message as the Lambda event source mapping hands it over (camelCase keys)."""
    attributes = message.get("Attributes", {})
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": {
            name: attributes[name]
            for name in (
                "ApproximateReceiveCount",
                "SentTimestamp",
                "SenderId",
                "ApproximateFirstReceiveTimestamp",
                # FIFO queues: Lambda passes these too (Powertools' FIFO processor reads the group).
                "MessageGroupId",
                "MessageDeduplicationId",
                "SequenceNumber",
            )
            if name in attributes
        },
        "messageAttributes": {
            name: {
                "stringValue": value["StringValue"],
                "stringListValues": [],
                "binaryListValues": [],
                "dataType": value["DataType"],
            }
            for name, value in message.get("MessageAttributes", {}).items()
        },
        "md5OfBody": message["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": REGION,
    }


def lambda_handler_of(worker: ConsumerWorker) -> Callable[[dict[str, Any], Any], dict[str, Any]]:
    """The handler a consumer's `app.py` builds around its worker (logging context, metric flush)."""
    handler: Callable[[dict[str, Any], Any], dict[str, Any]] = worker.logger.inject_lambda_context(
        worker.metrics.log_metrics(worker.handle)
    )
    return handler


def failed_ids(response: dict[str, Any]) -> list[str]:
    return [item["itemIdentifier"] for item in response["batchItemFailures"]]


@dataclass
class ConsumerQueues:
    """One consumer's queue and DLQ, with what the event source mapping and an operator do."""

    consumer: Consumer
    queue_url: str
    queue_arn: str
    dlq_url: str

    @property
    def sqs(self) -> Any:
        return aws.client("sqs")

    def environment(self) -> dict[str, str]:
        """The worker's environment variables, per the briefing's contract."""
        env = {
            "CONSUMER_NAME": self.consumer.name,
            "QUEUE_URL": self.queue_url,
            "DLQ_URL": self.dlq_url,
            "JOURNAL_TABLE": JOURNAL_TABLE,
            "IDEMPOTENCY_TTL_SECONDS": str(IDEMPOTENCY_TTL_SECONDS),
            **{table_env_var(table): TABLE_NAMES[table] for table in self.consumer.tables},
            **{secret_env_var(secret): f"{secret}-secret" for secret in self.consumer.secrets},
            **self.consumer.environment,
        }
        # Unpaced: the pacing would make these tests wait real seconds between messages to a chat;
        # tests/unit/local/test_telegram_pacing.py proves it, on a virtual clock.
        env.pop(SEND_RATE_ENV, None)
        return env

    @property
    def fifo(self) -> bool:
        return self.queue_url.endswith(".fifo")

    def send(
        self,
        published: Published | str,
        attributes: dict[str, str] | None = None,
        group_id: str | None = None,
    ) -> str:
        """Send an envelope (or a raw body) as SNS raw delivery would; returns the message id. On a
        FIFO queue in the envelope's group (`pipeline.envelope.fifo_keys`, as SNS passes it on)
        unless `group_id` says otherwise."""
        body = published if isinstance(published, str) else published.body
        attrs = attributes if attributes is not None or isinstance(published, str) else published.attributes
        fifo: dict[str, str] = {}
        if self.fifo:
            keys = fifo_keys(published.envelope) if isinstance(published, Published) else None
            fifo = {
                "MessageGroupId": group_id or (keys.group_id if keys else "test-group"),
                "MessageDeduplicationId": keys.deduplication_id if keys else uuid.uuid4().hex,
            }
        response = self.sqs.send_message(
            QueueUrl=self.queue_url,
            MessageBody=body,
            MessageAttributes={n: {"DataType": "String", "StringValue": v} for n, v in (attrs or {}).items()},
            **fifo,
        )
        message_id: str = response["MessageId"]
        return message_id

    def receive(self, max_messages: int = 10, visibility_timeout: int | None = None) -> list[dict[str, Any]]:
        extra = {} if visibility_timeout is None else {"VisibilityTimeout": visibility_timeout}
        response = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=max_messages,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
            **extra,
        )
        messages: list[dict[str, Any]] = response.get("Messages", [])
        return messages

    def receive_event(self, max_messages: int = 10, visibility_timeout: int | None = None) -> dict[str, Any]:
        """A Lambda SQS event of what the queue delivers now (possibly no records)."""
        messages = self.receive(max_messages, visibility_timeout)
        return {"Records": [lambda_sqs_record(message, self.queue_arn) for message in messages]}

    def acknowledge(self, event: dict[str, Any], response: dict[str, Any]) -> None:
        """Delete the records not reported in batchItemFailures, as the event source mapping does."""
        failed = set(failed_ids(response))
        for record in event["Records"]:
            if record["messageId"] not in failed:
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=record["receiptHandle"])

    def dead_letters(self) -> list[dict[str, Any]]:
        """Every message in the DLQ, with attributes as plain strings (left in the DLQ, visible)."""
        found: list[dict[str, Any]] = []
        while batch := self.sqs.receive_message(
            QueueUrl=self.dlq_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], VisibilityTimeout=60
        ).get("Messages", []):
            found.extend(batch)
        for message in found:
            self.sqs.change_message_visibility(
                QueueUrl=self.dlq_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
            )
        return [
            {
                "body": m["Body"],
                "receipt_handle": m["ReceiptHandle"],
                "attributes": {n: a["StringValue"] for n, a in m.get("MessageAttributes", {}).items()},
            }
            for m in found
        ]

    def redrive(self) -> int:
        """Move every DLQ message back to the queue, as an operator's DLQ redrive does."""
        letters = self.dead_letters()
        for letter in letters:
            original = {n: v for n, v in letter["attributes"].items() if not n.startswith("dead_letter_")}
            self.send(letter["body"], original)
            self.sqs.delete_message(QueueUrl=self.dlq_url, ReceiptHandle=letter["receipt_handle"])
        return len(letters)

    def approximate_counts(self) -> tuple[int, int]:
        """(visible, in flight) messages of the queue."""
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]), int(
            attributes["ApproximateNumberOfMessagesNotVisible"]
        )


def create_tables() -> None:
    """The journal (Powertools idempotency's default schema), the conversations and bot_state tables."""
    dynamodb = aws.client("dynamodb")
    dynamodb.create_table(
        TableName=JOURNAL_TABLE,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    dynamodb.update_time_to_live(
        TableName=JOURNAL_TABLE, TimeToLiveSpecification={"Enabled": True, "AttributeName": "expiration"}
    )
    dynamodb.create_table(
        TableName=CONVERSATIONS_TABLE,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    dynamodb.create_table(
        TableName=BOT_STATE_TABLE,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "chat", "AttributeType": "S"},
        ],
        GlobalSecondaryIndexes=[  # infra.tables: conversation items by their chat
            {
                "IndexName": "by_chat",
                "KeySchema": [
                    {"AttributeName": "chat", "KeyType": "HASH"},
                    {"AttributeName": "pk", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )


def _seconds(period: timedelta) -> str:
    return str(int(period.total_seconds()))


def create_queues(consumer: Consumer, suffix: str = "") -> ConsumerQueues:
    """Queue + DLQ as the stack makes them: their retention periods, redrive after the consumer's
    redrive_max_receive_count; FIFO (high throughput) for an ordered consumer."""
    sqs = aws.client("sqs")
    name = f"{consumer.name}{suffix}"
    fifo = FIFO_QUEUE_ATTRIBUTES if consumer.ordered else {}
    ending = ".fifo" if consumer.ordered else ""
    dlq_url = sqs.create_queue(
        QueueName=f"{name}-dlq{ending}",
        Attributes={**fifo, "MessageRetentionPeriod": _seconds(DLQ_RETENTION)},
    )["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    redrive = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": consumer.redrive_max_receive_count}
    queue_url = sqs.create_queue(
        QueueName=f"{name}{ending}",
        Attributes={
            **fifo,
            "MessageRetentionPeriod": _seconds(CONSUMER_QUEUE_RETENTION),
            "VisibilityTimeout": str(consumer.visibility_timeout_seconds),
            "RedrivePolicy": json.dumps(redrive),
        },
    )["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    return ConsumerQueues(consumer, queue_url, queue_arn, dlq_url)


def journal_items() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = aws.client("dynamodb").scan(TableName=JOURNAL_TABLE)["Items"]
    return items


def age_idempotency_records(consumer: str, elapsed: timedelta) -> int:
    """Make the consumer's Powertools idempotency records look `elapsed` older, as time passing
    would: their `expiration` (the only time Powertools keeps, and compares with its clock when
    it reads a record) moves back by `elapsed`. Returns how many records were aged."""
    table = aws.resource("dynamodb").Table(JOURNAL_TABLE)
    items = [item for item in table.scan()["Items"] if str(item["id"]).startswith(f"{consumer}#")]
    for item in items:
        table.update_item(
            Key={"id": item["id"]},
            UpdateExpression="SET #expiry = #expiry - :elapsed",
            ExpressionAttributeNames={"#expiry": TTL_ATTRIBUTE},
            ExpressionAttributeValues={":elapsed": int(elapsed.total_seconds())},
        )
    return len(items)


class Deploy(Protocol):
    def __call__(
        self, worker: ConsumerWorker, consumer: str | Consumer, share: ConsumerQueues | None = None
    ) -> ConsumerQueues: ...


def conversation_items() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = aws.resource("dynamodb").Table(CONVERSATIONS_TABLE).scan()["Items"]
    return items


class CurrentStdout:
    """Writes to whatever `sys.stdout` is now (capsys swaps it; Powertools binds it at import)."""

    def write(self, text: str) -> int:
        return sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()


@dataclass
class Output:
    """JSON lines the functions print: Powertools logs and EMF metric lines."""

    capsys: pytest.CaptureFixture[str]
    lines: list[dict[str, Any]] = field(default_factory=list)

    def read(self) -> list[dict[str, Any]]:
        for line in self.capsys.readouterr().out.splitlines():
            if line.startswith("{"):
                self.lines.append(json.loads(line))
        return self.lines

    def emf(self, metric_name: str) -> list[dict[str, Any]]:
        """EMF lines that carry `metric_name`."""
        return [
            line
            for line in self.read()
            if any(
                metric["Name"] == metric_name
                for directive in line.get("_aws", {}).get("CloudWatchMetrics", [])
                for metric in directive["Metrics"]
            )
        ]

    def logs(self, message: str) -> list[dict[str, Any]]:
        return [line for line in self.read() if "_aws" not in line and line.get("message") == message]


def aiogram_context(update: dict[str, Any]) -> Any:
    """aiogram's own reading of an update's chat and user (its `EventContext`): the test oracle."""
    return UserContextMiddleware.resolve_event_context(Update.model_validate(update))


def control(url: str, path: str, document: dict[str, Any] | None = None) -> Any:
    """POST to a stand-in's control route, as a test or the chaos campaign does over HTTP."""
    request = urllib.request.Request(  # noqa: S310 - loopback
        f"{url}{path}",
        data=json.dumps(document or {}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - loopback
        return json.loads(response.read())
