"""The command line of each function process (`local.apigw`, `local.worker_process`)."""

from __future__ import annotations

from collections.abc import Callable

from infra.environment import FunctionSpec
from pipeline.registry import Consumer


def host_args(mode: str, handler: str, function_name: str, timeout: int, memory: int) -> list[str]:
    """What every function host is told: how it is invoked, its handler, name and Lambda limits."""
    return [
        *((mode,) if mode else ()),
        "--handler",
        handler,
        "--function-name",
        function_name,
        "--timeout",
        str(timeout),
        "--memory",
        str(memory),
    ]


def window_seconds(consumer: Consumer, gathering: bool) -> int:
    """The window a consumer's poller gathers records for, in seconds: its declared one, or 0 when
    the runtime runs without windows (`LocalSettings.batching_windows` off)."""
    return consumer.batching_window_seconds if gathering else 0


def consumer_args(
    consumer: Consumer, lambda_name: str, queue_url: str, queue_arn: str, *, batching_window: bool = True
) -> Callable[[], list[str]]:
    """A queue consumer's worker: polls its queue as Lambda's SQS event source does (without its
    batching window when `batching_window` is False: `LocalSettings.batching_windows`)."""
    arguments = [
        *host_args("sqs", consumer.handler, lambda_name, consumer.timeout_seconds, consumer.memory_mb),
        "--queue-url",
        queue_url,
        "--queue-arn",
        queue_arn,
        "--batch-size",
        str(consumer.batch_size),
        "--batching-window",
        str(window_seconds(consumer, batching_window)),
    ]
    return lambda: list(arguments)


def scheduled_args(spec: FunctionSpec, lambda_name: str, every_seconds: float) -> Callable[[], list[str]]:
    """A function EventBridge runs on a schedule, every `every_seconds`."""
    arguments = [
        *host_args("schedule", spec.handler, lambda_name, spec.timeout_seconds, spec.memory_mb),
        "--every",
        str(every_seconds),
    ]
    return lambda: list(arguments)


def subscription_args(
    spec: FunctionSpec, lambda_name: str, queue_url: str, subscription_arn: str
) -> Callable[[], list[str]]:
    """A function an SNS topic's Lambda subscription invokes (the messages reach it through a queue)."""
    arguments = [
        *host_args("sns", spec.handler, lambda_name, spec.timeout_seconds, spec.memory_mb),
        "--queue-url",
        queue_url,
        "--subscription-arn",
        subscription_arn,
    ]
    return lambda: list(arguments)
