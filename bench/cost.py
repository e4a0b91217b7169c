"""A cost model per 1 million Telegram updates on AWS, eu-central-1, on-demand list prices.

Volumes come from the registry (which consumers each kind of update reaches, their memory) and
an assumed mix of update kinds; durations and log volumes from the other benchmarks' figures in
`.local/bench/results.json` where they exist, else from the assumptions below (the report says
which). Free tiers are left out; fixed monthly costs and storage are listed apart, not per update.

How a Lambda duration is estimated: the handler's own time measured here (one full core of this
machine) times the CPU share Lambda gives its memory size (one vCPU at 1769 MB, proportionally
less below: an upper bound, short bursts often run faster), plus the time waiting on AWS APIs and
outside services (assumed latencies). Lambda bills every invocation rounded up to the next ms.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from bench.common import load_results, table
from infra.prices import MONTH_SECONDS, REGION, TRAFFIC, TRAFFIC_PRICES_RECORDED
from local.runtime import WEBHOOK_MEMORY_MB
from pipeline.registry import Consumer, enabled, matches

UPDATES = 1_000_000

# -- prices: infra/prices.py, the repository's one price table ---------------------------------------------
PRICES = TRAFFIC
PRICES_NOTE = (
    f"{REGION} list prices in USD as recorded on {TRAFFIC_PRICES_RECORDED} (infra/prices.py, with each"
    " one's page), free tiers excluded: check them there before relying on these figures"
)


# -- assumptions ------------------------------------------------------------------------------------------
# Share of each kind of update in a bot's traffic: change it to your bot's.
UPDATE_MIX: dict[str, float] = {
    "message": 0.85,
    "callback_query": 0.07,
    "edited_message": 0.04,
    "my_chat_member": 0.02,
    "message_reaction": 0.02,
}
# Records per consumer invocation. Without a batching window Lambda invokes with what is in the
# queue; at 1 M updates a month (0.4 a second) that is almost always one record. With a batching
# window (a consumer's `batching_window_seconds`) it gathers what arrives in the window:
# `records_per_invocation`.
RECORDS_PER_INVOCATION = 1
# Issue 44's lever: each consumer's own `batching_window_seconds` (store and crm 20 s, analytics
# 60 s, none on the reply path) is priced by default; beside it, the bill without any window (a team
# that sets them to 0 in team/consumers.toml).
NO_WINDOWS: dict[str, int] = {}
# Latencies of the calls a function waits on, in ms (in-region AWS APIs; outside services from Frankfurt).
SNS_PUBLISH_MS = 20.0
DYNAMODB_CALL_MS = 5.0
TELEGRAM_CALL_MS = 60.0
CRM_PUSH_MS = 300.0
BEDROCK_CONVERSE_MS = 1500.0
# Lambda gives one full vCPU at 1769 MB, proportionally less below.
FULL_VCPU_MB = 1769
# Share of invocations that start a new execution environment; the init phase is billed.
COLD_START_SHARE = 0.01
# Share of records delivered again (Telegram resends, SQS at-least-once): idempotency skips them.
DUPLICATE_SHARE = 0.01
# API Gateway access log line per request (the stack logs $context fields, no headers or body).
ACCESS_LOG_BYTES = 350
# X-Ray: off by default (the `tracing` setting, default false); the report adds the traced figure
# as a line of its own. Traced, the default sampling rule records the first request each second
# and 5% of the rest, so at 0.4 updates a second nearly every request is traced. An
# SQS-triggered invocation starts its own trace (linked, not continued).
TRACING_DEFAULT = False
XRAY_SAMPLED_SHARE = 1.0
# Bytes SNS bills as payload per publish and per delivery: the envelope, about 560 bytes for a
# text message and 850 for a callback query (tests/fixtures/telegram, measured 2026-12-02).
ENVELOPE_BYTES = 650
# The ordered path priced: the consumer a conversational bot replaces, on a FIFO queue.
ORDERED_SCENARIO = ("autoreply",)
# The goal of issue 12: the model's figure (default configuration) within this factor of the floor.
FLOOR_GOAL_RATIO = 1.3
# Records per SQS ReceiveMessage / DeleteMessageBatch in the floor: the API's maximum.
SQS_MAX_BATCH = 10
# Journal items (idempotency records) stay under 1 KB: one write unit per write (a refused
# conditional write too), one read unit per strongly consistent read.
JOURNAL_WRITE_UNITS = 1.0


@dataclass(frozen=True)
class ConsumerWork:
    """What a consumer does per record beyond the shared worker runtime (assumed averages)."""

    outside_ms: float = 0.0  # waiting on Telegram, the CRM, Bedrock
    table_calls: float = 0.0  # its own DynamoDB calls
    write_units: float = 0.0  # the write units they consume
    note: str = ""


CONSUMER_WORK: dict[str, ConsumerWork] = {
    "store": ConsumerWork(
        table_calls=1.0, write_units=2.0, note="one UpdateItem of a ~1.5 KB conversation item (2 WRU)"
    ),
    "crm": ConsumerWork(
        outside_ms=0.05 * CRM_PUSH_MS,
        table_calls=1.05,
        write_units=1.05,
        note="claims the contact (conditional put: 1 WRU even when refused); 5% are new: lead push + confirm",
    ),
    "autoreply": ConsumerWork(
        outside_ms=0.15 * TELEGRAM_CALL_MS, note="15% get a Bot API call (commands with a reply, buttons)"
    ),
    "analytics": ConsumerWork(note="EMF metrics in its log only"),
    "ai": ConsumerWork(
        outside_ms=0.9 * BEDROCK_CONVERSE_MS,
        table_calls=0.9,
        write_units=1.8,
        note="90% carry text: a Converse call + UpdateItem of the item (2 WRU); Bedrock tokens not included",
    ),
}


# -- inputs: measured where possible ----------------------------------------------------------------------
@dataclass(frozen=True)
class Figure:
    value: float
    source: str


def _lookup(results: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = results
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def _figure(results: Mapping[str, Any], default: float, *paths: tuple[str, ...]) -> Figure:
    for path in paths:
        value = _lookup(results, path)
        if isinstance(value, int | float):
            return Figure(float(value), "measured: " + ".".join(path))
    return Figure(default, "assumed")


@dataclass(frozen=True)
class Inputs:
    webhook_cpu_ms: Figure
    webhook_init_ms: Figure
    webhook_log_bytes: Figure
    worker_cpu_ms: Figure
    worker_init_ms: Figure
    journal_calls_new: dict[str, float]
    journal_calls_duplicate: dict[str, float]
    journal_source: str
    consumer_log_bytes: dict[str, Figure] = field(default_factory=dict)

    @classmethod
    def from_results(cls, results: Mapping[str, Any]) -> Inputs:
        new = _lookup(results, ("worker", "new_batch_1", "dynamodb_calls_per_record"))
        duplicate = _lookup(results, ("worker", "duplicate_batch_10", "dynamodb_calls_per_record"))
        measured = isinstance(new, Mapping) and isinstance(duplicate, Mapping)
        generic_log = ("worker", "new_batch_1", "log_bytes_per_record")
        return cls(
            # The handler's own cost: SNS answered inside botocore, so no moto time is included.
            # Medians: robust to other work on the machine preempting a few requests.
            webhook_cpu_ms=_figure(
                results, 1.0, ("webhook", "telegram_accepted_sns_stubbed", "latency", "p50")
            ),
            webhook_init_ms=_figure(results, 1000.0, ("webhook", "cold_import_ms")),
            webhook_log_bytes=_figure(
                results,
                900.0,
                ("pipeline", "log_bytes_per_unit", "webhook"),
                ("latency", "log_bytes_per_unit", "webhook"),
                ("webhook", "telegram_accepted", "log_bytes_per_request"),
            ),
            worker_cpu_ms=_figure(results, 1.0, ("worker", "new_batch_1", "invocation_outside_aws", "p50")),
            worker_init_ms=_figure(results, 1000.0, ("worker", "cold_import_ms")),
            journal_calls_new=_op_counts(new) if measured else {"PutItem": 1.0, "UpdateItem": 1.0},
            journal_calls_duplicate=_op_counts(duplicate) if measured else {"PutItem": 1.0},
            journal_source="measured: worker" if measured else "assumed",
            consumer_log_bytes={
                consumer.name: _figure(
                    results,
                    1200.0,
                    ("pipeline", "log_bytes_per_unit", consumer.name),
                    ("latency", "log_bytes_per_unit", consumer.name),
                    generic_log,
                )
                for consumer in telegram_consumers(with_ai=True)
            },
        )


def _op_counts(calls: Mapping[str, Any]) -> dict[str, float]:
    """{"dynamodb:PutItem": 1.0} -> {"PutItem": 1.0}"""
    return {name.split(":", 1)[-1]: float(n) for name, n in calls.items()}


# -- the model --------------------------------------------------------------------------------------------
def cpu_factor(memory_mb: int) -> float:
    return max(1.0, FULL_VCPU_MB / memory_mb)


def sns_lines(bill: Bill, records: float, *, fifo_topic: bool = True, prefix: str = "") -> None:
    """The events topic: a FIFO topic bills each publish and its payload, and each delivery to an
    SQS subscription and its payload; a standard topic, the publish only."""
    if not fifo_topic:
        bill.add(f"{prefix}SNS publishes (standard topic)", "request", PRICES.sns_publish.usd, UPDATES)
        return
    bill.add(f"{prefix}SNS FIFO publishes", "request", PRICES.sns_fifo_publish.usd, UPDATES)
    bill.add(
        "SNS FIFO publish payload",
        "GB",
        PRICES.sns_fifo_publish_payload_gb.usd,
        UPDATES * ENVELOPE_BYTES / 1e9,
    )
    bill.add("SNS FIFO deliveries to SQS", "delivery", PRICES.sns_fifo_sqs_delivery.usd, records)
    bill.add(
        "SNS FIFO delivery payload",
        "GB",
        PRICES.sns_fifo_sqs_delivery_payload_gb.usd,
        records * ENVELOPE_BYTES / 1e9,
    )


def sqs_price(consumer: Consumer) -> tuple[str, float]:
    """An ordered consumer's queue is FIFO, priced higher per request."""
    if consumer.ordered:
        return "SQS requests (FIFO queues)", PRICES.sqs_fifo_request.usd
    return "SQS requests (standard queues)", PRICES.sqs_request.usd


def telegram_consumers(with_ai: bool) -> tuple[Consumer, ...]:
    settings = {"bedrock_model_id": "a-model" if with_ai else ""}
    return tuple(c for c in enabled(settings) if c.filter_policy.get("source") == ["telegram"])


def records_per_update(consumer: Consumer) -> float:
    """Expected records this consumer gets per update: the share of kinds its filter policy takes."""
    return sum(
        share
        for kind, share in UPDATE_MIX.items()
        if matches(consumer.filter_policy, {"source": "telegram", "type": kind})
    )


@dataclass
class Line:
    item: str
    unit: str
    unit_price: float
    quantity: float = 0.0

    @property
    def usd(self) -> float:
        return self.quantity * self.unit_price


@dataclass
class Bill:
    """Cost lines in report order (the order they are first added in)."""

    lines: dict[str, Line] = field(default_factory=dict)
    consumer_ms: dict[str, float] = field(default_factory=dict)
    # Records per invocation of each consumer (its batching window at this rate).
    consumer_batch: dict[str, float] = field(default_factory=dict)
    fanout: float = 0.0

    def add(self, item: str, unit: str, unit_price: float, quantity: float) -> None:
        line = self.lines.setdefault(item, Line(item, unit, unit_price))
        line.quantity += quantity

    @property
    def total(self) -> float:
        return sum(line.usd for line in self.lines.values())


@dataclass(frozen=True)
class FunctionLoad:
    """One Lambda function's share of the work per UPDATES updates."""

    name: str
    memory_mb: int
    invocations: float
    ms_per_invocation: float
    init_ms: float

    @property
    def gb(self) -> float:
        return self.memory_mb / 1024


@dataclass(frozen=True)
class ConsumerLoad:
    consumer: Consumer
    records: float
    function: FunctionLoad


def billed_ms(ms: float) -> int:
    return max(1, math.ceil(ms))


def records_per_invocation(consumer: Consumer, records: float, window_seconds: int) -> float:
    """What one invocation carries at this rate: the record that opens the window and those that
    arrive within it (a month of UPDATES updates, evenly), at most a batch."""
    if window_seconds <= 0:
        return float(min(RECORDS_PER_INVOCATION, consumer.batch_size))
    return min(float(consumer.batch_size), 1.0 + records / MONTH_SECONDS * window_seconds)


def consumer_loads(
    inputs: Inputs, with_ai: bool, ordered: Iterable[str] = (), windows: Mapping[str, int] | None = None
) -> list[ConsumerLoad]:
    loads = []
    new_calls = sum(inputs.journal_calls_new.values())
    for consumer in with_ordered(telegram_consumers(with_ai), ordered):
        work = CONSUMER_WORK.get(consumer.name, ConsumerWork())
        records = UPDATES * records_per_update(consumer)
        window = consumer.batching_window_seconds if windows is None else windows.get(consumer.name, 0)
        per_invocation = records_per_invocation(consumer, records, window)
        record_ms = (
            inputs.worker_cpu_ms.value * cpu_factor(consumer.memory_mb)
            + (new_calls + work.table_calls) * DYNAMODB_CALL_MS
            + work.outside_ms
        )
        function = FunctionLoad(
            consumer.name,
            consumer.memory_mb,
            records / per_invocation,
            record_ms * per_invocation,
            inputs.worker_init_ms.value,
        )
        loads.append(ConsumerLoad(consumer, records, function))
    return loads


def with_ordered(consumers: Iterable[Consumer], ordered: Iterable[str]) -> tuple[Consumer, ...]:
    names = set(ordered)
    return tuple(replace(c, ordered=True) if c.name in names else c for c in consumers)


def estimate(
    inputs: Inputs,
    with_ai: bool,
    tracing: bool = TRACING_DEFAULT,
    ordered: Iterable[str] = (),
    fifo_topic: bool = True,
    windows: Mapping[str, int] | None = None,
) -> Bill:
    """Cost lines per UPDATES Telegram updates (X-Ray traces only with `tracing`; the consumers
    named in `ordered` on FIFO queues; `fifo_topic` False prices a standard events topic)."""
    bill = Bill()
    consumers = consumer_loads(inputs, with_ai, ordered, windows)
    webhook_ms = inputs.webhook_cpu_ms.value * cpu_factor(WEBHOOK_MEMORY_MB) + SNS_PUBLISH_MS
    webhook = FunctionLoad("webhook", WEBHOOK_MEMORY_MB, UPDATES, webhook_ms, inputs.webhook_init_ms.value)
    functions = [webhook, *(load.function for load in consumers)]
    bill.fanout = sum(load.records for load in consumers) / UPDATES
    bill.consumer_batch = {load.consumer.name: load.records / load.function.invocations for load in consumers}
    bill.consumer_ms = {
        load.consumer.name: load.function.ms_per_invocation / bill.consumer_batch[load.consumer.name]
        for load in consumers
    }

    bill.add("API Gateway HTTP API", "request", PRICES.http_api_request.usd, UPDATES)
    for f in functions:
        bill.add("Lambda requests", "request", PRICES.lambda_request.usd, f.invocations)
    for f in functions:
        duration = f.invocations * billed_ms(f.ms_per_invocation) / 1000 * f.gb
        bill.add(f"Lambda {f.name} ({f.memory_mb} MB)", "GB-s", PRICES.lambda_arm_gb_second.usd, duration)
    for f in functions:
        # Not scaled by the CPU share: the init phase is not held to it the way invocations are.
        cold = f.invocations * COLD_START_SHARE * f.init_ms / 1000 * f.gb
        bill.add("Lambda init (cold starts)", "GB-s", PRICES.lambda_arm_gb_second.usd, cold)
    sns_lines(bill, sum(load.records for load in consumers), fifo_topic=fifo_topic)
    for load in consumers:
        # The SNS -> SQS delivery is a send; then per invocation one receive and one batch delete.
        item, price = sqs_price(load.consumer)
        bill.add(item, "request", price, load.records + 2 * load.function.invocations)
    new, duplicate = inputs.journal_calls_new, inputs.journal_calls_duplicate
    for load in consumers:
        duplicates = load.records * DUPLICATE_SHARE
        writes = load.records * _writes(new) + duplicates * _writes(duplicate)
        reads = load.records * new.get("GetItem", 0.0) + duplicates * duplicate.get("GetItem", 0.0)
        work = CONSUMER_WORK.get(load.consumer.name, ConsumerWork())
        journal_units = writes * JOURNAL_WRITE_UNITS
        bill.add(
            "DynamoDB writes, journal (idempotency)", "WRU", PRICES.dynamodb_write_unit.usd, journal_units
        )
        bill.add("DynamoDB reads, journal (idempotency)", "RRU", PRICES.dynamodb_read_unit.usd, reads)
        bill.add(
            "DynamoDB writes, consumers' own",
            "WRU",
            PRICES.dynamodb_write_unit.usd,
            load.records * work.write_units,
        )
    log_bytes = UPDATES * (inputs.webhook_log_bytes.value + ACCESS_LOG_BYTES) + sum(
        load.records * inputs.consumer_log_bytes[load.consumer.name].value for load in consumers
    )
    bill.add("CloudWatch Logs ingestion", "GB", PRICES.logs_ingested_gb.usd, log_bytes / 1e9)
    if tracing:
        traces = sum(f.invocations for f in functions) * XRAY_SAMPLED_SHARE
        bill.add("X-Ray traces", "trace", PRICES.xray_trace.usd, traces)
    return bill


def above_floor(model: Bill, design: Bill) -> dict[str, float]:
    """What the model bills above the floor, by kind (USD per UPDATES), largest first."""
    kinds = {
        "CloudWatch Logs": ("CloudWatch Logs",),
        "SQS requests": ("SQS", "1 SQS"),
        "Lambda requests": ("Lambda requests", "1 webhook invocation", "1 consumer invocation"),
        "Lambda durations and inits": ("Lambda ", "webhook billed", "consumer invocations billed"),
        "DynamoDB": ("DynamoDB", "2 journal", "consumers' own"),
    }

    def usd(bill: Bill, prefixes: tuple[str, ...]) -> float:
        return sum(line.usd for line in bill.lines.values() if line.item.startswith(prefixes))

    rest = {
        kind: usd(model, prefixes) - usd(design, prefixes)
        for kind, prefixes in kinds.items()
        if kind != "Lambda durations and inits"
    }
    lambda_kind = kinds["Lambda durations and inits"]
    model_lambda = usd(model, lambda_kind) - usd(model, kinds["Lambda requests"])
    rest["Lambda durations and inits"] = model_lambda - usd(design, lambda_kind)
    return dict(sorted(((k, round(v, 2)) for k, v in rest.items()), key=lambda item: -item[1]))


def floor_goal(
    design: dict[str, Any], above: dict[str, float], unwindowed: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Issue 44's goal: the model's cost per 1 M updates within FLOOR_GOAL_RATIO of the floor."""
    model = design["model_usd"]
    lever = (
        f"; without batching windows {unwindowed['floor_ratio']:.2f}x (${unwindowed['total_usd']:.2f})"
        if unwindowed
        else ""
    )
    return {
        "goal": f"cost per 1 M updates <= {design['goal_ratio']:g}x the floor",
        "met": design["goal_met"],
        "measured": f"{design['model_ratio']:.2f}x: ${model:.2f} vs floor ${design['total_usd']:.2f}; above"
        " it: " + ", ".join(f"{kind} ${usd:.2f}" for kind, usd in above.items() if usd >= 0.01) + lever,
    }


def floor(with_ai: bool = False) -> Bill:
    """The design's floor per UPDATES updates: the fewest billed units the architecture needs, each
    at its minimum. Per update: 1 HTTP API request, 1 webhook invocation billed 1 ms, 1 SNS
    publish; per record a consumer's filter policy takes: the SNS -> SQS delivery (a send), its
    share of a receive and a batch delete of SQS_MAX_BATCH records, 1 invocation billed 1 ms, the
    journal's 2 writes (INPROGRESS, then COMPLETED) and the consumer's own writes
    (CONSUMER_WORK). No logs, no traces, no cold starts, no duplicates: none is needed to carry
    an update through."""
    bill = Bill()
    consumers = [(c, UPDATES * records_per_update(c)) for c in telegram_consumers(with_ai)]
    records = sum(n for _, n in consumers)
    bill.fanout = records / UPDATES
    lambda_ = PRICES.lambda_arm_gb_second.usd
    bill.add("1 HTTP API request per update", "request", PRICES.http_api_request.usd, UPDATES)
    bill.add("1 webhook invocation per update", "request", PRICES.lambda_request.usd, UPDATES)
    bill.add("webhook billed 1 ms", "GB-s", lambda_, UPDATES * 0.001 * WEBHOOK_MEMORY_MB / 1024)
    sns_lines(bill, records, prefix="1 per update: ")
    bill.add("1 SQS send per record (SNS delivery)", "request", PRICES.sqs_request.usd, records)
    bill.add(
        f"SQS receive + delete per {SQS_MAX_BATCH} records",
        "request",
        PRICES.sqs_request.usd,
        2 * records / SQS_MAX_BATCH,
    )
    bill.add("1 consumer invocation per record", "request", PRICES.lambda_request.usd, records)
    for consumer, n in consumers:
        bill.add("consumer invocations billed 1 ms", "GB-s", lambda_, n * 0.001 * consumer.memory_mb / 1024)
    bill.add("2 journal writes per record", "WRU", PRICES.dynamodb_write_unit.usd, 2 * records)
    for consumer, n in consumers:
        work = CONSUMER_WORK.get(consumer.name, ConsumerWork())
        bill.add("consumers' own writes", "WRU", PRICES.dynamodb_write_unit.usd, n * work.write_units)
    return bill


def _writes(calls: Mapping[str, float]) -> float:
    return sum(n for name, n in calls.items() if name in ("PutItem", "UpdateItem", "DeleteItem"))


def run(quick: bool = False) -> dict[str, Any]:
    """`quick` changes nothing here: the model is arithmetic on the saved figures."""
    inputs = Inputs.from_results(load_results())
    bills = {"ai_off": estimate(inputs, with_ai=False), "ai_on": estimate(inputs, with_ai=True)}
    traced = estimate(inputs, with_ai=False, tracing=True)
    ordered = estimate(inputs, with_ai=False, ordered=ORDERED_SCENARIO)
    standard_topic = estimate(inputs, with_ai=False, fifo_topic=False)
    unwindowed = estimate(inputs, with_ai=False, windows=NO_WINDOWS)
    design_floor = floor(with_ai=False)
    ratio = bills["ai_off"].total / design_floor.total
    return {
        "updates": UPDATES,
        "prices_as_of": TRAFFIC_PRICES_RECORDED,
        "tracing_default": TRACING_DEFAULT,
        "traced_ai_off_total_usd": round(traced.total, 4),
        # Without ai: the ordered path (ORDERED_SCENARIO on FIFO queues) next to the unordered one,
        # and what the unordered one would cost on a standard events topic.
        "ordered": {
            "consumers": list(ORDERED_SCENARIO),
            "total_usd": round(ordered.total, 4),
            "unordered_total_usd": round(bills["ai_off"].total, 4),
            "standard_topic_total_usd": round(standard_topic.total, 4),
            "envelope_bytes": ENVELOPE_BYTES,
        },
        "above_floor": above_floor(bills["ai_off"], design_floor),
        # Without ai: each consumer's batching window (priced in every scenario) and the bill without any.
        "windows": {
            name: seconds
            for name, seconds in ((c.name, c.batching_window_seconds) for c in telegram_consumers(False))
            if seconds
        },
        "unwindowed": {
            "total_usd": round(unwindowed.total, 4),
            "floor_ratio": round(unwindowed.total / design_floor.total, 3),
        },
        "floor": {
            "model_usd": round(bills["ai_off"].total, 4),
            "total_usd": round(design_floor.total, 4),
            "lines": {line.item: round(line.usd, 4) for line in design_floor.lines.values()},
            "model_ratio": round(ratio, 3),
            "goal_ratio": FLOOR_GOAL_RATIO,
            "goal_met": ratio <= FLOOR_GOAL_RATIO,
        },
        "inputs": {
            "webhook_cpu_ms": vars(inputs.webhook_cpu_ms),
            "webhook_init_ms": vars(inputs.webhook_init_ms),
            "webhook_log_bytes": vars(inputs.webhook_log_bytes),
            "worker_cpu_ms": vars(inputs.worker_cpu_ms),
            "worker_init_ms": vars(inputs.worker_init_ms),
            "journal_calls_new": inputs.journal_calls_new,
            "journal_calls_duplicate": inputs.journal_calls_duplicate,
            "journal_source": inputs.journal_source,
            "consumer_log_bytes": {name: vars(figure) for name, figure in inputs.consumer_log_bytes.items()},
        },
        "scenarios": {
            name: {
                "total_usd": round(bill.total, 4),
                "records_per_update": round(bill.fanout, 3),
                "consumer_ms_per_record": {k: round(v, 2) for k, v in bill.consumer_ms.items()},
                "records_per_invocation": {k: round(v, 2) for k, v in bill.consumer_batch.items()},
                "lines": {
                    line.item: {
                        "unit": line.unit,
                        "unit_price": line.unit_price,
                        "quantity": line.quantity,
                        "usd": round(line.usd, 4),
                    }
                    for line in bill.lines.values()
                },
            }
            for name, bill in bills.items()
        },
    }


def _quantity(value: float, unit: str) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.2f} M {unit}"
    if value >= 1e3:
        return f"{value / 1e3:.1f} k {unit}"
    return f"{value:.2f} {unit}"


def _origin(source: str) -> str:
    """ "measured: pipeline.log_bytes_per_unit.store" -> "pipeline"; "assumed" stays."""
    return source.removeprefix("measured: ").split(".", 1)[0]


def _price(price: float, unit: str) -> str:
    """Small unit prices per million units, as AWS lists them."""
    return f"{price * 1e6:.4g}/M {unit}" if price < 0.001 else f"{price:.4g}/{unit}"


def report(results: dict[str, Any]) -> list[str]:
    off, on = results["scenarios"]["ai_off"], results["scenarios"]["ai_on"]
    inputs = results["inputs"]
    rows = []
    for item, after in on["lines"].items():
        before = off["lines"].get(item, {"quantity": 0.0, "usd": 0.0})
        unit = after["unit"]
        rows.append(
            [
                item,
                _price(after["unit_price"], unit),
                _quantity(before["quantity"], unit),
                f"{before['usd']:.2f}",
                _quantity(after["quantity"], unit),
                f"{after['usd']:.2f}",
            ]
        )
    rows.append(["total per 1 M updates", "", "", f"{off['total_usd']:.2f}", "", f"{on['total_usd']:.2f}"])
    traced = results["traced_ai_off_total_usd"]
    lines = [
        f"cost per {results['updates'] / 1e6:g} M Telegram updates, USD ({PRICES_NOTE})",
        f"  records per update: {off['records_per_update']:.2f} without ai,"
        f" {on['records_per_update']:.2f} with ai; records per invocation "
        + ", ".join(f"{name} {n:g}" for name, n in on["records_per_invocation"].items()),
        *("  " + line for line in table(["item", "USD/unit", "qty ai off", "USD", "qty ai on", "USD"], rows)),
        "  inputs: "
        + "; ".join(
            f"{name} {inputs[name]['value']:.2f} ({inputs[name]['source']})"
            for name in ("webhook_cpu_ms", "worker_cpu_ms", "webhook_init_ms", "worker_init_ms")
        ),
        "  log bytes per request/record: "
        + ", ".join(
            f"{name} {figure['value']:.0f} ({_origin(figure['source'])})"
            for name, figure in {
                "webhook": inputs["webhook_log_bytes"],
                **inputs["consumer_log_bytes"],
            }.items()
        ),
        f"  journal calls per new record {inputs['journal_calls_new']}, per duplicate"
        f" {inputs['journal_calls_duplicate']} ({inputs['journal_source']})",
        f"  with tracing=true (X-Ray on every function; off by default): {traced:.2f} without ai"
        f" (+{traced - off['total_usd']:.2f}: at this rate the default sampling rule records nearly"
        " every invocation)",
        *ordered_report(results),
        *floor_report(results),
        *window_report(results),
        "  estimated billed ms per record (ai on): "
        + ", ".join(f"{name} {ms:.0f}" for name, ms in on["consumer_ms_per_record"].items()),
        *(f"  {name}: {work.note}" for name, work in CONSUMER_WORK.items() if work.note),
        "  not per update: the fixed monthly charges (`python -m bench bill`: KMS key, secrets, alarms,"
        " dashboard), EMF custom metrics ($0.30/metric-month), KMS requests for the encrypted topics"
        " (SNS reuses data keys), Lambda's idle long polling of each queue, DynamoDB storage"
        " (~1.5 GB of conversations per 1 M updates) and Bedrock tokens.",
    ]
    return lines


def summary(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 44's goal of this benchmark, with what was measured."""
    return [floor_goal(results["floor"], results["above_floor"], results.get("unwindowed"))]


def window_report(results: dict[str, Any]) -> list[str]:
    unwindowed = results.get("unwindowed")
    if not unwindowed:
        return []
    windows = ", ".join(f"{name} {seconds} s" for name, seconds in results["windows"].items()) or "none"
    return [
        f"  batching windows priced (`batching_window_seconds` in each consumer.toml; none on the reply"
        f" path): {windows}; each of those effects waits up to its window. Without any window:"
        f" {unwindowed['total_usd']:.2f} per 1 M updates, {unwindowed['floor_ratio']:.2f}x the floor"
        " (a receive, a delete and an invocation per record)",
    ]


def ordered_report(results: dict[str, Any]) -> list[str]:
    """The ordered path's cost next to the unordered one's (without ai, untraced)."""
    ordered = results["ordered"]
    unordered, standard = ordered["unordered_total_usd"], ordered["standard_topic_total_usd"]
    return [
        f"  ordered path ({', '.join(ordered['consumers'])} on a FIFO queue, as a conversational bot's"
        f" would be): {ordered['total_usd']:.2f} per 1 M updates, unordered {unordered:.2f}"
        f" (+{ordered['total_usd'] - unordered:.2f}: SQS FIFO requests)",
        f"  the FIFO events topic (every path; {ordered['envelope_bytes']} B envelopes):"
        f" unordered {unordered:.2f} vs {standard:.2f} on a standard topic ({unordered - standard:+.2f}:"
        " FIFO publishes are cheaper, but deliveries to SQS and payload are billed)",
    ]


def floor_report(results: dict[str, Any]) -> list[str]:
    """The design's floor next to the model's figure (default configuration: without ai, untraced)."""
    design = results["floor"]
    model = results["scenarios"]["ai_off"]["total_usd"]
    verdict = "met" if design["goal_met"] else "NOT met"
    return [
        f"  design floor (without ai): {design['total_usd']:.2f} per 1 M updates; the model {model:.2f} is"
        f" {design['model_ratio']:.2f}x the floor, goal <= {design['goal_ratio']:g}x: {verdict}",
        *(f"    {item}: {usd:.2f}" for item, usd in design["lines"].items()),
        "    above the floor in the model: SQS receives and deletes of fewer than 10 records (one record"
        " per invocation at this rate where no batching window gathers more), Lambda durations and cold"
        " starts, CloudWatch Logs, duplicates",
    ]
