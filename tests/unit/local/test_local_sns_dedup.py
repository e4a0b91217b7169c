"""The SNS proxy plays the FIFO topic's five-minute deduplication that moto lacks.

A repeated MessageDeduplicationId on the same FIFO topic within the window is answered as SNS
answers it (success, the first message's id) and never reaches a subscriber, FIFO or standard.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from local.fakes import sns as sns_proxy
from local.fakes.sns import SnsFaultProxy
from local.resources import EVENTS_TOPIC_ATTRIBUTES, FIFO_QUEUE_ATTRIBUTES
from local.routing import Publish, explain
from pipeline.registry import enabled
from tests.support.moto_server import serialized_moto_server

REGION = "eu-central-1"


@pytest.fixture
def fake_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def clients(fake_credentials: None) -> Iterator[tuple[Any, Any, SnsFaultProxy]]:
    """(SNS through the proxy, SQS straight to moto, the proxy)."""
    with serialized_moto_server() as moto_url:
        proxy = SnsFaultProxy(upstream=lambda: moto_url).start()
        try:
            yield (
                boto3.client("sns", endpoint_url=proxy.url),
                boto3.client("sqs", endpoint_url=moto_url),
                proxy,
            )
        finally:
            proxy.stop()


def subscribed_queues(sns: Any, sqs: Any, topic_arn: str) -> dict[str, str]:
    queues = {
        "standard": sqs.create_queue(QueueName="standard")["QueueUrl"],
        "fifo": sqs.create_queue(QueueName="ordered.fifo", Attributes=FIFO_QUEUE_ATTRIBUTES)["QueueUrl"],
    }
    for url in queues.values():
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        sns.subscribe(
            TopicArn=topic_arn, Protocol="sqs", Endpoint=arn, Attributes={"RawMessageDelivery": "true"}
        )
    return queues


def bodies(sqs: Any, url: str) -> list[str]:
    found: list[str] = []
    while batch := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
        for message in batch:
            found.append(message["Body"])
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return found


def test_a_repeat_within_five_minutes_reaches_no_subscriber(clients: tuple[Any, Any, SnsFaultProxy]) -> None:
    sns, sqs, proxy = clients
    topic_arn = sns.create_topic(Name="x-events.fifo", Attributes=EVENTS_TOPIC_ATTRIBUTES)["TopicArn"]
    queues = subscribed_queues(sns, sqs, topic_arn)

    def publish(body: str, dedup: str) -> str:
        answer = sns.publish(
            TopicArn=topic_arn, Message=body, MessageGroupId="chat:1", MessageDeduplicationId=dedup
        )
        message_id: str = answer["MessageId"]
        return message_id

    first = publish("update 1", "telegram:bot:1")
    # Telegram resends the same update (another request, the same update id).
    assert publish("update 1 (resent)", "telegram:bot:1") == first
    publish("update 2", "telegram:bot:2")

    for url in queues.values():
        # A standard queue too: moto itself would have delivered the repeat there.
        assert bodies(sqs, url) == ["update 1", "update 2"]
    assert proxy.deduplicated == 1


def test_after_the_window_the_same_id_is_published_again(
    clients: tuple[Any, Any, SnsFaultProxy], monkeypatch: pytest.MonkeyPatch
) -> None:
    sns, sqs, _ = clients
    topic_arn = sns.create_topic(Name="x-events.fifo", Attributes=EVENTS_TOPIC_ATTRIBUTES)["TopicArn"]
    queues = subscribed_queues(sns, sqs, topic_arn)
    now = [1000.0]
    monkeypatch.setattr(sns_proxy.time, "monotonic", lambda: now[0])

    sns.publish(TopicArn=topic_arn, Message="a", MessageGroupId="g", MessageDeduplicationId="d")
    now[0] += sns_proxy.FIFO_DEDUPLICATION_SECONDS - 1
    sns.publish(
        TopicArn=topic_arn,
        Message="a again, inside the window",
        MessageGroupId="g",
        MessageDeduplicationId="d",
    )
    now[0] += 2
    sns.publish(
        TopicArn=topic_arn,
        Message="a again, after the window",
        MessageGroupId="g",
        MessageDeduplicationId="d",
    )

    assert bodies(sqs, queues["standard"]) == ["a", "a again, after the window"]


def test_a_failed_publish_is_not_remembered(clients: tuple[Any, Any, SnsFaultProxy]) -> None:
    """A publish that did not reach SNS leaves its id free: the sender's retry goes through."""
    sns, sqs, proxy = clients
    topic_arn = sns.create_topic(Name="x-events.fifo", Attributes=EVENTS_TOPIC_ATTRIBUTES)["TopicArn"]
    queues = subscribed_queues(sns, sqs, topic_arn)
    proxy.add_faults({"fail_next": 1, "status": 400, "match": "Publish"})

    with pytest.raises(sns.exceptions.InvalidParameterException):
        sns.publish(TopicArn=topic_arn, Message="m", MessageGroupId="g", MessageDeduplicationId="d")
    sns.publish(TopicArn=topic_arn, Message="m", MessageGroupId="g", MessageDeduplicationId="d")

    assert bodies(sqs, queues["fifo"]) == ["m"]


def test_copies_published_at_the_same_moment_reach_subscribers_once(
    clients: tuple[Any, Any, SnsFaultProxy],
) -> None:
    """Telegram's resend can race the first delivery: SNS still keeps one."""
    from concurrent.futures import ThreadPoolExecutor

    sns, sqs, proxy = clients
    topic_arn = sns.create_topic(Name="x-events.fifo", Attributes=EVENTS_TOPIC_ATTRIBUTES)["TopicArn"]
    queues = subscribed_queues(sns, sqs, topic_arn)

    def publish(copy: int) -> str:
        answer = sns.publish(
            TopicArn=topic_arn,
            Message="the update",
            MessageGroupId="chat:1",
            MessageDeduplicationId="telegram:bot:9",
        )
        message_id: str = answer["MessageId"]
        return message_id

    with ThreadPoolExecutor(max_workers=8) as pool:
        message_ids = set(pool.map(publish, range(8)))

    assert len(message_ids) == 1  # every copy answered with the first one's id
    assert bodies(sqs, queues["standard"]) == ["the update"]
    assert proxy.deduplicated == 7


@pytest.mark.usefixtures("fake_credentials")
def test_the_repeat_the_topic_drops_is_explained_as_dropped() -> None:
    heard: list[Publish] = []
    with serialized_moto_server() as moto_url:
        proxy = SnsFaultProxy(upstream=lambda: moto_url, on_publish=heard.extend).start()
        try:
            sns = boto3.client("sns", endpoint_url=proxy.url)
            topic_arn = sns.create_topic(Name="x-events.fifo", Attributes=EVENTS_TOPIC_ATTRIBUTES)["TopicArn"]
            attributes = {"source": {"DataType": "String", "StringValue": "telegram"}}
            for _ in range(2):  # Telegram resends the update
                sns.publish(
                    TopicArn=topic_arn,
                    Message='{"event_id": "telegram:bot:7"}',
                    MessageAttributes=attributes,
                    MessageGroupId="chat:1",
                    MessageDeduplicationId="telegram:bot:7",
                )
        finally:
            proxy.stop()

    assert [p.deduplicated for p in heard] == [False, True]
    line = explain(heard[1], enabled({}))
    assert line.startswith(
        "event telegram:bot:7 (telegram ?) -> no consumer: a repeat the FIFO topic dropped"
    )
