"""Outcomes nobody knows: a lost gateway answer, a worker dying mid-send, and the reconciler settling them."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from pipeline.registry import by_name
from pipeline.sms.gateways import FakeBehaviour, SimulatedCrash
from pipeline.sms.journal import State
from tests.unit.consumer_support import Output
from tests.unit.sms.conftest import (
    LOOKUP_SETTLE_SECONDS,
    MASKED_PHONE,
    PHONE,
    SmsHarness,
    key_of,
    order_event,
)


def reconcile_module() -> ModuleType:
    """`pipeline.sms.reconcile`, imported by the `sms` fixture once the Powertools environment is set."""
    return importlib.import_module("pipeline.sms.reconcile")


def horizon_seconds() -> float:
    """How long the reconciler leaves a due `pending` record to its SQS message."""
    seconds: float = reconcile_module().redelivery_horizon(by_name("sms")).total_seconds()
    return seconds


def test_a_lost_gateway_answer_gives_unknown_and_no_second_send(sms: SmsHarness) -> None:
    sms.fake.then(FakeBehaviour.TIMEOUT_AFTER_ACCEPT)
    event = order_event()
    sms.publish(event)
    assert sms.deliver() == {"batchItemFailures": []}  # acknowledged: the outcome is saved
    record = sms.record(event)
    assert record.state is State.UNKNOWN and record.unknown_since is not None
    assert [a["outcome"] for a in record.attempts] == ["unknown"]
    assert record.attempts[0]["error_code"] == "ReadTimeout" and "answered_at" not in record.attempts[0]
    assert sms.queues.approximate_counts() == (0, 0)

    # The message comes again (a CRM retry after Powertools' record expired): no blind resend.
    sms.forget_idempotency()
    sms.publish(event)
    sms.deliver()
    assert sms.worker.counts["processed"] == 2
    assert len(sms.fake.calls) == 1 and len(sms.fake.texts_to(PHONE)) == 1
    assert sms.record(event).state is State.UNKNOWN


def test_reconciliation_marks_accepted_what_the_gateway_has(sms: SmsHarness) -> None:
    sms.fake.then(FakeBehaviour.TIMEOUT_AFTER_ACCEPT)
    event = order_event()
    sms.publish(event)
    sms.deliver()
    report = sms.reconcile()
    assert report["checked"] == 1 and report["accepted"] == 1 and report["resent"] == 0
    record = sms.record(event)
    assert record.state is State.ACCEPTED
    assert record.message_id == sms.fake.delivered[0][0]
    assert len(sms.fake.calls) == 1
    assert sms.reconcile()["checked"] == 0  # nothing left to look at


def test_reconciliation_resends_once_with_the_same_key_what_never_arrived(sms: SmsHarness) -> None:
    sms.fake.then(FakeBehaviour.TIMEOUT_BEFORE_ACCEPT)
    event = order_event()
    sms.publish(event)
    sms.deliver()
    assert sms.record(event).state is State.UNKNOWN and sms.fake.delivered == []

    # Right after the timeout a miss at the gateway proves nothing: the request may still land.
    report = sms.reconcile()
    assert report["resent"] == 0 and report["unresolved"] == 1 and len(sms.fake.calls) == 1

    sms.clock.advance(LOOKUP_SETTLE_SECONDS)
    report = sms.reconcile()
    assert report["resent"] == 1
    record = sms.record(event)
    assert record.state is State.ACCEPTED and record.reconcile_resends == 1
    assert [sms_.key for sms_ in sms.fake.calls] == [key_of(event), key_of(event)]
    assert len(sms.fake.texts_to(PHONE)) == 1
    assert [(a["by"], a["outcome"]) for a in record.attempts] == [
        ("worker", "unknown"),
        ("reconciler", "accepted"),
    ]


def test_a_resend_that_ends_unknown_again_is_not_resent_and_waits_for_a_person(
    sms: SmsHarness, output: Callable[[Any], Output]
) -> None:
    captured = output(sms.worker)
    sms.fake.then(FakeBehaviour.TIMEOUT_BEFORE_ACCEPT, FakeBehaviour.TIMEOUT_BEFORE_ACCEPT)
    event = order_event()
    sms.publish(event)
    sms.deliver()
    sms.clock.advance(LOOKUP_SETTLE_SECONDS)
    assert sms.reconcile()["resent"] == 1
    assert sms.record(event).state is State.UNKNOWN
    assert sms.reconcile() | {"oldest_unknown_age_seconds": 0} == {
        "leases_expired": 0,
        "checked": 1,
        "accepted": 0,
        "resent": 0,  # proven not received twice, resent once: the rest is a person's call
        "unresolved": 1,
        "errors": 0,
        "past_deadline": 0,
        "requested": 0,
        "orphaned": 0,
        "unknown_count": 1,
        "oldest_unknown_age_seconds": 0,
    }
    assert len(sms.fake.calls) == 2

    sms.clock.advance(24 * 3600 + 1)
    report = sms.reconcile()
    assert report["past_deadline"] == 1 and report["unknown_count"] == 1
    assert report["oldest_unknown_age_seconds"] >= 24 * 3600
    assert len(sms.fake.calls) == 2 and sms.record(event).state is State.UNKNOWN
    [metric_line] = captured.emf("SmsUnknownPastDeadline")[-1:]
    assert metric_line["SmsUnknownPastDeadline"] == [1.0] and metric_line["SmsUnknownCount"] == [1.0]
    [waiting] = captured.logs("SMS outcomes still unknown past the deadline: a person must decide")
    assert waiting["count"] == 1 and waiting["oldest_notification_key"] == key_of(event)
    # Every run emits the gauges, the quiet ones too.
    assert len(captured.emf("SmsUnknownCount")) == 3


@pytest.mark.filterwarnings("ignore:No application metrics")  # the crashed invocation
def test_a_worker_dying_while_sending_gives_unknown_not_a_resend(sms: SmsHarness) -> None:
    sms.fake.then(FakeBehaviour.CRASH_AFTER_ACCEPT)
    event = order_event()
    sms.publish(event)
    with pytest.raises(SimulatedCrash):
        sms.deliver()
    record = sms.record(event)
    assert record.state is State.SENDING and record.lease_expires_at is not None

    # Redelivered while the lease still holds: nobody else sends; come back after the lease.
    sms.forget_idempotency()  # Powertools' in-progress record expires with the Lambda's timeout
    sms.make_visible()
    response = sms.deliver()
    assert len(response["batchItemFailures"]) == 1
    assert sms.worker.last_outcome.reason == "SMS being sent by another worker"
    assert 1 <= sms.worker.last_outcome.delay_seconds <= 120

    sms.wait_for_retry()  # the lease has now expired: the worker is known dead
    assert sms.deliver() == {"batchItemFailures": []}
    record = sms.record(event)
    assert record.state is State.UNKNOWN
    assert [a["outcome"] for a in record.attempts] == ["lease_expired"]
    assert len(sms.fake.calls) == 1  # not resent

    assert sms.reconcile()["accepted"] == 1  # and the gateway, asked, has it
    assert sms.record(event).state is State.ACCEPTED and len(sms.fake.calls) == 1


@pytest.mark.filterwarnings("ignore:No application metrics")  # the crashed invocation
def test_the_reconciler_settles_a_dead_workers_send_without_any_redelivery(sms: SmsHarness) -> None:
    sms.fake.then(FakeBehaviour.CRASH_AFTER_ACCEPT)
    event = order_event()
    sms.publish(event)
    with pytest.raises(SimulatedCrash):
        sms.deliver()
    assert sms.reconcile()["leases_expired"] == 0  # the lease still holds: hands off
    sms.clock.advance(121)
    report = sms.reconcile()
    assert report["leases_expired"] == 1 and report["accepted"] == 1
    assert sms.record(event).state is State.ACCEPTED and len(sms.fake.calls) == 1


def test_an_operators_decisions_are_carried_out_by_the_next_reconciler_run(sms: SmsHarness) -> None:
    """What `python -m ops journal resolve` records (`--accepted`, `--not-sent`), then reconciled."""
    sms.fake.lookup_unknown = True  # like End User Messaging: no lookup API
    sms.fake.then(FakeBehaviour.TIMEOUT_BEFORE_ACCEPT, FakeBehaviour.TIMEOUT_AFTER_ACCEPT)
    delivered, lost = order_event(order_id="ORD-1"), order_event(order_id="ORD-2")
    for event in (lost, delivered):
        sms.publish(event)
        sms.deliver()
    assert sms.reconcile()["unresolved"] == 2 and len(sms.fake.calls) == 2
    journal = sms.service.runtime().journal
    # What `ops journal unknown` lists: the query the reconciler runs.
    assert {r.key for r in journal.records_in_state(State.UNKNOWN)} == {key_of(lost), key_of(delivered)}

    assert journal.resolve_accepted(key_of(delivered), via="operator") is not None
    requested = journal.request_resend(key_of(lost), by="operator")
    assert requested is not None and requested.state is State.PENDING
    assert len(sms.fake.calls) == 2  # a decision sends nothing by itself

    report = sms.reconcile()
    assert (report["requested"], report["checked"], report["orphaned"]) == (1, 0, 0)
    assert [call.key for call in sms.fake.calls] == [key_of(lost), key_of(delivered), key_of(lost)]
    record = sms.record(lost)
    assert record.state is State.ACCEPTED and record.reconcile_resends == 1
    assert [a["by"] for a in record.attempts] == ["worker", "reconciler"]

    assert sms.reconcile()["requested"] == 0
    assert len(sms.fake.calls) == 3 and len(sms.fake.texts_to(PHONE)) == 2
    assert journal.request_resend(key_of(lost), by="operator") is None  # only an unknown


@pytest.mark.parametrize("carried_out_by", ["reconciler", "worker"])
def test_an_operators_resend_that_ends_unknown_again_is_not_resent_automatically(
    sms: SmsHarness, carried_out_by: str
) -> None:
    """Whoever carries the operator's resend out, the reconciler's next run, or a worker whose
    live redelivery (the CRM's retry) claims the record first, it is the one resend allowed."""
    sms.fake.then(FakeBehaviour.TIMEOUT_BEFORE_ACCEPT, FakeBehaviour.TIMEOUT_BEFORE_ACCEPT)
    event = order_event()
    sms.publish(event)
    sms.deliver()
    journal = sms.service.runtime().journal
    assert journal.request_resend(key_of(event), by="operator") is not None

    if carried_out_by == "reconciler":
        assert sms.reconcile()["requested"] == 1
    else:
        sms.forget_idempotency()
        sms.publish(event)
        sms.deliver()
    record = sms.record(event)
    assert record.state is State.UNKNOWN and record.reconcile_resends == 1
    assert [a["by"] for a in record.attempts] == ["worker", carried_out_by]
    # The gateway proves it never got it, but the one resend is spent: a person decides again.
    sms.clock.advance(LOOKUP_SETTLE_SECONDS)
    report = sms.reconcile()
    assert (report["resent"], report["unresolved"]) == (0, 1)
    assert len(sms.fake.calls) == 2


def test_a_pending_record_whose_sqs_retry_is_still_due_is_left_to_it(sms: SmsHarness) -> None:
    sms.fake.then(FakeBehaviour.REFUSE)
    event = order_event()
    sms.publish(event)
    assert len(sms.deliver()["batchItemFailures"]) == 1
    pending = sms.record(event)
    assert pending.state is State.PENDING and pending.next_attempt_at is not None

    assert sms.reconcile()["orphaned"] == 0  # not due yet
    sms.wait_for_retry()  # due now, and its message is visible again
    sms.clock.advance(horizon_seconds() - 2)
    assert sms.reconcile()["orphaned"] == 0  # a live message could still come: hands off
    assert len(sms.fake.calls) == 1 and sms.record(event) == pending

    assert sms.deliver() == {"batchItemFailures": []}  # the SQS retry sends it
    assert sms.record(event).state is State.ACCEPTED and len(sms.fake.calls) == 2
    assert sms.reconcile()["orphaned"] == 0 and len(sms.fake.calls) == 2


def test_a_pending_record_whose_sqs_message_is_gone_is_sent_once_by_the_reconciler(
    sms: SmsHarness, output: Callable[[Any], Output]
) -> None:
    captured = output(sms.worker)
    sms.fake.then(FakeBehaviour.REFUSE)
    event = order_event()
    sms.publish(event)
    sms.deliver()
    sms.queues.sqs.purge_queue(QueueUrl=sms.queues.queue_url)  # e.g. redriven away, or deleted by hand
    pending = sms.record(event)
    assert pending.state is State.PENDING and pending.next_attempt_at is not None
    due_for = (pending.next_attempt_at - sms.clock.now()).total_seconds()

    sms.clock.advance(due_for + horizon_seconds())
    report = sms.reconcile()

    assert (report["orphaned"], report["requested"]) == (1, 0)
    assert [call.key for call in sms.fake.calls] == [key_of(event), key_of(event)]
    record = sms.record(event)
    assert record.state is State.ACCEPTED and record.reconcile_resends == 0
    assert [(a["by"], a["outcome"]) for a in record.attempts] == [
        ("worker", "refused"),
        ("reconciler", "accepted"),
    ]
    assert captured.logs("SMS pending with no SQS message left to send it: sending once with the same key")
    assert sms.reconcile()["orphaned"] == 0 and len(sms.fake.calls) == 2


def test_the_reconcilers_claim_of_a_pending_record_loses_to_a_worker_that_took_it(sms: SmsHarness) -> None:
    sms.fake.then(FakeBehaviour.TIMEOUT_BEFORE_ACCEPT)
    event = order_event()
    sms.publish(event)
    sms.deliver()
    journal = sms.service.runtime().journal
    requested = journal.request_resend(key_of(event), by="operator")
    assert requested is not None
    # A CRM retry reaches a worker first: it claims the record (and is still sending).
    assert journal.claim(key_of(event), "worker-live", from_states=(State.PENDING,)) is not None

    reconcile = reconcile_module()
    horizon = reconcile.redelivery_horizon(by_name("sms"))
    assert reconcile.send_pending(sms.service.runtime(), requested, horizon) is None
    assert sms.reconcile()["requested"] == 0
    assert len(sms.fake.calls) == 1


def test_an_unforeseen_gateway_failure_is_unknown_not_a_retry(
    sms: SmsHarness, output: Callable[[Any], Output], monkeypatch: pytest.MonkeyPatch
) -> None:
    captured = output(sms.worker)

    def broken_send(sms_: Any) -> Any:
        raise RuntimeError(f"bug while sending to {PHONE}")

    monkeypatch.setattr(sms.fake, "send", broken_send)
    event = order_event()
    sms.publish(event)
    assert sms.deliver() == {"batchItemFailures": []}  # not retried: it may have left
    record = sms.record(event)
    assert record.state is State.UNKNOWN and record.attempts[0]["error_code"] == "RuntimeError"
    [logged] = captured.logs("Unexpected failure calling the SMS gateway: outcome unknown")
    assert logged["error"] == f"bug while sending to {MASKED_PHONE}"
