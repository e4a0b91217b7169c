"""Two workers racing on one event: exactly one side effect, the loser retries and later skips.

The race runs against a moto server on loopback that answers one request at a time
(`tests.support.moto_server`), as DynamoDB's atomic conditional writes require.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from pipeline import aws
from pipeline.envelope import Envelope
from pipeline.registry import RetryPolicy, by_name
from pipeline.worker import ConsumerWorker
from tests.support.moto_server import serialized_moto_server
from tests.unit.consumer_support import (
    Deploy,
    FakeLambdaContext,
    create_tables,
    failed_ids,
    journal_items,
    telegram_envelope,
    telegram_update,
)

PROCESS_SECONDS = 0.3


@pytest.fixture
def moto_server(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with serialized_moto_server() as url:
        monkeypatch.setenv("AWS_ENDPOINT_URL", url)
        aws.reset_clients()
        create_tables()
        yield url


class SlowSpy:
    """A `process` slow enough for two invocations to overlap; counts its side effects."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[str] = []
        self.finished_at: float | None = None

    def __call__(self, envelope: Envelope) -> dict[str, Any]:
        with self.lock:
            self.calls.append(envelope.event_id)
        time.sleep(PROCESS_SECONDS)
        self.finished_at = time.monotonic()
        return {"done": envelope.event_id}


def test_concurrent_deliveries_of_one_event_have_one_side_effect(moto_server: str, deploy: Deploy) -> None:
    assert aws.client("sqs").meta.endpoint_url == moto_server
    store = by_name("store")
    # The loser comes back after the consumer's timeout (any claim has run out by then): 2 s, so
    # the test can watch it come back.
    consumer = replace(store, timeout_seconds=2, retry=RetryPolicy(store.retry.max_receive_count, 1, 1))
    spy = SlowSpy()
    # Two Lambda execution environments of the same consumer, on the same queue.
    workers = [ConsumerWorker(spy, consumer=consumer), ConsumerWorker(spy, consumer=consumer)]
    queues = deploy(workers[0], consumer)
    deploy(workers[1], consumer, share=queues)
    item = telegram_envelope(telegram_update("private_start"))
    message_ids = [queues.send(item), queues.send(item)]  # SNS delivered the update twice
    events = [queues.receive_event(max_messages=1), queues.receive_event(max_messages=1)]
    assert sorted(e["Records"][0]["messageId"] for e in events) == sorted(message_ids)

    start = threading.Barrier(2)
    responses: dict[int, dict[str, Any]] = {}
    returned_at: dict[int, float] = {}

    def invoke(index: int) -> None:
        start.wait()
        responses[index] = workers[index].handle(events[index], FakeLambdaContext())
        returned_at[index] = time.monotonic()

    threads = [threading.Thread(target=invoke, args=(index,)) for index in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert spy.calls == [item.envelope.event_id]
    [loser] = [i for i in (0, 1) if failed_ids(responses[i])]
    winner = 1 - loser
    assert responses[winner] == {"batchItemFailures": []}
    loser_message = events[loser]["Records"][0]["messageId"]
    assert failed_ids(responses[loser]) == [loser_message]
    # The loser saw the event in progress: it returned while the winner was still processing.
    assert spy.finished_at is not None and returned_at[loser] < spy.finished_at
    outcome = workers[loser].last_outcome
    assert outcome is not None and outcome.reason == "event in progress elsewhere"
    assert outcome.delay_seconds == consumer.timeout_seconds
    for index in (0, 1):
        queues.acknowledge(events[index], responses[index])

    time.sleep(consumer.timeout_seconds + 0.1)  # the loser's retry delay
    again = queues.receive_event()
    assert [r["messageId"] for r in again["Records"]] == [loser_message]
    assert again["Records"][0]["attributes"]["ApproximateReceiveCount"] == "2"
    response = workers[loser].handle(again, FakeLambdaContext())
    queues.acknowledge(again, response)

    assert response == {"batchItemFailures": []}
    outcome = workers[loser].last_outcome
    assert outcome is not None and outcome.status == "duplicate"
    assert spy.calls == [item.envelope.event_id]
    assert [i["status"]["S"] for i in journal_items()] == ["COMPLETED"]
    assert queues.approximate_counts() == (0, 0)
    assert queues.dead_letters() == []


def test_chaos_seed_3_a_claim_whose_answer_dynamodb_lost_is_retried_after_it_runs_out(
    moto_server: str, deploy: Deploy
) -> None:
    """Found by `python -m local chaos --seed 3 --events 400 --fault-rate 0.2`: DynamoDB took the
    worker's idempotency claim (PutItem) and lost the answer; botocore sent the PutItem again and
    found the record: "event in progress elsewhere", though the claim was this invocation's own.
    Retried after 1-4 s, the record spent its 8 attempts in 26 s against a claim lasting the
    function's 30 s timeout and was dead-lettered unprocessed. It must come back once the claim
    has run out, then be processed."""
    crm = by_name("crm")
    consumer = replace(crm, timeout_seconds=2, retry=RetryPolicy(8, 1, 4))
    spy = SlowSpy()
    worker = ConsumerWorker(spy, consumer=consumer)
    queues = deploy(worker, consumer)
    queues.send(telegram_envelope(telegram_update("private_start")))
    dynamodb = aws.client("dynamodb")
    real_put_item = dynamodb.put_item

    def put_item_answer_lost(**request: Any) -> Any:
        real_put_item(**request)  # DynamoDB wrote the claim; the answer never arrived,
        return real_put_item(**request)  # so botocore sends the same request again

    # As Lambda's: the claim lasts what is left of the invocation, at most the timeout.
    context = FakeLambdaContext()
    context.get_remaining_time_in_millis = lambda: consumer.timeout_seconds * 1000  # type: ignore[method-assign]
    dynamodb.put_item = put_item_answer_lost
    event = queues.receive_event()
    response = worker.handle(event, context)
    dynamodb.put_item = real_put_item
    queues.acknowledge(event, response)

    outcome = worker.last_outcome
    assert outcome is not None and outcome.status == "retry", outcome
    assert outcome.reason == "event in progress elsewhere" and spy.calls == []
    # Not before the claim has run out: then the next attempt finds it expired and processes.
    assert outcome.delay_seconds is not None and outcome.delay_seconds >= consumer.timeout_seconds
    time.sleep(consumer.timeout_seconds + 0.1)
    again = queues.receive_event()
    assert worker.handle(again, FakeLambdaContext()) == {"batchItemFailures": []}
    assert len(spy.calls) == 1
