"""The local SQS poller asked to stop while a receive is open: it hands the batch back at once and
starts no invocation (Lambda starts none on an environment it is shutting down). Before, it
invoked the handler on the batch, which the runtime's stop then cut after 5 s: a broadcast chat
claimed and never sent (tests/e2e/test_broadcast_scale.py's restart could meet it)."""

from __future__ import annotations

import argparse
from typing import Any

import boto3
import pytest

from local.lambda_host import EXIT_STOPPED
from local.sqs_poller import SqsPoller

REGION = "eu-central-1"


class StopDuringReceive:
    """A stop asked after the poller's loops started and its receive went out."""

    def __init__(self, reads_before_stop: int) -> None:
        self.reads = 0
        self.reads_before_stop = reads_before_stop

    @property
    def stopping(self) -> bool:
        self.reads += 1
        return self.reads > self.reads_before_stop

    def wait(self, seconds: float) -> bool:
        return self.stopping


class CountingHost:
    region = REGION

    def __init__(self) -> None:
        self.invocations: list[dict[str, Any]] = []

    def invoke(self, event: dict[str, Any]) -> Any:
        self.invocations.append(event)
        raise AssertionError("no invocation may start once the stop was asked")


class Statuses:
    def send(self, *args: Any, **kwargs: Any) -> None:
        pass


@pytest.fixture
def queue(moto_aws: None) -> tuple[Any, str]:
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(QueueName="broadcast", Attributes={"VisibilityTimeout": "96"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="a page")
    return sqs, url


def test_a_batch_received_as_the_stop_comes_is_handed_back_not_invoked(queue: tuple[Any, str]) -> None:
    sqs, url = queue
    args = argparse.Namespace(
        queue_url=url,
        queue_arn=f"arn:aws:sqs:{REGION}:123456789012:broadcast",
        batch_size=10,
        batching_window=0,
    )
    host = CountingHost()
    # Read once by run()'s loop and once by the receive's: the stop comes while the receive is open.
    poller = SqsPoller(args, host, Statuses(), StopDuringReceive(reads_before_stop=2))  # type: ignore[arg-type]

    assert poller.run() == EXIT_STOPPED

    assert host.invocations == []
    # Visible again at once (not after the queue's 96 s), received twice now.
    [again] = sqs.receive_message(QueueUrl=url, MessageSystemAttributeNames=["All"])["Messages"]
    assert again["Body"] == "a page"
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"
