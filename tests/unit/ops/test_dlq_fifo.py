"""dlq list / peek / redrive on an ordered consumer's FIFO DLQ: the chat (message group) is shown,
and a redrive keeps each message's group and order under a new deduplication id."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID
from moto.sqs.models import Queue, sqs_backends

from local.resources import FIFO_QUEUE_ATTRIBUTES
from ops.outputs import OutputKey
from tests.unit.ops.support import Deployed, create_resources, create_stack, envelope_body

ORDERED = "autoreply"


@pytest.fixture
def deployed() -> Iterator[Deployed]:
    """The stack, with `autoreply` ordered: its queue and DLQ are FIFO queues."""
    with mock_aws():
        resources = create_resources()
        sqs = boto3.client("sqs")
        for urls, key, name in (
            (resources.queue_urls, OutputKey.queue_url(ORDERED), f"pipeline-{ORDERED}.fifo"),
            (resources.dlq_urls, OutputKey.dlq_url(ORDERED), f"pipeline-{ORDERED}-dlq.fifo"),
        ):
            urls[ORDERED] = sqs.create_queue(QueueName=name, Attributes=FIFO_QUEUE_ATTRIBUTES)["QueueUrl"]
            resources.outputs[key] = urls[ORDERED]
        create_stack(resources)
        yield resources


def dead_letter_in_chat(deployed: Deployed, update_id: int, chat: int) -> None:
    """What the worker sends to a FIFO DLQ: in the record's group, deduplicated on its message id."""
    boto3.client("sqs").send_message(
        QueueUrl=deployed.dlq_urls[ORDERED],
        MessageBody=envelope_body(update_id),
        MessageAttributes={"dead_letter_reason": {"DataType": "String", "StringValue": "retries exhausted"}},
        MessageGroupId=f"telegram:default:chat:{chat}",
        MessageDeduplicationId=f"message-{update_id}",
    )


def test_list_names_the_chats_held_in_a_fifo_dlq(deployed: Deployed, run) -> None:
    dead_letter_in_chat(deployed, 1, chat=42)
    dead_letter_in_chat(deployed, 2, chat=7)
    unsampled = run("dlq", "list")

    result = run("dlq", "list", "--sample")

    assert result.code == 0, result.err
    header, *lines = result.out.split("\n\n")[0].splitlines()
    assert header.split()[-1] == "groups"
    table = {line.split()[0]: line.split() for line in lines}
    assert table[ORDERED][1] == "2"
    assert table[ORDERED][-1] == "telegram:default:chat:42,telegram:default:chat:7"
    assert table["store"][-1] == "-"  # a standard DLQ has no groups
    # Without --sample nothing is received: the chats are not known.
    assert rows_of(unsampled.out)[ORDERED][-1] == "?"


def rows_of(output: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split() for line in output.split("\n\n")[0].splitlines()[1:]}


def test_peek_shows_each_messages_chat(deployed: Deployed, run) -> None:
    dead_letter_in_chat(deployed, 3, chat=42)

    result = run("dlq", "peek", ORDERED)

    assert "  message_group: telegram:default:chat:42" in result.out.splitlines()


def test_redrive_keeps_group_and_order_under_a_new_deduplication_id(deployed: Deployed, run) -> None:
    for update_id in (10, 11, 12):
        dead_letter_in_chat(deployed, update_id, chat=42)
    dead_letter_in_chat(deployed, 20, chat=7)

    result = run("dlq", "redrive", "--yes", ORDERED)

    assert result.code == 0, result.err
    assert "moved 4 message(s)" in result.out
    sqs = boto3.client("sqs")
    moved = []
    while batch := sqs.receive_message(
        QueueUrl=deployed.queue_urls[ORDERED], MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
    ).get("Messages", []):
        moved.extend(batch)
        for message in batch:
            sqs.delete_message(QueueUrl=deployed.queue_urls[ORDERED], ReceiptHandle=message["ReceiptHandle"])
    by_group: dict[str, list[str]] = {}
    for message in moved:
        by_group.setdefault(message["Attributes"]["MessageGroupId"], []).append(message["Body"])
        # Not the id it was sent to the DLQ under: the queue would drop it within 5 minutes.
        assert not message["Attributes"]["MessageDeduplicationId"].startswith("message-")
    assert by_group == {
        "telegram:default:chat:42": [envelope_body(10), envelope_body(11), envelope_body(12)],
        "telegram:default:chat:7": [envelope_body(20)],
    }
    assert sqs.receive_message(QueueUrl=deployed.dlq_urls[ORDERED]).get("Messages", []) == []


def test_a_redrive_of_records_dead_lettered_again_at_once_moves_what_the_dlq_held_and_ends(
    deployed: Deployed, run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the chaos campaign (seed 7): SMS the gateway refused for good go back to the DLQ
    as soon as they are redriven, and a move until the DLQ is empty never ended. A move task moves
    the messages there when it starts (ApproximateNumberOfMessagesToMove); so does this one."""
    for update_id in (10, 11, 12):
        dead_letter_in_chat(deployed, update_id, chat=42)
    source, dlq = (
        url.rsplit("/", 1)[1] for url in (deployed.queue_urls[ORDERED], deployed.dlq_urls[ORDERED])
    )
    add_message = Queue.add_message
    again: list[str] = []

    def consumer_dead_letters_it_again(self: Queue, message: Any) -> None:
        if self.name != source:
            add_message(self, message)
            return
        again.append(message.body)
        assert len(again) <= 30, "the redrive goes on moving what it moved already"
        dead_letters = next(b for b in sqs_backends[DEFAULT_ACCOUNT_ID].values() if dlq in b.queues)
        add_message(dead_letters.queues[dlq], message)

    monkeypatch.setattr(Queue, "add_message", consumer_dead_letters_it_again)

    result = run("dlq", "redrive", "--yes", ORDERED)

    assert result.code == 0, result.err
    assert "moved 3 message(s)" in result.out
    assert sorted(again) == sorted(envelope_body(n) for n in (10, 11, 12))
