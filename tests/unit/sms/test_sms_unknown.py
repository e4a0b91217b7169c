"""Outcomes nobody knows: a lost gateway answer, a worker dying mid-send, and the reconciler settling them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pipeline.sms.gateways import FakeBehaviour, SimulatedCrash
from pipeline.sms.journal import State
from tests.unit.consumer_support import Output
from tests.unit.sms.conftest import MASKED_PHONE, PHONE, SmsHarness, key_of, order_event


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
    assert sms.reconcile()["resent"] == 1
    assert sms.record(event).state is State.UNKNOWN
    assert sms.reconcile() | {"oldest_unknown_age_seconds": 0} == {
        "leases_expired": 0,
        "checked": 1,
        "accepted": 0,
        "resent": 0,  # proven not received twice, resent once: the rest is a person's call
        "unresolved": 1,
        "past_deadline": 0,
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
    assert captured.logs("SMS outcome still unknown past the deadline: a person must decide")
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


def test_an_operator_resolves_what_the_reconciler_cannot(
    sms: SmsHarness, capsys: pytest.CaptureFixture[str]
) -> None:
    from pipeline.sms.reconcile import main, resolve_by_operator

    sms.fake.lookup_unknown = True  # like End User Messaging: no lookup API
    sms.fake.then(FakeBehaviour.TIMEOUT_BEFORE_ACCEPT, FakeBehaviour.TIMEOUT_AFTER_ACCEPT)
    delivered, lost = order_event(order_id="ORD-1"), order_event(order_id="ORD-2")
    for event in (lost, delivered):
        sms.publish(event)
        sms.deliver()
    assert sms.reconcile()["unresolved"] == 2 and len(sms.fake.calls) == 2

    capsys.readouterr()
    main(["list"])  # what a person sees: key, masked phone, age
    listed = capsys.readouterr().out.splitlines()
    assert sorted(line.split()[:3] for line in listed) == sorted(
        ["unknown", key_of(event), MASKED_PHONE] for event in (lost, delivered)
    )
    runtime = sms.service.runtime()
    assert resolve_by_operator(runtime, key_of(delivered), "accepted") == "accepted"
    assert resolve_by_operator(runtime, key_of(lost), "resend") == "accepted"
    assert [call.key for call in sms.fake.calls] == [key_of(lost), key_of(delivered), key_of(lost)]
    assert sms.record(lost).attempts[-1]["by"] == "reconciler"
    with pytest.raises(ValueError, match="only an unknown"):
        resolve_by_operator(runtime, key_of(lost), "resend")


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
