"""A consumer's (or the reconciler's) own process: Lambda's event source mapping, played locally.

`python -m local.worker_process sqs --handler store.app.lambda_handler --queue-url ...` long-polls
the queue and hands each batch to the handler as a real SQS event (`local.sqs_poller`).

`python -m local.worker_process schedule --every 30 ...` invokes the handler with an EventBridge
"Scheduled Event" on a fixed rate.

`python -m local.worker_process sns --subscription-arn ... --queue-url ...` invokes it as an SNS
subscription does, one SNS record per message of a queue subscribed to the topic
(`local.sns_subscription`).

The environment is the function's Lambda environment, set by the parent; progress goes to the
parent as JSON lines on `--status-fd`, logs to stdout/stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from local.lambda_host import (
    ACCOUNT_ID,
    EXIT_STOPPED,
    EXIT_TIMED_OUT,
    FunctionHost,
    StatusChannel,
    Stopper,
    exit_now,
    quiet_interrupts,
    wait_for_handler,
)
from local.sns_subscription import SnsSubscriptionPoller
from local.sqs_poller import SqsPoller, report_invocation
from pipeline.registry import Consumer, RetryPolicy

# A consumer the runtime was started with that is not the registry's entry of that name (a test's
# `dataclasses.replace(by_name("autoreply"), ordered=True, ...)`): its declaration, as JSON, so
# the worker in this process reads the same consumer its queue was made for. Never set in AWS,
# where the bundled registry is the one the stack was synthesized from.
LOCAL_CONSUMER_ENV = "LOCAL_CONSUMER"


def consumer_json(consumer: Consumer) -> str:
    return json.dumps(dataclasses.asdict(consumer))


def consumer_from_json(raw: str) -> Consumer:
    fields = json.loads(raw)
    return Consumer(
        **{
            **fields,
            "retry": RetryPolicy(**fields["retry"]),
            "secrets": tuple(fields["secrets"]),
            "account_causes": tuple(fields["account_causes"]),
            "tables": {name: tuple(actions) for name, actions in fields["tables"].items()},
            "secrets_when": {name: tuple(when) for name, when in fields["secrets_when"].items()},
        }
    )


def apply_local_consumer(environ: Mapping[str, str]) -> Consumer | None:
    """Make `pipeline.registry.by_name` answer the runtime's declaration of this process's
    consumer (see LOCAL_CONSUMER_ENV); before the handler is imported, so the worker reads it."""
    raw = environ.get(LOCAL_CONSUMER_ENV)
    if not raw:
        return None
    from pipeline import registry

    consumer = consumer_from_json(raw)
    original = registry.by_name

    def by_name(name: str, consumers: Any = registry.CONSUMERS) -> Consumer:
        return consumer if name == consumer.name else original(name, consumers)

    registry.by_name = by_name
    worker = sys.modules.get("pipeline.worker")
    if worker is not None:
        worker.by_name = by_name  # type: ignore[attr-defined]
    return consumer


def scheduled_event(rule_arn: str, region: str) -> dict[str, Any]:
    """The EventBridge event a schedule rule invokes its target with."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": ACCOUNT_ID,
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [rule_arn],
        "detail": {},
    }


def run_schedule(
    args: argparse.Namespace, host: FunctionHost, status: StatusChannel, stopper: Stopper
) -> int:
    rule_arn = f"arn:aws:events:{host.region}:{ACCOUNT_ID}:rule/{args.function_name}-schedule"
    while not stopper.wait(args.every):
        status.send("busy", records=1)
        invocation = host.invoke(scheduled_event(rule_arn, host.region))
        report_invocation(status, invocation, result=invocation.result if invocation.ok else None)
        if invocation.timed_out:
            return EXIT_TIMED_OUT
    return EXIT_STOPPED


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m local.worker_process")
    parser.add_argument("mode", choices=("sqs", "schedule", "sns"))
    parser.add_argument("--handler", required=True)
    parser.add_argument("--function-name", required=True)
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--memory", type=int, default=256)
    parser.add_argument("--status-fd", type=int)
    parser.add_argument("--queue-url")
    parser.add_argument("--queue-arn")
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--batching-window", type=float, default=0)
    parser.add_argument("--every", type=float, default=30)
    parser.add_argument("--subscription-arn")
    args = parser.parse_args(argv)
    if args.mode == "sqs" and not (args.queue_url and args.queue_arn):
        parser.error("sqs mode needs --queue-url and --queue-arn")
    if args.mode == "sns" and not (args.queue_url and args.subscription_arn):
        parser.error("sns mode needs --queue-url and --subscription-arn")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    apply_local_consumer(os.environ)
    stopper = Stopper()
    status = StatusChannel(args.status_fd)
    host = FunctionHost(args.handler, args.function_name, args.timeout, args.memory, status=status)
    if not wait_for_handler(host, status, stopper):
        return EXIT_STOPPED
    if args.mode == "sqs":
        return SqsPoller(args, host, status, stopper).run()
    if args.mode == "sns":
        return SnsSubscriptionPoller(args, host, status, stopper).run()
    return run_schedule(args, host, status, stopper)


if __name__ == "__main__":
    with quiet_interrupts():
        exit_now(main())
