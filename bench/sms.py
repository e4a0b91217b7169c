"""The `sms` consumer per CRM order event, in this process under moto, with the fake gateway.

What each kind of event costs now that the consumer keeps every order's status history in the
journal (`pipeline.sms.orders`) and names a notification after the move that started its status entry:

- an entry into a status with a rule (one SMS: order state + notification in one transaction,
  the claim, the gateway call, the outcome);
- the same change again under a new CRM event id (a repeat: found, nothing sent);
- an entry into a status without a rule (the history still needs it: the order state only);
- a stale event (older than what was seen: read, nothing written).

Per kind: records/s, ms per record, DynamoDB calls per record by operation (botocore hooks),
and gateway calls per record. Invoked one record per batch, the shape of a shop's traffic.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import (
    REGION,
    AwsCallMeter,
    captured_output,
    create_stack,
    environment,
    in_process_aws,
    require,
)
from local.lambda_host import LocalLambdaContext
from local.sqs_poller import sqs_record
from pipeline import aws
from pipeline.envelope import Envelope, crm_event_id, sns_attributes
from pipeline.registry import by_name
from pipeline.sms import gateways

SMS = by_name("sms")
RECORDS = 200
QUICK_RECORDS = 20
# Recent moves: an order move older than its rule's maximum age ends `expired`, unsent
# (`pipeline.sms.endstates`), so the events are dated from the run, never from a fixed day.
START = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)


@dataclass(frozen=True)
class Kind:
    records: int
    records_per_second: float
    ms_per_record: float
    dynamodb_calls_per_record: dict[str, float]
    gateway_calls_per_record: float
    outcomes: dict[str, int]


def order_event(number: int, status: str, previous: str, minutes: int, event_id: str) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "type": "order.status_changed",
        "occurred_at": (START + timedelta(minutes=minutes)).isoformat(),
        "order": {"id": f"B-{number}", "status": status, "previous_status": previous},
        "customer": {"phone": "+4915123456789", "name": "Bench Customer"},
    }


def sqs_event(event: dict[str, Any], queue_arn: str) -> dict[str, Any]:
    """A Lambda SQS event of one message, as the webhook publishes it and SNS delivers it raw."""
    envelope = Envelope(
        event_id=crm_event_id(event["event_id"]),
        source="crm",
        type=event["type"],
        correlation_id=str(uuid.uuid4()),
        received_at=datetime.now(UTC),
        payload=event,
    )
    body = envelope.to_json()
    now_ms = str(int(time.time() * 1000))
    attributes = {"source": "crm", "type": event["type"], "status": event["order"]["status"]}
    received = {
        "MessageId": str(uuid.uuid4()),
        "ReceiptHandle": uuid.uuid4().hex,
        "Body": body,
        "MD5OfBody": hashlib.md5(body.encode(), usedforsecurity=False).hexdigest(),
        "Attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": now_ms},
        "MessageAttributes": sns_attributes(attributes),
    }
    return {"Records": [sqs_record(received, queue_arn, REGION)]}


def measure(
    handler: Any, worker: Any, meter: AwsCallMeter, events: list[dict[str, Any]], queue_arn: str
) -> Kind:
    fake = gateways.fake_gateway()
    meter.reset()
    before, calls_before = Counter(worker.counts), len(fake.calls)
    started = time.perf_counter()
    for event in events:
        context = LocalLambdaContext("sms", SMS.memory_mb, SMS.timeout_seconds, REGION)
        response = handler(sqs_event(event, queue_arn), context)
        require(not response["batchItemFailures"], f"records failed: {response['batchItemFailures']}")
    total = time.perf_counter() - started
    return Kind(
        records=len(events),
        records_per_second=round(len(events) / total, 1),
        ms_per_record=round(total * 1000 / len(events), 2),
        dynamodb_calls_per_record={
            name.split(":")[1]: round(n / len(events), 2)
            for name, n in sorted(meter.calls.items())
            if name.startswith("dynamodb:")
        },
        gateway_calls_per_record=round((len(fake.calls) - calls_before) / len(events), 2),
        outcomes=dict(Counter(worker.counts) - before),
    )


def run(quick: bool = False) -> dict[str, Any]:
    count = QUICK_RECORDS if quick else RECORDS
    with in_process_aws(SMS.name):
        stack = create_stack((SMS,))
        queue_arn = stack.queues[SMS.name].arn
        with environment({**stack.consumer_environment(SMS), "SMS_GATEWAY": "fake", "SMS_RULES_JSON": ""}):
            gateways.reset_fake_gateway()
            service = importlib.import_module("pipeline.sms.service")
            service.reset_runtime()
            app = importlib.import_module("sms.app")
            worker = app.worker
            worker.reset()
            handler = worker.logger.inject_lambda_context(worker.metrics.log_metrics(worker.handle))
            meter = AwsCallMeter().attach(aws.client("dynamodb"), aws.resource("dynamodb").meta.client)
            try:
                with captured_output(worker.logger):
                    kinds = {
                        "entry_with_sms": [
                            order_event(n, "shipped", "paid", 10, f"e-{n}") for n in range(count)
                        ],
                        "repeat_new_event_id": [
                            order_event(n, "shipped", "paid", 11, f"retry-{n}") for n in range(count)
                        ],
                        "entry_without_rule": [
                            order_event(n, "delivered", "shipped", 20, f"d-{n}") for n in range(count)
                        ],
                        "stale": [
                            order_event(n, "ready_for_pickup", "paid", 5, f"s-{n}") for n in range(count)
                        ],
                    }
                    results = {
                        name: measure(handler, worker, meter, events, queue_arn)
                        for name, events in kinds.items()
                    }
            finally:
                meter.detach()
                service.reset_runtime()
                gateways.reset_fake_gateway()
    require(results["entry_with_sms"].gateway_calls_per_record == 1, "an entry with a rule sends one SMS")
    for name in ("repeat_new_event_id", "entry_without_rule", "stale"):
        require(results[name].gateway_calls_per_record == 0, f"{name} sent an SMS")
    return {"records_per_kind": count, **{name: asdict(kind) for name, kind in results.items()}}


def report(results: dict[str, Any]) -> list[str]:
    each = results["records_per_kind"]
    lines = [f"sms consumer per CRM event, in-process, moto DynamoDB, fake gateway ({each} each)"]
    for name in ("entry_with_sms", "repeat_new_event_id", "entry_without_rule", "stale"):
        kind = results[name]
        calls = ", ".join(f"{op} {n:g}" for op, n in kind["dynamodb_calls_per_record"].items())
        lines.append(
            f"  {name:<20} {kind['records_per_second']:6.0f} records/s"
            f"  {kind['ms_per_record']:6.2f} ms/record"
            f"  gateway {kind['gateway_calls_per_record']:g}/record  DynamoDB/record: {calls}"
        )
    outcomes = {name: results[name]["outcomes"] for name in results if name != "records_per_kind"}
    lines.append(f"  outcomes: {json.dumps(outcomes)}")
    return lines
