"""An ordered consumer's worker on a FIFO queue (moto): a failure stops only its own group.

Powertools' FIFO processor skips the rest of a failed record's group in the batch; the worker
releases those records with the failed one (so the group comes back whole, in order), counts
only real attempts against them, and dead-letters into the FIFO DLQ in the record's group.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from pipeline import aws
from pipeline.envelope import Envelope, fifo_keys
from pipeline.errors import PermanentError, TransientError
from pipeline.registry import Consumer, RetryPolicy, by_name
from pipeline.worker import ATTEMPTS_KEY, ConsumerWorker
from tests.unit.consumer_support import (
    JOURNAL_TABLE,
    ConsumerQueues,
    Deploy,
    FakeLambdaContext,
    Output,
    Published,
    failed_ids,
    lambda_handler_of,
    telegram_envelope,
    telegram_update,
)

pytestmark = pytest.mark.usefixtures("moto_aws")

# No backoff: a retried group is back at once, so a test can drive every attempt.
ORDERED = replace(
    by_name("store"),
    ordered=True,
    batching_window_seconds=0,  # a FIFO event source takes none
    retry=RetryPolicy(max_receive_count=5, base_delay_seconds=0, max_delay_seconds=0),
)


@dataclass
class Spy:
    """Records each call; fails an event id with the next exception of its list."""

    failures: dict[str, list[Exception]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)

    def __call__(self, envelope: Envelope) -> dict[str, Any]:
        self.calls.append(envelope.event_id)
        pending = self.failures.get(envelope.event_id)
        if pending:
            raise pending.pop(0)
        return {"done": envelope.event_id}


def update_in_chat(chat_id: int, update_id: int) -> Published:
    update = telegram_update("private_start")
    update["update_id"] = update_id
    update["message"]["chat"]["id"] = chat_id
    update["message"]["from"]["id"] = chat_id
    return telegram_envelope(update)


def run(
    worker: ConsumerWorker, queues: ConsumerQueues, context: FakeLambdaContext
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One poll and invocation, then the event source mapping's deletes."""
    event = queues.receive_event()
    response = lambda_handler_of(worker)(event, context)
    queues.acknowledge(event, response)
    return event, response


def attempts_item(consumer: Consumer, message_id: str) -> dict[str, Any] | None:
    key = ATTEMPTS_KEY.format(consumer=consumer.name, message_id=message_id)
    item: dict[str, Any] | None = (
        aws.client("dynamodb").get_item(TableName=JOURNAL_TABLE, Key={"id": {"S": key}}).get("Item")
    )
    return item


def test_a_consumer_declared_ordered_gets_the_fifo_processor(deploy: Deploy) -> None:
    from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor

    ordered, plain = ConsumerWorker(Spy(), ORDERED), ConsumerWorker(Spy(), by_name("store"))
    deploy(ordered, ORDERED)
    deploy(plain, "store")
    assert isinstance(ordered.processor, SqsFifoPartialProcessor)
    assert not isinstance(plain.processor, SqsFifoPartialProcessor)


def test_a_failure_in_one_chat_skips_only_that_chats_later_records(
    deploy: Deploy, lambda_context: FakeLambdaContext
) -> None:
    spy = Spy()
    worker = ConsumerWorker(spy, ORDERED)
    queues = deploy(worker, ORDERED)
    a1, b1, a2, b2, a3 = (update_in_chat(c, u) for c, u in ((1, 11), (2, 21), (1, 12), (2, 22), (1, 13)))
    for item in (a1, b1, a2, b2, a3):
        queues.send(item)
    spy.failures[a1.envelope.event_id] = [TransientError("Telegram is down")]

    event, response = run(worker, queues, lambda_context)

    ids = {r["body"]: r["messageId"] for r in event["Records"]}
    assert len(event["Records"]) == 5
    # A's first failed: A's later two never ran; B went on in order.
    assert spy.calls == [a1.envelope.event_id, b1.envelope.event_id, b2.envelope.event_id]
    assert failed_ids(response) == [ids[a1.body], ids[a2.body], ids[a3.body]]
    assert worker.counts["held"] == 2
    # Skips are not attempts: only the failed record has a counter.
    assert attempts_item(ORDERED, ids[a1.body])["attempts"] == {"N": "1"}  # type: ignore[index]
    assert attempts_item(ORDERED, ids[a2.body]) is None

    # The held records came back with the failed one (no backoff here), not after the queue's
    # visibility timeout, and chat 1 resumes in Telegram's order.
    run(worker, queues, lambda_context)
    assert spy.calls[3:] == [a1.envelope.event_id, a2.envelope.event_id, a3.envelope.event_id]
    assert queues.approximate_counts() == (0, 0)


def test_a_poison_update_holds_its_chat_until_dead_lettered_then_the_chat_goes_on(
    deploy: Deploy, lambda_context: FakeLambdaContext, output: Any
) -> None:
    spy = Spy()
    worker = ConsumerWorker(spy, ORDERED)
    queues = deploy(worker, ORDERED)
    logs: Output = output(worker)
    poison, after, other = update_in_chat(7, 71), update_in_chat(7, 72), update_in_chat(8, 81)
    for item in (poison, after, other):
        queues.send(item)
    attempts = ORDERED.retry.max_receive_count
    spy.failures[poison.envelope.event_id] = [TransientError("502 from the Bot API")] * attempts
    # The next one of the chat fails once after the poison is gone: by then it has been
    # received `attempts` times (skipped), which must not dead-letter it.
    spy.failures[after.envelope.event_id] = [TransientError("429")]

    for _ in range(attempts):
        run(worker, queues, lambda_context)
        # Until the poison is dead-lettered, its chat's next update never runs.
        if spy.calls.count(poison.envelope.event_id) < attempts:
            assert after.envelope.event_id not in spy.calls
    assert spy.calls.count(other.envelope.event_id) == 1  # the other chat was never held

    # Dead-lettered at the last attempt; the chat went on at once, and its next update, received
    # as often as the poison, is retried (its first real attempt), not dead-lettered.
    assert spy.calls.count(after.envelope.event_id) == 1
    run(worker, queues, lambda_context)
    assert spy.calls.count(after.envelope.event_id) == 2
    assert queues.approximate_counts() == (0, 0)

    sqs = aws.client("sqs")
    [letter] = sqs.receive_message(
        QueueUrl=queues.dlq_url, MessageSystemAttributeNames=["All"], MessageAttributeNames=["All"]
    )["Messages"]
    chat = fifo_keys(poison.envelope).group_id
    assert letter["Attributes"]["MessageGroupId"] == chat == "telegram:default:chat:7"
    assert json.loads(letter["Body"])["event_id"] == poison.envelope.event_id
    reason = letter["MessageAttributes"]["dead_letter_reason"]["StringValue"]
    assert reason.startswith(f"retries exhausted after {attempts} attempts: 502 from the Bot API")
    [line] = logs.logs("record sent to the DLQ")
    assert (line["message_group"], line["reason"]) == (chat, reason)


def test_a_permanent_error_dead_letters_at_once_in_its_group_and_does_not_hold_the_chat(
    deploy: Deploy, lambda_context: FakeLambdaContext
) -> None:
    worker = ConsumerWorker(Spy(), ORDERED)
    dead_letter_the_first_of_two(worker, deploy(worker, ORDERED), lambda_context, chat=3)


def dead_letter_the_first_of_two(
    worker: ConsumerWorker, queues: Any, lambda_context: FakeLambdaContext, chat: int
) -> None:
    """Two updates of one chat, the first refused for good: it is dead-lettered in the chat's
    group, the second is processed in the same batch, and nothing fails."""
    spy = worker.process
    assert isinstance(spy, Spy)
    bad, good = update_in_chat(chat, chat * 10 + 1), update_in_chat(chat, chat * 10 + 2)
    queues.send(bad)
    queues.send(good)
    spy.failures[bad.envelope.event_id] = [PermanentError("chat not found")]

    _, response = run(worker, queues, lambda_context)

    assert failed_ids(response) == []
    assert spy.calls == [bad.envelope.event_id, good.envelope.event_id]
    [letter] = aws.client("sqs").receive_message(
        QueueUrl=queues.dlq_url, MessageSystemAttributeNames=["All"]
    )["Messages"]
    assert letter["Attributes"]["MessageGroupId"] == f"telegram:default:chat:{chat}"


@dataclass(frozen=True)
class AlarmInbox:
    """The alarm topic and a queue subscribed to it (not raw: each body is the SNS notification,
    with its Subject), as an e-mail subscriber would read it."""

    topic_arn: str
    queue_url: str

    def notices(self) -> list[dict[str, Any]]:
        messages = aws.client("sqs").receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10)
        return [json.loads(message["Body"]) for message in messages.get("Messages", [])]


@pytest.fixture
def alarm_inbox(monkeypatch: pytest.MonkeyPatch) -> AlarmInbox:
    """Set before `deploy`, which reads the worker's environment."""
    sns, sqs = aws.client("sns"), aws.client("sqs")
    topic_arn = sns.create_topic(Name="alarms")["TopicArn"]
    queue_url = sqs.create_queue(QueueName="alarm-inbox")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]
    sns.subscribe(TopicArn=topic_arn, Protocol="sqs", Endpoint=queue_arn["QueueArn"])
    monkeypatch.setenv("ALARM_TOPIC_ARN", topic_arn)
    return AlarmInbox(topic_arn, queue_url)


def test_each_dead_letter_publishes_a_notice_naming_its_chat_with_phones_masked(
    deploy: Deploy, lambda_context: FakeLambdaContext, alarm_inbox: AlarmInbox
) -> None:
    spy = Spy()
    worker = ConsumerWorker(spy, ORDERED)
    queues = deploy(worker, ORDERED)
    assert worker.settings.alarm_topic_arn == alarm_inbox.topic_arn
    first, second, fine = update_in_chat(42, 421), update_in_chat(43, 431), update_in_chat(42, 422)
    for item in (first, second, fine):
        queues.send(item)
    spy.failures[first.envelope.event_id] = [PermanentError("user +375291234567 blocked the bot")]
    spy.failures[second.envelope.event_id] = [PermanentError("message is too long")]

    _, response = run(worker, queues, lambda_context)

    assert failed_ids(response) == []
    assert worker.counts["dead_lettered"] == 2
    notices = {notice["Subject"]: notice["Message"] for notice in alarm_inbox.notices()}
    # One per dead letter, not only the first (the DLQ alarm's once).
    assert set(notices) == {
        f"{ORDERED.name}: chat telegram:default:chat:42 dead-lettered update {first.envelope.event_id}",
        f"{ORDERED.name}: chat telegram:default:chat:43 dead-lettered update {second.envelope.event_id}",
    }
    message = notices[next(s for s in notices if "chat:42" in s)]
    assert f"consumer: {ORDERED.name}" in message
    assert "chat (message group): telegram:default:chat:42" in message
    assert f"event id: {first.envelope.event_id}" in message
    assert f"update type: {first.envelope.type}" in message
    assert "reason: user +37529*****67 blocked the bot" in message
    assert "1234567" not in message
    # Never the update itself.
    assert first.body not in message and "private_start" not in message
    assert json.dumps(first.envelope.payload) not in message


def test_a_failed_notice_still_dead_letters_the_record_and_logs_a_warning(
    deploy: Deploy, lambda_context: FakeLambdaContext, output: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A topic that does not exist (deleted, or the role lost sns:Publish): the publish fails.
    monkeypatch.setenv("ALARM_TOPIC_ARN", "arn:aws:sns:eu-central-1:123456789012:gone")
    worker = ConsumerWorker(Spy(), ORDERED)
    queues = deploy(worker, ORDERED)
    logs: Output = output(worker)

    dead_letter_the_first_of_two(worker, queues, lambda_context, chat=5)

    assert queues.approximate_counts() == (0, 0)
    [warning] = logs.logs("could not publish the dead letter's notice (the DLQ alarm still fires)")
    assert warning["level"] == "WARNING"
    assert warning["message_group"] == "telegram:default:chat:5"
    assert "NotFound" in warning["error"]


def test_the_ordered_queue_allows_the_receives_skipping_adds() -> None:
    assert ORDERED.redrive_max_receive_count == ORDERED.retry.max_receive_count * ORDERED.batch_size
    assert by_name("store").redrive_max_receive_count == by_name("store").retry.max_receive_count


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"batch_size": 20, "batching_window_seconds": 1}, "batch_size at most 10"),
        ({"batching_window_seconds": 2}, "no batching window"),
        ({"retry": RetryPolicy(max_receive_count=200)}, "above SQS's 1000"),
    ],
)
def test_the_registry_refuses_what_lambda_or_sqs_would_for_an_ordered_consumer(
    changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        replace(by_name("store"), ordered=True, **{"batching_window_seconds": 0, **changes})
    # The same settings are fine unordered (except the receive bound, which scales with ordering).
    if "retry" not in changes:
        replace(by_name("store"), **changes)


def throttle_the_attempt_counter(monkeypatch: pytest.MonkeyPatch, message_id: str) -> list[str]:
    """DynamoDB refuses every write of this message's `attempts` item (the idempotency records
    and other counters still go through); returns the keys refused."""
    from botocore.exceptions import ClientError

    dynamodb = aws.client("dynamodb")
    original = dynamodb.update_item
    refused: list[str] = []

    def update_item(**kwargs: Any) -> Any:
        key = kwargs["Key"]["id"]["S"]
        if key == ATTEMPTS_KEY.format(consumer=ORDERED.name, message_id=message_id):
            refused.append(key)
            error = {"Code": "ProvisionedThroughputExceededException", "Message": "Rate exceeded"}
            raise ClientError({"Error": error}, "UpdateItem")
        return original(**kwargs)

    monkeypatch.setattr(dynamodb, "update_item", update_item)
    return refused


def test_a_held_record_is_not_dead_lettered_at_its_first_failure_when_its_counter_is_throttled(
    deploy: Deploy, lambda_context: FakeLambdaContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its receive count is all held receives: no stand-in for the attempts it never had."""
    spy = Spy()
    worker = ConsumerWorker(spy, ORDERED)
    queues = deploy(worker, ORDERED)
    poison, after = update_in_chat(7, 71), update_in_chat(7, 72)
    queues.send(poison)
    queues.send(after)
    attempts = ORDERED.retry.max_receive_count
    spy.failures[poison.envelope.event_id] = [TransientError("502 from the Bot API")] * attempts
    spy.failures[after.envelope.event_id] = [TransientError("429")]
    event, _ = run(worker, queues, lambda_context)
    ids = {json.loads(r["body"])["event_id"]: r["messageId"] for r in event["Records"]}
    refused = throttle_the_attempt_counter(monkeypatch, ids[after.envelope.event_id])

    # The poison is dead-lettered at its last attempt; in the same batch `after`, received as
    # often, fails its first attempt, which cannot be counted.
    for _ in range(attempts - 1):
        run(worker, queues, lambda_context)
    assert spy.calls.count(after.envelope.event_id) == 1 and len(refused) == 1
    assert worker.last_outcome is not None and worker.last_outcome.status == "retry"
    [letter] = queues.dead_letters()
    assert json.loads(letter["body"])["event_id"] == poison.envelope.event_id

    run(worker, queues, lambda_context)  # retried, and processed
    assert spy.calls.count(after.envelope.event_id) == 2
    assert queues.approximate_counts() == (0, 0)
    assert len(queues.dead_letters()) == 1


def test_a_record_whose_counter_stays_unwritable_is_dead_lettered_at_the_redrive_count(
    deploy: Deploy, lambda_context: FakeLambdaContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No endless loop: uncounted retries stop where SQS's redrive would, with the reason."""
    consumer = replace(ORDERED, batch_size=2)
    spy = Spy()
    worker = ConsumerWorker(spy, consumer)
    queues = deploy(worker, consumer)
    item = update_in_chat(9, 91)
    queues.send(item)
    limit = consumer.redrive_max_receive_count
    spy.failures[item.envelope.event_id] = [TransientError("502 from the Bot API")] * (limit + 1)
    event, _ = run(worker, queues, lambda_context)
    throttle_the_attempt_counter(monkeypatch, event["Records"][0]["messageId"])

    for _ in range(limit - 1):
        assert queues.dead_letters() == []
        run(worker, queues, lambda_context)
    assert spy.calls.count(item.envelope.event_id) == limit
    assert queues.approximate_counts() == (0, 0)
    [letter] = queues.dead_letters()
    reason = letter["attributes"]["dead_letter_reason"]
    assert reason == f"retries exhausted after {limit} receives (attempts not counted): 502 from the Bot API"
