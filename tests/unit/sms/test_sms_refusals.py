"""Definite refusals: back to pending with backoff and jitter, bounded, then failed and the DLQ."""

from __future__ import annotations

from pipeline.sms.gateways import FakeBehaviour
from pipeline.sms.journal import State
from tests.unit.sms.conftest import PHONE, SmsHarness, order_event


def test_exhausted_attempts_give_failed_and_a_dlq_message_with_the_reason(sms: SmsHarness) -> None:
    sms.fake.default = FakeBehaviour.REFUSE
    event = order_event()
    published = sms.publish(event)
    delays = []
    for attempt in (1, 2):
        response = sms.deliver()
        assert len(response["batchItemFailures"]) == 1
        record = sms.record(event)
        assert record.state is State.PENDING and record.attempt_count == attempt
        assert record.next_attempt_at is not None and record.lease_owner is None
        assert sms.queues.receive() == []  # SQS holds it back for the backoff delay
        delays.append(sms.wait_for_retry())
    # Exponential with jitter: attempt n waits between base*2^(n-1)/2 and base*2^(n-1) (base 10 s).
    assert 5 <= delays[0] <= 10 and 10 <= delays[1] <= 20

    assert sms.deliver() == {"batchItemFailures": []}  # dead-lettered by the worker, then acknowledged
    record = sms.record(event)
    assert record.state is State.FAILED
    assert record.failure_reason == "gateway refused the SMS 3 times, last with Throttled"
    assert [a["outcome"] for a in record.attempts] == ["refused"] * 3
    assert len(sms.fake.calls) == 3 and sms.fake.texts_to(PHONE) == []
    [letter] = sms.queues.dead_letters()
    assert letter["body"] == published.body
    assert letter["attributes"]["dead_letter_reason"] == record.failure_reason
    assert letter["attributes"]["dead_letter_consumer"] == "sms"


def test_a_refusal_for_good_fails_at_once_and_a_redrive_does_not_send_again(sms: SmsHarness) -> None:
    sms.fake.then(FakeBehaviour.REFUSE_PERMANENTLY)
    event = order_event()
    sms.publish(event)
    sms.deliver()
    record = sms.record(event)
    assert record.state is State.FAILED and record.attempt_count == 1
    assert record.failure_reason == "gateway refused the SMS for good (InvalidNumber)"
    assert sms.queues.redrive() == 1
    sms.forget_idempotency()
    sms.deliver()
    assert len(sms.fake.calls) == 1  # failed stays failed until a person resends it
    [letter] = sms.queues.dead_letters()
    assert letter["attributes"]["dead_letter_reason"] == (
        f"{record.failure_reason}; decide with `python -m ops journal resolve {record.key} --not-sent`"
        " (send once) or `--abandon`"
    )


def test_a_refusal_then_an_acceptance_sends_one_sms(sms: SmsHarness) -> None:
    sms.fake.then(FakeBehaviour.REFUSE)
    event = order_event()
    sms.publish(event)
    sms.deliver()
    sms.wait_for_retry()
    sms.deliver()
    record = sms.record(event)
    assert record.state is State.ACCEPTED and record.attempt_count == 2
    assert [a["outcome"] for a in record.attempts] == ["refused", "accepted"]
    assert len(sms.fake.texts_to(PHONE)) == 1
