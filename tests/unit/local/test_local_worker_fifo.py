"""The local SQS poller on a FIFO queue, and a test's consumer declaration reaching its worker.

Oracle for the record: Powertools' SQS model and its FIFO processor, which reads the group from
the record's `attributes.MessageGroupId` as Lambda passes it.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.parser.models import SqsModel
from moto import mock_aws

from local.resources import FIFO_QUEUE_ATTRIBUTES
from local.sqs_poller import SqsPoller, sqs_record
from local.worker_process import LOCAL_CONSUMER_ENV, apply_local_consumer, consumer_from_json, consumer_json
from pipeline import registry, worker
from pipeline.registry import CONSUMERS, RetryPolicy, by_name

REGION = "eu-central-1"


@pytest.fixture
def fifo_messages(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[list[dict[str, Any]], str]]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        sqs = boto3.client("sqs", region_name=REGION)
        url = sqs.create_queue(QueueName="autoreply.fifo", Attributes=FIFO_QUEUE_ATTRIBUTES)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        for n in (1, 2):
            sqs.send_message(
                QueueUrl=url,
                MessageBody=f"update {n}",
                MessageGroupId="telegram:b:chat:7",
                MessageDeduplicationId=f"d{n}",
            )
        messages = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        )["Messages"]
        yield messages, arn


def test_a_fifo_record_carries_its_group_sequence_and_dedup_id_as_lambdas_does(
    fifo_messages: tuple[list[dict[str, Any]], str],
) -> None:
    messages, arn = fifo_messages
    records = [sqs_record(message, arn, REGION) for message in messages]
    SqsModel.model_validate({"Records": records})
    assert [r["body"] for r in records] == ["update 1", "update 2"]
    for record, dedup in zip(records, ("d1", "d2"), strict=True):
        attributes = SQSRecord(record).attributes
        assert attributes.message_group_id == "telegram:b:chat:7"
        assert attributes.message_deduplication_id == dedup
        assert attributes.sequence_number


def test_the_poller_names_each_receive_attempt_on_a_fifo_queue_only() -> None:
    def poller(url: str) -> SqsPoller:
        instance = SqsPoller.__new__(SqsPoller)
        instance.args = argparse.Namespace(queue_url=url)
        return instance

    fifo = poller("http://127.0.0.1:1/123456789012/p-autoreply.fifo")
    first, second = fifo.fifo_receive(), fifo.fifo_receive()
    assert set(first) == {"ReceiveRequestAttemptId"} and first != second
    assert poller("http://127.0.0.1:1/123456789012/p-store").fifo_receive() == {}


ORDERED = dataclasses.replace(
    by_name("autoreply"),
    ordered=True,
    retry=RetryPolicy(max_receive_count=5, base_delay_seconds=1, max_delay_seconds=2),
)


@pytest.mark.parametrize("consumer", [*CONSUMERS, ORDERED], ids=lambda c: f"{c.name}{'-ordered' * c.ordered}")
def test_a_consumer_declaration_survives_the_trip_to_its_process(consumer: registry.Consumer) -> None:
    assert consumer_from_json(consumer_json(consumer)) == consumer


def test_the_worker_reads_the_runtimes_declaration_not_the_registrys(monkeypatch: pytest.MonkeyPatch) -> None:
    # Both restored after the test (the worker module is imported above, so it is patched too).
    monkeypatch.setattr(registry, "by_name", registry.by_name)
    monkeypatch.setattr(worker, "by_name", worker.by_name)

    assert apply_local_consumer({}) is None
    assert apply_local_consumer({LOCAL_CONSUMER_ENV: consumer_json(ORDERED)}) == ORDERED

    assert registry.by_name("autoreply") == ORDERED
    assert registry.by_name("store") == next(c for c in CONSUMERS if c.name == "store")
    assert worker.by_name("autoreply").ordered is True
