"""The local moto server's SQS as the tests drive it: in-process moto with the server's patches
(`local.moto_process.apply_patches`) on a clock of the test's own, and FIFO queues as the stack
makes them. Fixtures `clock`, `patched_sqs` and `sqs` are in this folder's conftest."""

from __future__ import annotations

import json
import time
from typing import Any

from local.resources import FIFO_QUEUE_ATTRIBUTES

MAX_RECEIVES = 3


class FakeClock:
    """moto's SQS clock, moved by the test (and by each long-poll wait) only."""

    def __init__(self) -> None:
        self.now = time.time()

    def seconds(self) -> float:
        return self.now

    def millis(self) -> int:
        return int(self.now * 1000)

    def advance(self, seconds: float) -> None:
        self.now += seconds


def fifo_queue(sqs: Any, name: str = "bot") -> tuple[str, str]:
    """A FIFO queue redriving to its DLQ after MAX_RECEIVES receives, as the stack makes them."""
    dlq = sqs.create_queue(QueueName=f"{name}-dlq.fifo", Attributes=FIFO_QUEUE_ATTRIBUTES)["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    redrive = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": MAX_RECEIVES})
    url = sqs.create_queue(
        QueueName=f"{name}.fifo",
        Attributes={**FIFO_QUEUE_ATTRIBUTES, "VisibilityTimeout": "30", "RedrivePolicy": redrive},
    )["QueueUrl"]
    return url, dlq


def send(sqs: Any, url: str, *messages: tuple[str, str]) -> None:
    for group, body in messages:
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=group, MessageDeduplicationId=body)


def receive(sqs: Any, url: str, wait: int = 0, count: int = 10) -> list[dict[str, Any]]:
    return list(
        sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=count, WaitTimeSeconds=wait).get("Messages", [])
    )


def bodies(messages: list[dict[str, Any]]) -> list[str]:
    return [m["Body"] for m in messages]
