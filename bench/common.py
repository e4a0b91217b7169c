"""What the benchmarks share: latency statistics, AWS call metering, log capture, sample events, results.

Every benchmark checks its own runs (all requests accepted, every record processed, ...) and raises
`BenchError` otherwise: a figure measured on failing requests would be a wrong figure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import io
import json
import logging
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiogram.types import Update
from aws_lambda_powertools import Logger
from moto import mock_aws

from local.demo import message, private_chat
from local.resources import LocalResources, create_resources
from local.runtime import FUNCTIONS_DIR, LAYER_DIR
from local.settings import PROJECT_ROOT, LocalSettings
from pipeline import aws, secrets
from pipeline.registry import Consumer

RESULTS_PATH = PROJECT_ROOT / ".local" / "bench" / "results.json"
REGION = "eu-central-1"
METRICS_NAMESPACE = "TelegramCrmPipeline"
FAKE_AWS_ENV = {
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
}
# In-process benchmarks create the stack's secrets, some of which name the fakes' URLs; nothing
# calls them there, so they point at a port where nothing listens.
UNREACHABLE_URL = "http://127.0.0.1:9"
FAKE_NAMES = ("telegram", "crm", "bedrock", "sms", "end_user_messaging", "bitrix24", "amocrm")


class BenchError(RuntimeError):
    """A benchmark's own check failed: its figures would not measure what they claim."""


def require(condition: bool, message: str) -> None:
    if not condition:
        raise BenchError(message)


# -- statistics ---------------------------------------------------------------------------------------
def percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an ascending sequence."""
    index = max(0, math.ceil(q / 100 * len(ordered)) - 1)
    return ordered[index]


@dataclass(frozen=True)
class Stats:
    """A latency summary in milliseconds."""

    count: int
    mean: float
    p50: float
    p95: float
    p99: float
    max: float

    @classmethod
    def of_seconds(cls, samples: Sequence[float]) -> Stats:
        require(bool(samples), "no samples to summarise")
        ordered = sorted(sample * 1000 for sample in samples)
        return cls(
            count=len(ordered),
            mean=round(statistics.fmean(ordered), 3),
            p50=round(percentile(ordered, 50), 3),
            p95=round(percentile(ordered, 95), 3),
            p99=round(percentile(ordered, 99), 3),
            max=round(ordered[-1], 3),
        )

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> Stats:
        return cls(**{name: document[name] for name in cls.__dataclass_fields__})

    def line(self) -> str:
        return (
            f"p50 {self.p50:8.2f}  p95 {self.p95:8.2f}  p99 {self.p99:8.2f}  max {self.max:8.2f} ms"
            f"  (n={self.count})"
        )


def goal_line(goal: Mapping[str, Any]) -> str:
    """One goal of a benchmark (`goals()`): OK or NOT MET, what it is, and what was measured."""
    return f"  {'OK' if goal['met'] else 'NOT MET':<7}  {goal['goal']}: {goal['measured']}"


# -- AWS calls ----------------------------------------------------------------------------------------
class AwsCallMeter:
    """Counts the API calls of the boto3 clients it is attached to, and the wall time spent in them.

    A call's time runs from botocore's first event (`provide-client-params`) to its last
    (`after-call`, or `after-call-error` when the request failed): serialisation, the round trip
    (here: moto) and parsing. What a handler spends outside boto3 is the rest of its time.
    Calls are counted as `<service>:<Operation>`, e.g. `dynamodb:PutItem`.
    """

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.seconds = 0.0
        self._started: float | None = None
        self._clients: list[Any] = []

    def attach(self, *clients: Any) -> AwsCallMeter:
        for client in clients:
            client.meta.events.register("provide-client-params", self._start)
            client.meta.events.register("after-call", self._stop)
            client.meta.events.register("after-call-error", self._stop)
            self._clients.append(client)
        return self

    def detach(self) -> None:
        for client in self._clients:
            client.meta.events.unregister("provide-client-params", self._start)
            client.meta.events.unregister("after-call", self._stop)
            client.meta.events.unregister("after-call-error", self._stop)
        self._clients.clear()

    def reset(self) -> None:
        self.calls.clear()
        self.seconds = 0.0

    def count(self, service: str) -> int:
        return sum(number for name, number in self.calls.items() if name.startswith(f"{service}:"))

    def _start(self, model: Any, **_: Any) -> None:
        self.calls[f"{model.service_model.service_name}:{model.name}"] += 1
        self._started = time.perf_counter()

    def _stop(self, **_: Any) -> None:
        if self._started is not None:
            self.seconds += time.perf_counter() - self._started
            self._started = None


# -- what functions print -------------------------------------------------------------------------------
class ByteCountingSink(io.StringIO):
    """A stdout stand-in that keeps only the size of what was written (what CloudWatch Logs would ingest)."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def write(self, text: str) -> int:
        self.bytes += len(text.encode("utf-8", errors="replace"))
        return len(text)

    def reset(self) -> None:
        self.bytes = 0


@contextlib.contextmanager
def captured_output(*loggers: Logger) -> Iterator[ByteCountingSink]:
    """Everything the functions print (Powertools JSON logs, EMF metric lines) counted, not shown.

    Powertools binds its log handler to the `sys.stdout` of import time, so the handlers of
    `loggers` are pointed at the sink too.
    """
    sink = ByteCountingSink()
    restore: list[tuple[logging.StreamHandler[Any], Any]] = []
    for logger in loggers:
        handler = logger.registered_handler
        if isinstance(handler, logging.StreamHandler):
            restore.append((handler, handler.setStream(sink)))
    try:
        with contextlib.redirect_stdout(sink):
            yield sink
    finally:
        for handler, stream in restore:
            handler.setStream(stream)


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Collect, then exclude what exists now (moto's state, prebuilt events) from later collections.

    Without this, full collections rescan moto's large heap and add multi-millisecond pauses to
    a few percent of requests, an artefact of running moto in-process: a Lambda's heap is small.
    Objects created while measuring are still collected as usual.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


# -- environments -------------------------------------------------------------------------------------
@contextlib.contextmanager
def environment(values: Mapping[str, str], remove: Sequence[str] = ()) -> Iterator[None]:
    """Set (and unset) environment variables for the block; the previous values come back after."""
    saved = {name: os.environ.get(name) for name in [*values, *remove]}
    try:
        os.environ.update(values)
        for name in remove:
            os.environ.pop(name, None)
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def powertools_environment(service_name: str) -> dict[str, str]:
    return {
        "POWERTOOLS_SERVICE_NAME": service_name,
        "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
        "POWERTOOLS_LOG_LEVEL": "INFO",
        "POWERTOOLS_TRACE_DISABLED": "1",
    }


def _forget_clients() -> None:
    aws.reset_clients()
    secrets.clear_cache()


@contextlib.contextmanager
def in_process_aws(service_name: str) -> Iterator[None]:
    """moto in this process, fake credentials, Powertools settings; no client or cached secret leaks out."""
    env = {**FAKE_AWS_ENV, **powertools_environment(service_name)}
    with environment(env, remove=("AWS_ENDPOINT_URL", "AWS_PROFILE")), mock_aws():
        _forget_clients()
        try:
            yield
        finally:
            _forget_clients()


def deployed_default_settings() -> LocalSettings:
    """What the figures are about: the stack as `cdk.json` deploys it. Without `bot_application`
    the canned `autoreply` answers; `make local` runs the example bot instead, unless told not to."""
    return LocalSettings.from_cdk_json(bot_consumer=False)


def draining_settings() -> LocalSettings:
    """The deployed defaults for a benchmark that waits for every consumer between samples:
    without the batching windows of store, crm and analytics (each drain would wait them out);
    `cost` prices the windows, `latency`'s replies run with them."""
    return dataclasses.replace(deployed_default_settings(), batching_windows=False)


def create_stack(consumers: tuple[Consumer, ...] | None = None) -> LocalResources:
    """The stack's topic, filtered queues, tables and secrets in in-process moto, as `make local` does."""
    fakes = dict.fromkeys(FAKE_NAMES, UNREACHABLE_URL)
    return create_resources(aws.client, deployed_default_settings(), fakes, consumers)


def function_path_environment() -> dict[str, str]:
    """PYTHONPATH as Lambda sees the code: the functions' asset root and the shared layer."""
    return {"PYTHONPATH": os.pathsep.join(str(path) for path in (FUNCTIONS_DIR, LAYER_DIR, PROJECT_ROOT))}


def cold_import_ms(module: str, runs: int = 3) -> float:
    """Median time to import `module` in a fresh interpreter: the init phase's own code at a cold start.

    Interpreter start-up is left out (Lambda's runtime is up before the init code runs); the
    bytecode caches are warm, as the shipped assets' compiled `.pyc` files make them in Lambda
    (`bench.imports` measures the built assets themselves).
    """
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        **FAKE_AWS_ENV,
        **powertools_environment(module.split(".", 1)[0]),
        **function_path_environment(),
    }
    samples = []
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        samples.append(float(done.stdout.strip().splitlines()[-1]))
    return round(statistics.median(samples) * 1000, 1)


# -- sample events ------------------------------------------------------------------------------------
def compact(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def telegram_message(update_id: int, user_id: int, text: str, now: int | None = None) -> dict[str, Any]:
    """A message in a private chat from a new user (a leading command gets its `bot_command` entity)."""
    user = {"id": user_id, "is_bot": False, "first_name": "Bench", "language_code": "en"}
    chat = private_chat(user)
    update = {"update_id": update_id, "message": message(1, chat, user, text, now or int(time.time()))}
    Update.model_validate(update)  # real-shaped: aiogram's Bot API model accepts it
    return update


def telegram_start(update_id: int, user_id: int, now: int | None = None) -> dict[str, Any]:
    """A bare /start from a new user: every Telegram consumer receives it; `store` saves it, `autoreply`
    answers it, `crm` makes a lead, and `ai` leaves it alone (nothing to analyze)."""
    return telegram_message(update_id, user_id, "/start", now)


def crm_status_change(number: int, status: str = "shipped") -> dict[str, Any]:
    """An order-status change the webhook accepts ("shipped" has an SMS rule, so `sms` takes it)."""
    return {
        "event_id": f"evt-bench-{number}",
        "type": "order.status_changed",
        "occurred_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
        "order": {"id": f"B-{number}", "status": status, "previous_status": "paid"},
        "customer": {"phone": "+4915123456789", "name": "Bench Customer"},
    }


# -- results and printing -------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        # Other work on the machine skews every figure: this says how busy it was.
        "load_average_1min": round(os.getloadavg()[0], 2),
    }


def load_results() -> dict[str, Any]:
    """Figures of earlier runs (`cost` reads the measured ones), by benchmark name."""
    if not RESULTS_PATH.is_file():
        return {}
    document = json.loads(RESULTS_PATH.read_text())
    return document if isinstance(document, dict) else {}


def save_results(name: str, figures: Mapping[str, Any]) -> None:
    results = load_results()
    results[name] = {
        **figures,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
    }
    RESULTS_PATH.parent.mkdir(parents=True, exist_ok=True)
    temporary = RESULTS_PATH.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    temporary.replace(RESULTS_PATH)


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """A plain text table: first column left-aligned, the others right-aligned."""
    cells = [[str(cell) for cell in header], *([str(cell) for cell in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]

    def line(row: list[str]) -> str:
        first, *rest = row
        return "  ".join(
            [first.ljust(widths[0]), *(cell.rjust(w) for cell, w in zip(rest, widths[1:], strict=True))]
        )

    return [line(cells[0]), "  ".join("-" * width for width in widths), *(line(row) for row in cells[1:])]
