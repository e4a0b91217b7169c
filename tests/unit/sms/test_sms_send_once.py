"""One SMS per notification: duplicates, parallel workers, new transitions, re-saves, unruled statuses."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pipeline import aws
from pipeline.errors import TransientError
from pipeline.registry import by_name, matches
from pipeline.sms import gateways
from tests.support.moto_server import serialized_moto_server
from tests.unit.consumer_support import Output, create_tables, crm_envelope
from tests.unit.sms.conftest import (
    PHONE,
    SmsHarness,
    add_by_state_index,
    key_of,
    order_event,
    recent,
    set_sms_environment,
)


def test_the_same_event_twice_sends_one_sms(sms: SmsHarness) -> None:
    event = order_event()
    sms.publish(event)
    sms.publish(event)  # the CRM retried, or SNS delivered twice: two SQS messages, one event
    sms.deliver()
    assert sms.worker.counts["processed"] == 1 and sms.worker.counts["duplicate"] == 1
    assert len(sms.fake.texts_to(PHONE)) == 1

    # Days later Powertools' idempotency record has expired; the CRM retries once more.
    assert sms.forget_idempotency() > 0
    sms.publish(event)
    sms.deliver()
    assert sms.worker.counts["processed"] == 2  # it ran again, and the journal stopped it
    assert len(sms.fake.calls) == 1 and len(sms.fake.texts_to(PHONE)) == 1
    [record] = sms.journal_records()
    assert record["state"] == "accepted" and len(record["attempts"]) == 1
    assert sms.queues.approximate_counts() == (0, 0)


@pytest.fixture
def moto_server(aws_env: None, monkeypatch: pytest.MonkeyPatch, sms_reset: None) -> Iterator[None]:
    with serialized_moto_server() as url:
        monkeypatch.setenv("AWS_ENDPOINT_URL", url)
        aws.reset_clients()
        create_tables()
        add_by_state_index(aws.client("dynamodb"))
        monkeypatch.setenv("JOURNAL_TABLE", "journal")
        set_sms_environment(monkeypatch)
        yield


def _racing(target: Any, name: str, results: list[Any]) -> Callable[..., Any]:
    """`target.name` whose first two calls wait for each other, to run together; results are kept."""
    original = getattr(target, name)
    barrier = threading.Barrier(2)
    lock = threading.Lock()

    def call(*args: Any, **kwargs: Any) -> Any:
        with lock:
            racing = len(results) + barrier.n_waiting < 2
        if racing:
            barrier.wait(timeout=10)
        result = original(*args, **kwargs)
        with lock:
            results.append(result)
        return result

    return call


def test_the_same_event_processed_in_parallel_sends_one_sms(
    moto_server: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = importlib.import_module("pipeline.sms.service")
    journal = service.runtime().journal
    fake = gateways.fake_gateway()
    fake.delay_seconds = 0.3  # the winner is still sending when the loser looks again
    created: list[bool] = []
    claimed: list[Any] = []
    monkeypatch.setattr(journal, "record_entry", _racing(journal, "record_entry", created))
    monkeypatch.setattr(journal, "claim", _racing(journal, "claim", claimed))
    envelope = crm_envelope(order_event()).envelope
    outcomes: list[Any] = []

    def worker() -> None:
        try:
            outcomes.append(service.send_notification(envelope))
        except TransientError as error:
            outcomes.append(error)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)

    assert sorted(created) == [False, True]  # one recorded it, the other found the order changed
    assert len(claimed) == 2 and sum(result is not None for result in claimed) == 1  # one claim won
    assert len(fake.calls) == 1 and len(fake.texts_to(PHONE)) == 1
    [won] = [o for o in outcomes if isinstance(o, dict)]
    [lost] = [o for o in outcomes if isinstance(o, TransientError)]
    assert won["state"] == "accepted"
    assert lost.reason == "SMS being sent by another worker" and lost.retry_after is not None
    # The loser's redelivery acknowledges without sending.
    assert service.send_notification(envelope)["state"] == "accepted"
    assert len(fake.calls) == 1


def test_another_status_of_the_same_order_sends_a_new_sms(sms: SmsHarness) -> None:
    ready = order_event("ready_for_pickup", "paid", order_id="ORD-9", occurred_at=recent(0))
    shipped = order_event("shipped", "ready_for_pickup", order_id="ORD-9", occurred_at=recent(20))
    # A second trip, from a status whose event the CRM never sent: the pipeline's own history
    # (shipped) is the status the order left.
    ready_again = order_event("ready_for_pickup", "returned", order_id="ORD-9", occurred_at=recent(40))
    for event in (ready, shipped, ready_again):
        sms.publish(event)
        sms.deliver()
    assert sms.fake.texts_to(PHONE) == [
        "Olga Ivanova, your order ORD-9 is ready for pickup.",
        "Olga Ivanova, your order ORD-9 has been shipped.",
        "Olga Ivanova, your order ORD-9 is ready for pickup.",
    ]
    keys = [key_of(ready), key_of(shipped), key_of(ready_again)]
    assert [call.key for call in sms.fake.calls] == keys
    items = {item["id"][len("sms#") :]: item for item in sms.journal_records()}
    assert [(items[key]["state"], items[key]["previous_status"]) for key in keys] == [
        ("accepted", "paid"),
        ("accepted", "ready_for_pickup"),
        ("accepted", "shipped"),
    ]


def test_a_resave_without_a_status_change_sends_nothing(sms: SmsHarness) -> None:
    resave = order_event("shipped", "shipped")
    published = sms.publish(resave)
    assert matches(by_name("sms").filter_policy, published.attributes)  # it does reach the queue
    response = sms.deliver()
    assert response == {"batchItemFailures": []}
    assert sms.worker.counts["processed"] == 1
    assert sms.fake.calls == [] and sms.journal_records() == []


def test_a_status_without_a_rule_sends_nothing_but_is_part_of_the_orders_history(
    sms: SmsHarness, output: Callable[[Any], Output]
) -> None:
    captured = output(sms.worker)
    cancelled = order_event("cancelled", "paid")
    published = sms.publish(cancelled)
    # It reaches the queue: the order's history needs it to tell a re-entry from a repeat.
    assert matches(by_name("sms").filter_policy, published.attributes)
    sms.deliver()
    assert sms.worker.counts["processed"] == 1
    assert sms.fake.calls == [] and sms.journal_records() == []
    state = sms.service.runtime().journal.get_order("crm:" + cancelled["order"]["id"])
    assert (state.status, state.entry) == ("cancelled", 1)
    # Logged and counted: a status the CRM sends that no rule covers is visible on a dashboard.
    [metric] = captured.emf("SmsNoRule")
    assert metric["SmsNoRule"] == [1.0]
    [log] = captured.logs("No SMS for this event")
    assert log["reason"] == "no SMS rule for status 'cancelled'"
