"""A consumer's batching window, locally as in AWS (issue 44: store, crm and analytics gather
records for their window by default). Oracle: Lambda's SQS event source, which invokes when the
window closes, the batch is full or the payload limit is reached, whichever comes first; and the
queue's visibility timeout, which covers the function's timeout six times plus the window."""

from __future__ import annotations

import argparse
import time
from typing import Any

import boto3
import pytest

from local.function_args import consumer_args
from local.sqs_poller import LONG_POLL_SECONDS, SqsPoller
from pipeline.registry import CONSUMERS, by_name

REGION = "eu-central-1"
# Shorter than the poller's long poll, so a receive that waited past the window would show.
WINDOW_SECONDS = 1


class NeverStopping:
    stopping = False

    def wait(self, seconds: float) -> bool:
        time.sleep(seconds)
        return False


@pytest.fixture
def queue(moto_aws: None) -> tuple[Any, str]:
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(QueueName="store", Attributes={"VisibilityTimeout": "200"})["QueueUrl"]
    for n in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=f"update {n}")
    return sqs, url


def gather(url: str, batch_size: int, window: int) -> tuple[list[str], float, list[int]]:
    """The bodies of one batch, the seconds it took, and the WaitTimeSeconds of each ReceiveMessage
    the poller sent (read from its SQS client's calls, not from the clock: no bound here depends on
    how fast this machine answers)."""
    args = argparse.Namespace(
        queue_url=url,
        queue_arn=f"arn:aws:sqs:{REGION}:123456789012:store",
        batch_size=batch_size,
        batching_window=window,
    )
    poller = SqsPoller(args, None, None, NeverStopping())  # type: ignore[arg-type]
    receives: list[int] = []
    poller.sqs.meta.events.register(
        "provide-client-params.sqs.ReceiveMessage",
        lambda params, **_: receives.append(params["WaitTimeSeconds"]),
    )
    started = time.monotonic()
    messages = poller.receive_batch()
    return sorted(message["Body"] for message in messages), time.monotonic() - started, receives


def test_a_window_that_does_not_fill_is_waited_out_then_invokes_with_all_it_gathered(
    queue: tuple[Any, str],
) -> None:
    _, url = queue
    bodies, seconds, receives = gather(url, batch_size=10, window=WINDOW_SECONDS)
    assert bodies == ["update 0", "update 1", "update 2"]
    assert seconds >= WINDOW_SECONDS - 0.1
    # After the first receive, the poller long-polls for what is left of the window, never longer.
    assert WINDOW_SECONDS < LONG_POLL_SECONDS
    assert len(receives) >= 2 and all(wait <= WINDOW_SECONDS for wait in receives[1:])


def test_a_full_batch_closes_the_window_and_no_window_invokes_with_one_receive(
    queue: tuple[Any, str],
) -> None:
    _, url = queue
    bodies, _, receives = gather(url, batch_size=3, window=WINDOW_SECONDS)
    assert bodies == ["update 0", "update 1", "update 2"]
    assert len(receives) == 1, "a full batch invokes at once: no receive waits for the window"
    sqs, _ = queue
    for n in range(2):
        sqs.send_message(QueueUrl=url, MessageBody=f"late {n}")
    bodies, _, receives = gather(url, batch_size=10, window=0)
    assert bodies == ["late 0", "late 1"] and len(receives) == 1


def test_the_effects_that_may_wait_gather_a_window_by_default_and_the_reply_path_none() -> None:
    windows = {consumer.name: consumer.batching_window_seconds for consumer in CONSUMERS}
    assert windows["store"] > 0 and windows["crm"] > 0 and windows["analytics"] > 0
    assert windows["autoreply"] == windows["bot"] == windows["ai"] == windows["broadcast"] == 0
    for consumer in CONSUMERS:
        assert (
            consumer.visibility_timeout_seconds
            == 6 * consumer.timeout_seconds + consumer.batching_window_seconds
        )


def test_the_local_runtime_gives_a_consumer_its_window_unless_told_not_to() -> None:
    store = by_name("store")

    def window(**options: Any) -> str:
        args = consumer_args(store, "store", "http://queue", "arn:queue", **options)()
        return args[args.index("--batching-window") + 1]

    assert window() == str(store.batching_window_seconds) == "20"
    assert window(batching_window=False) == "0"
