"""ConsumerWorker outcomes under moto: partial batch failures, retry delays, dead-lettering, redrive."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any

import pytest

from pipeline import aws
from pipeline.envelope import Envelope
from pipeline.errors import PermanentError, TransientError
from pipeline.registry import by_name
from pipeline.retention import IDEMPOTENCY_TTL_SECONDS
from pipeline.validation import Invalid
from pipeline.worker import ConsumerWorker, WorkerSettings
from tests.unit.consumer_support import (
    Deploy,
    FakeLambdaContext,
    Published,
    conversation_items,
    failed_ids,
    journal_items,
    lambda_handler_of,
    telegram_envelope,
    telegram_update,
)

pytestmark = pytest.mark.usefixtures("moto_aws")


@dataclass
class Spy:
    """A consumer's `process` that records each call and fails on demand per event id."""

    failures: dict[str, Exception] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)

    def __call__(self, envelope: Envelope) -> dict[str, Any]:
        self.calls.append(envelope.event_id)
        if envelope.event_id in self.failures:
            raise self.failures[envelope.event_id]
        return {"done": envelope.event_id}


def start_update(update_id: int) -> Published:
    return telegram_envelope({**telegram_update("private_start"), "update_id": update_id})


@pytest.fixture
def visibility_changes(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every ChangeMessageVisibility call the worker makes (still sent to moto)."""
    calls: list[dict[str, Any]] = []
    sqs = aws.client("sqs")
    real = sqs.change_message_visibility

    def record(**kwargs: Any) -> Any:
        calls.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(sqs, "change_message_visibility", record)
    return calls


def test_one_failing_record_of_ten_is_the_only_one_retried(
    deploy: Deploy, lambda_context: FakeLambdaContext, visibility_changes: list[dict[str, Any]]
) -> None:
    spy = Spy()
    worker = ConsumerWorker(spy)
    queues = deploy(worker, "store")
    published = [start_update(700_000 + i) for i in range(10)]
    for item in published:
        queues.send(item)
    failing = published[4].envelope.event_id
    spy.failures[failing] = RuntimeError("database on fire")

    # Received with a 1 s visibility timeout: without the worker's change it would be back after 1 s.
    event = queues.receive_event(visibility_timeout=1)
    assert len(event["Records"]) == 10
    response = lambda_handler_of(worker)(event, lambda_context)
    queues.acknowledge(event, response)

    failing_record = next(r for r in event["Records"] if failing in r["body"])
    assert failed_ids(response) == [failing_record["messageId"]]
    assert sorted(spy.calls) == sorted(p.envelope.event_id for p in published)
    assert worker.counts == {"processed": 9, "retry": 1}
    [change] = visibility_changes
    assert change["ReceiptHandle"] == failing_record["receiptHandle"]
    # First retry of `store`: cap 2 s, equal jitter ceil(1 + uniform(0, 1)) = 2.
    assert change["VisibilityTimeout"] == 2
    time.sleep(1.2)
    assert queues.receive() == []  # past the 1 s of the receive, still hidden by the backoff
    assert queues.approximate_counts() == (0, 1)  # the 9 were deleted; the failing one waits


@pytest.mark.parametrize(("retry_after", "delay"), [(0.2, 1), (2.2, 3), (7, 7)])
def test_retry_after_from_the_remote_sets_the_visibility_to_its_ceiling(
    deploy: Deploy,
    lambda_context: FakeLambdaContext,
    visibility_changes: list[dict[str, Any]],
    retry_after: float,
    delay: int,
) -> None:
    item = start_update(700_100)
    spy = Spy({item.envelope.event_id: TransientError("429 Too Many Requests", retry_after=retry_after)})
    worker = ConsumerWorker(spy)
    queues = deploy(worker, "autoreply")
    queues.send(item)
    event = queues.receive_event()

    response = lambda_handler_of(worker)(event, lambda_context)

    assert failed_ids(response) == [event["Records"][0]["messageId"]]  # returned, not raised
    assert [c["VisibilityTimeout"] for c in visibility_changes] == [delay]
    assert worker.last_outcome is not None
    assert (worker.last_outcome.status, worker.last_outcome.delay_seconds) == ("retry", delay)
    assert worker.last_outcome.reason == "429 Too Many Requests"


def test_poison_message_ends_in_its_consumers_dlq_and_other_consumers_are_unaffected(
    deploy: Deploy, lambda_context: FakeLambdaContext, import_app: Callable[[str], ModuleType]
) -> None:
    item = start_update(700_200)
    analytics = by_name("analytics")
    # The registry's receive count; no delay between attempts so the test need not wait.
    fast = replace(analytics, retry=replace(analytics.retry, base_delay_seconds=0, max_delay_seconds=0))
    spy = Spy({item.envelope.event_id: RuntimeError("poison")})
    poisoned = ConsumerWorker(spy, consumer=fast)
    poisoned_queues = deploy(poisoned, fast)
    store = import_app("store")
    store_queues = deploy(store.worker, "store")
    for queues in (poisoned_queues, store_queues):
        queues.send(item)

    deliveries = 0
    while (event := poisoned_queues.receive_event())["Records"] and deliveries < 10:
        deliveries += 1
        poisoned_queues.acknowledge(event, lambda_handler_of(poisoned)(event, lambda_context))
    store_event = store_queues.receive_event()
    store_response = store.lambda_handler(store_event, lambda_context)
    store_queues.acknowledge(store_event, store_response)

    assert deliveries == len(spy.calls) == analytics.retry.max_receive_count
    [letter] = poisoned_queues.dead_letters()
    assert letter["body"] == item.body
    assert letter["attributes"] == {
        **item.attributes,
        "dead_letter_reason": f"retries exhausted after {deliveries} attempts: RuntimeError: poison",
        "dead_letter_consumer": "analytics",
    }
    assert poisoned_queues.approximate_counts() == (0, 0)
    assert poisoned.counts == {"retry": deliveries - 1, "dead_lettered": 1}
    # The store consumer saved the same event once; analytics left no journal record behind.
    assert store_response == {"batchItemFailures": []}
    assert [i["event_id"] for i in conversation_items()] == [item.envelope.event_id]
    assert [i["id"]["S"].split("#")[0] for i in journal_items()] == ["store"]
    assert store_queues.dead_letters() == []


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "{}",
        '{"event_id": "", "source": "telegram", "type": "message", "correlation_id": "c", '
        '"received_at": "2026-01-15T09:30:12Z", "payload": {}}',
        '{"event_id": "x", "source": "sms", "type": "message", "correlation_id": "c", '
        '"received_at": "2026-01-15T09:30:12Z", "payload": {}}',
        '{"event_id": "x", "source": "telegram", "type": "message", "correlation_id": "c", '
        '"received_at": "2026-01-15T09:30:12Z", "payload": {}, "surprise": 1}',
    ],
    ids=["not-json", "empty-object", "empty-event-id", "unknown-source", "unknown-field"],
)
def test_invalid_envelope_goes_to_the_dlq_on_first_delivery(
    deploy: Deploy, lambda_context: FakeLambdaContext, body: str
) -> None:
    spy = Spy()
    worker = ConsumerWorker(spy)
    queues = deploy(worker, "store")
    queues.send(body, {"source": "telegram"})
    event = queues.receive_event()

    response = lambda_handler_of(worker)(event, lambda_context)
    queues.acknowledge(event, response)

    assert response == {"batchItemFailures": []}
    assert spy.calls == []
    [letter] = queues.dead_letters()
    assert letter["body"] == body
    assert letter["attributes"]["dead_letter_reason"].startswith("invalid envelope (")
    assert letter["attributes"]["source"] == "telegram"
    assert queues.approximate_counts() == (0, 0)


def test_permanent_error_is_dead_lettered_at_once_and_a_redrive_processes_it_exactly_once(
    deploy: Deploy, lambda_context: FakeLambdaContext, visibility_changes: list[dict[str, Any]]
) -> None:
    item = start_update(700_300)
    spy = Spy({item.envelope.event_id: PermanentError("CRM refused the lead: 422 invalid phone")})
    worker = ConsumerWorker(spy)
    queues = deploy(worker, "crm")
    queues.send(item)

    def deliver() -> dict[str, Any]:
        event = queues.receive_event()
        assert len(event["Records"]) == 1
        response = lambda_handler_of(worker)(event, lambda_context)
        queues.acknowledge(event, response)
        return response

    assert deliver() == {"batchItemFailures": []}
    assert spy.calls == [item.envelope.event_id]  # no retries burnt
    assert visibility_changes == []
    [letter] = queues.dead_letters()
    assert letter["attributes"]["dead_letter_reason"] == "CRM refused the lead: 422 invalid phone"
    assert journal_items() == []  # the failed attempt left no COMPLETED record

    del spy.failures[item.envelope.event_id]  # the fault is fixed
    assert queues.redrive() == 1
    assert deliver() == {"batchItemFailures": []}
    queues.send(item)  # Telegram resends the update later
    assert deliver() == {"batchItemFailures": []}

    assert spy.calls == [item.envelope.event_id] * 2  # the failed attempt, then exactly one success
    assert worker.counts == {"dead_lettered": 1, "processed": 1, "duplicate": 1}
    [record] = journal_items()
    assert record["status"]["S"] == "COMPLETED"
    assert queues.dead_letters() == []


# The failed record adds no metric of its own; Powertools warns about the empty flush.
@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_a_record_whose_dead_lettering_fails_is_retried_not_lost(
    deploy: Deploy, lambda_context: FakeLambdaContext
) -> None:
    worker = ConsumerWorker(Spy())
    queues = deploy(worker, "store")
    worker.settings.dlq_url = queues.dlq_url.replace("store-dlq", "missing-dlq")
    queues.send("not json")
    event = queues.receive_event(visibility_timeout=0)

    response = lambda_handler_of(worker)(event, lambda_context)
    queues.acknowledge(event, response)

    assert failed_ids(response) == [event["Records"][0]["messageId"]]
    assert "dead_lettered" not in worker.counts
    assert [m["Body"] for m in queues.receive()] == ["not json"]


def test_missing_environment_fails_the_invocation_with_the_missing_settings(
    aws_env: None, lambda_context: FakeLambdaContext
) -> None:
    worker = ConsumerWorker(Spy())
    with pytest.raises(Invalid) as error:
        worker.handle({"Records": []}, lambda_context)
    missing = {str(e["loc"][0]) for e in error.value.errors()}
    assert missing == {"consumer_name", "queue_url", "dlq_url", "journal_table"}


def test_settings_refuse_an_idempotency_window_shorter_than_the_redelivery_bound(aws_env: None) -> None:
    required = {"consumer_name": "a", "queue_url": "q", "dlq_url": "d", "journal_table": "j"}
    with pytest.raises(Invalid, match="idempotency_ttl_seconds"):
        WorkerSettings(**required, idempotency_ttl_seconds=IDEMPOTENCY_TTL_SECONDS - 1)
    assert WorkerSettings(**required).idempotency_ttl_seconds == IDEMPOTENCY_TTL_SECONDS


def test_reset_rereads_the_consumer_from_the_new_environment(deploy: Deploy) -> None:
    """The local runtime re-points a worker: its consumer follows CONSUMER_NAME after reset()."""
    worker = ConsumerWorker(Spy())
    deploy(worker, "store")
    assert worker.consumer is by_name("store")
    queues = deploy(worker, "crm")
    assert worker.consumer is by_name("crm")
    assert worker.settings.dlq_url == queues.dlq_url
