"""The webhook handler in this process, under moto: latency per request and the AWS calls it makes.

The stack's topic (with every consumer's filtered queue subscribed) and the two webhook secrets
are created in moto as `make local` creates them; the handler is `webhook.app.lambda_handler`,
invoked with API Gateway payload-2.0 events. Phases, each warm (after the cold first request
and a warm-up):

- Telegram updates accepted (200), through moto;
- the same with SNS `Publish` answered inside botocore (after serialisation, before any HTTP):
  the handler's own cost without moto's;
- requests with a wrong secret token (401);
- signed CRM order-status events accepted (200).

Per phase: latency p50/p95/p99, the time outside boto3 calls, AWS calls per request (Secrets
Manager must be 0 on the warm path, SNS Publish 1 per accepted request) and log bytes per request.
"""

from __future__ import annotations

import contextlib
import importlib
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from botocore.awsrequest import AWSResponse
from botocore.compat import HTTPHeaders

from bench.common import (
    REGION,
    AwsCallMeter,
    ByteCountingSink,
    Stats,
    captured_output,
    cold_import_ms,
    compact,
    create_stack,
    crm_status_change,
    environment,
    frozen_heap,
    in_process_aws,
    require,
    telegram_start,
)
from local.apigw import http_api_event
from local.demo import TELEGRAM_TOKEN_HEADER
from local.lambda_host import LocalLambdaContext
from local.resources import QueuePair
from local.runtime import WEBHOOK_MEMORY_MB, WEBHOOK_TIMEOUT_SECONDS
from pipeline import aws
from pipeline.crm.contract import SIGNATURE_HEADER, sign

TELEGRAM_PATH = "/telegram/webhook"
CRM_PATH = "/crm/events"
FIRST_UPDATE_ID = 500_000_000
FIRST_USER_ID = 7_000_000

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


@dataclass(frozen=True)
class Sizes:
    telegram: int = 2000
    rejected: int = 500
    crm: int = 1000
    warmup: int = 100


QUICK = Sizes(telegram=200, rejected=50, crm=100, warmup=20)


@dataclass(frozen=True)
class Phase:
    """What one kind of request cost, warm."""

    latency: Stats
    outside_boto3: Stats
    statuses: dict[str, int]
    aws_calls_per_request: dict[str, float]
    log_bytes_per_request: float

    def calls(self, service: str) -> float:
        return sum(n for name, n in self.aws_calls_per_request.items() if name.startswith(f"{service}:"))


def _event(path: str, body: bytes, headers: dict[str, str]) -> dict[str, Any]:
    return http_api_event(
        method="POST",
        raw_path=path,
        raw_query="",
        headers=[("Content-Type", "application/json"), *headers.items()],
        body=body,
        route_key=f"POST {path}",
        source_ip="149.154.167.220",
    )


def telegram_events(first: int, count: int, token: str) -> list[dict[str, Any]]:
    return [
        _event(
            TELEGRAM_PATH,
            compact(telegram_start(FIRST_UPDATE_ID + n, FIRST_USER_ID + n)),
            {TELEGRAM_TOKEN_HEADER: token},
        )
        for n in range(first, first + count)
    ]


def crm_events(first: int, count: int, key: str) -> list[dict[str, Any]]:
    """Signed now: the signature's timestamp must be recent when the webhook checks it."""
    events = []
    for n in range(first, first + count):
        body = compact(crm_status_change(n))
        events.append(_event(CRM_PATH, body, {SIGNATURE_HEADER: sign(key, body)}))
    return events


class Deliveries:
    """Empties the consumers' queues between timed requests, counting what SNS delivered to each.

    moto reads every message of a queue on each send to it (to compute the queue's attributes),
    so publishing gets slower as the queues fill. Kept near empty, as a consumed queue is.
    """

    EVERY = 50  # requests

    def __init__(self, queues: Mapping[str, QueuePair]) -> None:
        self.urls = {name: queue.url for name, queue in queues.items()}
        self.counts: Counter[str] = Counter()

    def drain(self) -> None:
        sqs = aws.client("sqs")
        for name, url in self.urls.items():
            while batch := sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=600
            ).get("Messages", []):
                self.counts[name] += len(batch)
                entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)]
                sqs.delete_message_batch(QueueUrl=url, Entries=entries)


@dataclass
class Bench:
    """The webhook's execution environment: its handler, the meter on its clients, its log sink."""

    handler: Handler
    meter: AwsCallMeter
    sink: ByteCountingSink
    deliveries: Deliveries

    def phase(self, events: list[dict[str, Any]]) -> Phase:
        self.meter.reset()
        self.sink.reset()
        latencies, outside = [], []
        statuses: Counter[str] = Counter()
        with frozen_heap():
            for n, event in enumerate(events, start=1):
                context = LocalLambdaContext("webhook", WEBHOOK_MEMORY_MB, WEBHOOK_TIMEOUT_SECONDS, REGION)
                in_boto3_before = self.meter.seconds
                started = time.perf_counter()
                response = self.handler(event, context)
                elapsed = time.perf_counter() - started
                latencies.append(elapsed)
                outside.append(elapsed - (self.meter.seconds - in_boto3_before))
                statuses[str(response["statusCode"])] += 1
                if n % Deliveries.EVERY == 0 or n == len(events):
                    self.deliveries.drain()
        return Phase(
            latency=Stats.of_seconds(latencies),
            outside_boto3=Stats.of_seconds(outside),
            statuses=dict(statuses),
            aws_calls_per_request={name: n / len(events) for name, n in sorted(self.meter.calls.items())},
            log_bytes_per_request=round(self.sink.bytes / len(events), 1),
        )


@contextlib.contextmanager
def sns_short_circuited(sns: Any) -> Iterator[None]:
    """SNS `Publish` answered by a `before-call` hook: botocore validates and serialises, then no HTTP."""

    def answer(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        response = AWSResponse(url="", status_code=200, headers=HTTPHeaders(), raw=None)
        return response, {"MessageId": str(uuid.uuid4())}

    sns.meta.events.register("before-call.sns.Publish", answer)
    try:
        yield
    finally:
        sns.meta.events.unregister("before-call.sns.Publish", answer)


def _expect(phase: Phase, name: str, status: str, publishes: float) -> None:
    require(
        phase.statuses == {status: phase.latency.count},
        f"{name}: expected only {status}, got {phase.statuses}",
    )
    require(phase.calls("sns") == publishes, f"{name}: {phase.calls('sns')} SNS calls per request")
    # The secrets are cached for 5 minutes, far longer than this benchmark runs.
    require(phase.calls("secretsmanager") == 0, f"{name}: Secrets Manager called on the warm path")


def run(quick: bool = False) -> dict[str, Any]:
    sizes = QUICK if quick else Sizes()
    with in_process_aws("webhook"):
        stack = create_stack()
        token, key = stack.settings.telegram_secret, stack.settings.crm_signing_key
        with environment(stack.webhook_environment()):
            app = importlib.import_module("webhook.app")
            meter = AwsCallMeter().attach(aws.client("sns"), aws.client("secretsmanager"))
            deliveries = Deliveries(stack.queues)
            try:
                with captured_output(app.logger) as sink:
                    bench = Bench(app.lambda_handler, meter, sink, deliveries)
                    cold = bench.phase(telegram_events(0, 1, token))
                    bench.phase(telegram_events(1, sizes.warmup, token) + crm_events(0, sizes.warmup, key))
                    # Right after the warm-up: a wrong token makes the webhook re-read the secret
                    # (a rotation may have happened) only if its copy is over a minute old.
                    rejected = bench.phase(telegram_events(0, sizes.rejected, "x" * len(token)))
                    first = 1 + sizes.warmup
                    accepted = bench.phase(telegram_events(first, sizes.telegram, token))
                    crm = bench.phase(crm_events(sizes.warmup, sizes.crm, key))
                    with sns_short_circuited(aws.client("sns")):
                        stubbed = bench.phase(telegram_events(first + sizes.telegram, sizes.telegram, token))
            finally:
                meter.detach()
    # What went through moto reached the subscribed queues: the store queue takes every Telegram
    # update, the sms queue every "shipped" order event.
    expected = {"store": 1 + sizes.warmup + sizes.telegram, "sms": sizes.warmup + sizes.crm}
    delivered = {name: deliveries.counts[name] for name in expected}
    require(cold.statuses == {"200": 1}, f"cold request answered {cold.statuses}")
    _expect(rejected, "rejected", "401", 0)
    _expect(accepted, "telegram", "200", 1)
    _expect(crm, "crm", "200", 1)
    _expect(stubbed, "telegram (SNS stubbed)", "200", 1)
    require(delivered == expected, f"delivered to the queues {delivered}, expected {expected}")
    return {
        "sizes": asdict(sizes),
        "cold_request": {
            "ms": cold.latency.max,
            "secretsmanager_calls": cold.calls("secretsmanager"),
            "sns_calls": cold.calls("sns"),
        },
        "cold_import_ms": cold_import_ms("webhook.app"),
        "telegram_accepted": asdict(accepted),
        "telegram_accepted_sns_stubbed": asdict(stubbed),
        "rejected_401": asdict(rejected),
        "crm_accepted": asdict(crm),
        "delivered": dict(deliveries.counts),
    }


def report(results: dict[str, Any]) -> list[str]:
    lines = ["webhook handler, in-process, moto (warm)"]
    phases = (
        ("telegram_accepted", "Telegram 200"),
        ("telegram_accepted_sns_stubbed", "Telegram 200, SNS stubbed"),
        ("rejected_401", "wrong token 401"),
        ("crm_accepted", "CRM event 200"),
    )
    for key, label in phases:
        phase = results[key]
        calls = phase["aws_calls_per_request"]
        lines.append(f"  {label:<27} {Stats.from_dict(phase['latency']).line()}")
        lines.append(
            f"  {'':<27} outside boto3 p50 {phase['outside_boto3']['p50']:.2f} ms"
            f" p95 {phase['outside_boto3']['p95']:.2f} ms | calls/request "
            + (", ".join(f"{name} {n:g}" for name, n in calls.items()) or "none")
            + f" | log {phase['log_bytes_per_request']:.0f} B/request"
        )
    cold = results["cold_request"]
    lines.append(
        f"  cold first request {cold['ms']:.1f} ms ({cold['secretsmanager_calls']:g} Secrets Manager calls);"
        f" import webhook.app {results['cold_import_ms']:.0f} ms"
    )
    return lines
