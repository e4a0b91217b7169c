"""`ConsumerWorker` throughput in this process, under moto: the cost of the shared worker runtime.

The consumer's `process` does nothing, so what is measured is what every consumer pays per
record: parsing the SQS record and the envelope, Powertools batch processing, idempotency on the
journal table (moto DynamoDB), logging and metrics. The handler is wrapped as every consumer's
`app.py` wraps it. Phases:

- new events, batches of 10 (each record runs `process` once);
- the same records again (each one a duplicate: the journal says COMPLETED);
- new events, batches of 1 (the shape of low traffic: Lambda invokes with whatever is there).

Per phase: records/s, time per record and per invocation, DynamoDB calls per record by operation
(counted by botocore hooks; SQS calls must be 0: nothing fails), the time outside them, log bytes.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from bench.common import (
    REGION,
    AwsCallMeter,
    ByteCountingSink,
    Stats,
    captured_output,
    cold_import_ms,
    create_stack,
    environment,
    frozen_heap,
    in_process_aws,
    require,
    telegram_start,
)
from local.lambda_host import LocalLambdaContext
from local.sqs_poller import sqs_record
from pipeline import aws
from pipeline.envelope import Envelope, sns_attributes
from pipeline.publication import publication
from pipeline.registry import Consumer
from pipeline.telegram import TelegramUpdate
from pipeline.worker import ConsumerWorker

BENCH_CONSUMER = Consumer(
    name="bench",
    description="The benchmark's consumer: a process that does nothing.",
    filter_policy={"source": ["telegram"]},
)
FIRST_UPDATE_ID = 600_000_000
FIRST_USER_ID = 8_000_000


@dataclass(frozen=True)
class Sizes:
    records: int = 2000
    single_records: int = 300
    warmup: int = 50


QUICK = Sizes(records=200, single_records=50, warmup=20)


@dataclass(frozen=True)
class Phase:
    records: int
    batch_size: int
    records_per_second: float
    ms_per_record: float
    invocation: Stats
    invocation_outside_aws: Stats
    dynamodb_calls_per_record: dict[str, float]
    ms_in_dynamodb_per_record: float
    ms_outside_aws_per_record: float
    log_bytes_per_record: float
    outcomes: dict[str, int]


def noop(envelope: Envelope) -> dict[str, Any]:
    """Returns a small result, as real consumers do: it is saved in the journal record."""
    return {"event_id": envelope.event_id}


def published(update_id: int, user_id: int) -> tuple[str, dict[str, Any]]:
    """The SQS body and message attributes the webhook's publish puts in a consumer's queue."""
    payload = telegram_start(update_id, user_id)
    envelope, attributes = publication(
        TelegramUpdate.parse(payload), payload, bot_id="default", correlation_id=str(uuid.uuid4())
    )
    return envelope.to_json(), sns_attributes(attributes)


def sqs_events(first: int, count: int, batch_size: int, queue_arn: str) -> list[dict[str, Any]]:
    """Lambda SQS events of `count` new Telegram updates, first delivery each."""
    now_ms = str(int(time.time() * 1000))
    records = []
    for n in range(first, first + count):
        body, attributes = published(FIRST_UPDATE_ID + n, FIRST_USER_ID + n)
        received = {
            "MessageId": str(uuid.uuid4()),
            "ReceiptHandle": uuid.uuid4().hex,
            "Body": body,
            "MD5OfBody": hashlib.md5(body.encode(), usedforsecurity=False).hexdigest(),
            "Attributes": {
                "ApproximateReceiveCount": "1",
                "SentTimestamp": now_ms,
                "ApproximateFirstReceiveTimestamp": now_ms,
                "SenderId": "AIDAIENQZJOLO23YVJ4VO",
            },
            "MessageAttributes": attributes,
        }
        records.append(sqs_record(received, queue_arn, REGION))
    return [{"Records": records[i : i + batch_size]} for i in range(0, len(records), batch_size)]


class Bench:
    """One worker execution environment with its handler, meters and log sink."""

    def __init__(self, worker: ConsumerWorker, meter: AwsCallMeter, sink: ByteCountingSink) -> None:
        self.worker = worker
        self.meter = meter
        self.sink = sink
        # As every consumer's app.py: `@logger.inject_lambda_context` over `@metrics.log_metrics`.
        self.handler = worker.logger.inject_lambda_context(worker.metrics.log_metrics(worker.handle))

    def phase(self, events: list[dict[str, Any]]) -> Phase:
        self.meter.reset()
        self.sink.reset()
        before = Counter(self.worker.counts)
        durations: list[float] = []
        outside: list[float] = []
        with frozen_heap():
            for event in events:
                context = LocalLambdaContext(
                    "bench", BENCH_CONSUMER.memory_mb, BENCH_CONSUMER.timeout_seconds, REGION
                )
                in_aws_before = self.meter.seconds
                started = time.perf_counter()
                response = self.handler(event, context)
                durations.append(time.perf_counter() - started)
                outside.append(durations[-1] - (self.meter.seconds - in_aws_before))
                require(not response["batchItemFailures"], f"records failed: {response['batchItemFailures']}")
        records = sum(len(event["Records"]) for event in events)
        total = sum(durations)
        dynamodb = {
            name: n / records for name, n in sorted(self.meter.calls.items()) if name.startswith("dynamodb:")
        }
        require(self.meter.count("sqs") == 0, f"unexpected SQS calls: {dict(self.meter.calls)}")
        return Phase(
            records=records,
            batch_size=len(events[0]["Records"]),
            records_per_second=round(records / total, 1),
            ms_per_record=round(total * 1000 / records, 3),
            invocation=Stats.of_seconds(durations),
            invocation_outside_aws=Stats.of_seconds(outside),
            dynamodb_calls_per_record=dynamodb,
            ms_in_dynamodb_per_record=round(self.meter.seconds * 1000 / records, 3),
            ms_outside_aws_per_record=round((total - self.meter.seconds) * 1000 / records, 3),
            log_bytes_per_record=round(self.sink.bytes / records, 1),
            outcomes=dict(Counter(self.worker.counts) - before),
        )


def run(quick: bool = False) -> dict[str, Any]:
    sizes = QUICK if quick else Sizes()
    with in_process_aws(BENCH_CONSUMER.name):
        stack = create_stack((BENCH_CONSUMER,))
        queue_arn = stack.queues[BENCH_CONSUMER.name].arn
        with environment(stack.consumer_environment(BENCH_CONSUMER)):
            worker = ConsumerWorker(noop, consumer=BENCH_CONSUMER)
            meter = AwsCallMeter().attach(aws.client("dynamodb"), aws.client("sqs"))
            try:
                with captured_output(worker.logger) as sink:
                    bench = Bench(worker, meter, sink)
                    bench.phase(sqs_events(0, sizes.warmup, 10, queue_arn))
                    events = sqs_events(sizes.warmup, sizes.records, 10, queue_arn)
                    new = bench.phase(events)
                    duplicates = bench.phase(events)
                    first_single = sizes.warmup + sizes.records
                    single = bench.phase(sqs_events(first_single, sizes.single_records, 1, queue_arn))
            finally:
                meter.detach()
    require(new.outcomes == {"processed": sizes.records}, f"new events: {new.outcomes}")
    require(duplicates.outcomes == {"duplicate": sizes.records}, f"duplicates: {duplicates.outcomes}")
    require(single.outcomes == {"processed": sizes.single_records}, f"batches of 1: {single.outcomes}")
    return {
        "sizes": asdict(sizes),
        "new_batch_10": asdict(new),
        "duplicate_batch_10": asdict(duplicates),
        "new_batch_1": asdict(single),
        "cold_import_ms": cold_import_ms("store.app"),
    }


def report(results: dict[str, Any]) -> list[str]:
    lines = ["ConsumerWorker, no-op process, in-process, moto DynamoDB journal"]
    for key, label in (
        ("new_batch_10", "new events, batch 10"),
        ("duplicate_batch_10", "duplicates, batch 10"),
        ("new_batch_1", "new events, batch 1"),
    ):
        phase = results[key]
        calls = ", ".join(
            f"{name.split(':')[1]} {n:g}" for name, n in phase["dynamodb_calls_per_record"].items()
        )
        lines.append(
            f"  {label:<21} {phase['records_per_second']:7.0f} records/s"
            f"  {phase['ms_per_record']:.2f} ms/record (in DynamoDB {phase['ms_in_dynamodb_per_record']:.2f},"
            f" outside {phase['ms_outside_aws_per_record']:.2f})"
        )
        lines.append(
            f"  {'':<21} DynamoDB calls/record: {calls} | invocation p50 {phase['invocation']['p50']:.2f} ms"
            f" p95 {phase['invocation']['p95']:.2f} ms | log {phase['log_bytes_per_record']:.0f} B/record"
        )
    lines.append(f"  import store.app (cold) {results['cold_import_ms']:.0f} ms")
    return lines
