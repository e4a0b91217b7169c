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
    # Retry the loser after 1 s so the test can watch it come back.
    consumer = replace(store, retry=RetryPolicy(store.retry.max_receive_count, 1, 1))
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
    for index in (0, 1):
        queues.acknowledge(events[index], responses[index])

    time.sleep(1.1)  # the loser's retry delay
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
