"""Every failure has a way back, exactly once (issue 9, section 3).

Replayed sequences: throttling that outlasts the retries then a redrive once it is fixed; a
DynamoDB answer lost after the write was applied (botocore resends the request, whose condition
then fails); unknowns waiting for a person that must not starve the reconciler's batch; an
unresolved unknown that must never expire. (An operator's resend carried out by a worker is in
`test_sms_unknown.py`, beside the same sequence carried out by the reconciler.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pipeline import aws
from pipeline.sms.gateways import FakeBehaviour
from pipeline.sms.journal import Finish, State
from tests.unit.consumer_support import Output
from tests.unit.sms.conftest import (
    PHONE,
    SmsHarness,
    key_of,
    order_event,
    set_sms_environment,
)


def fail_every_attempt(sms: SmsHarness) -> None:
    """Deliveries until the journal gives up: `SMS_MAX_ATTEMPTS` (3 here) throttled attempts."""
    for _ in range(2):
        assert len(sms.deliver()["batchItemFailures"]) == 1
        sms.wait_for_retry()
    assert sms.deliver() == {"batchItemFailures": []}  # dead-lettered, then acknowledged


def test_a_redrive_after_throttling_is_fixed_sends_exactly_one_sms(
    sms: SmsHarness, output: Callable[[Any], Output]
) -> None:
    captured = output(sms.worker)
    sms.fake.default = FakeBehaviour.REFUSE  # ThrottlingException / quota, on every attempt
    event = order_event()
    sms.publish(event)
    fail_every_attempt(sms)
    failed = sms.record(event)
    assert failed.state is State.FAILED and failed.failed_retryable and failed.never_taken
    assert len(sms.fake.calls) == 3 and sms.fake.texts_to(PHONE) == []

    sms.fake.default = FakeBehaviour.ACCEPT  # the quota is raised
    assert sms.queues.redrive() == 1  # python -m ops dlq redrive sms
    assert sms.deliver() == {"batchItemFailures": []}

    assert len(sms.fake.texts_to(PHONE)) == 1
    sent = sms.record(event)
    assert sent.state is State.ACCEPTED and sent.attempts_this_round == 1
    assert [a["outcome"] for a in sent.attempts] == ["refused", "refused", "refused", "accepted"]
    assert sms.queues.dead_letters() == []
    assert captured.logs("Failed SMS redelivered: no attempt was taken, sending it once more")
    assert captured.emf("SmsReopened")

    # Anything after that (a second redrive, the CRM's retry) changes nothing.
    sms.forget_idempotency()
    sms.publish(event)
    sms.deliver()
    assert len(sms.fake.texts_to(PHONE)) == 1 and len(sms.fake.calls) == 4


def test_of_two_redeliveries_of_a_failed_record_one_reopens_it(sms: SmsHarness) -> None:
    sms.fake.default = FakeBehaviour.REFUSE
    event = order_event()
    sms.publish(event)
    fail_every_attempt(sms)
    journal = sms.service.runtime().journal
    failed = sms.record(event)

    assert journal.reopen(failed.key, seen_since=failed.state_since, by="redelivery") is not None
    assert journal.reopen(failed.key, seen_since=failed.state_since, by="redelivery") is None


def test_a_failed_record_whose_history_shows_a_possible_send_is_not_resent_by_a_redrive(
    sms: SmsHarness,
) -> None:
    """Attempts ran out, but one of the earlier attempts ended unknown: nothing proves the
    customer did not get it, so a redrive dead-letters it again and a person decides."""
    event = order_event()
    journal = sms.service.runtime().journal
    sms.fake.then(FakeBehaviour.TIMEOUT_BEFORE_ACCEPT)
    sms.publish(event)
    sms.deliver()
    key = key_of(event)
    assert sms.record(event).state is State.UNKNOWN
    assert journal.request_resend(key, by="operator") is not None
    claimed = journal.claim(key, "reconciler-1", from_states=(State.PENDING,))
    refused = {"at": "2026-01-15T10:00:00.000000Z", "outcome": "refused", "by": "reconciler"}
    finish = Finish(State.FAILED, refused, failure_reason="refused 3 times", retryable=True)
    assert claimed is not None and journal.finish(key, "reconciler-1", finish) is not None
    calls = len(sms.fake.calls)

    sms.forget_idempotency()
    sms.publish(event)  # e.g. a redrive of an older copy of its message
    assert sms.deliver() == {"batchItemFailures": []}

    assert len(sms.fake.calls) == calls
    assert sms.record(event).state is State.FAILED
    [letter] = sms.queues.dead_letters()
    assert f"python -m ops journal resolve {key} --not-sent" in letter["attributes"]["dead_letter_reason"]


@pytest.fixture
def lose_answer(sms: SmsHarness) -> Iterator[Callable[[str], list[int]]]:
    """Make DynamoDB's answer to the first UpdateItem whose request contains `marker` get lost
    after the write was applied: botocore resends the same request, as after a read timeout."""
    events = aws.resource("dynamodb").meta.client.meta.events
    handlers: list[Callable[..., Any]] = []

    def arm(marker: str) -> list[int]:
        lost: list[int] = []

        def retry_once(request_dict: dict[str, Any], attempts: int, **_: Any) -> int | None:
            body = request_dict.get("body", b"")
            text = body.decode() if isinstance(body, bytes) else str(body)
            if not lost and attempts == 1 and marker in text:
                lost.append(attempts)
                return 0  # retry now
            return None

        events.register("needs-retry.dynamodb.UpdateItem", retry_once)
        handlers.append(retry_once)
        return lost

    yield arm
    for handler in handlers:
        events.unregister("needs-retry.dynamodb.UpdateItem", handler)


def test_a_worker_whose_claim_answer_was_lost_recognises_its_own_claim(
    sms: SmsHarness, lose_answer: Callable[[str], list[int]]
) -> None:
    lost = lose_answer("processing_started_at")  # the claim: pending -> sending
    event = order_event()
    sms.publish(event)
    assert sms.deliver() == {"batchItemFailures": []}

    assert lost == [1]  # the answer was lost and the request resent
    record = sms.record(event)
    assert record.state is State.ACCEPTED and record.attempt_count == 1
    assert len(sms.fake.calls) == 1 and len(sms.fake.texts_to(PHONE)) == 1


@pytest.mark.parametrize(
    ("behaviour", "state"),
    [(FakeBehaviour.ACCEPT, State.ACCEPTED), (FakeBehaviour.TIMEOUT_AFTER_ACCEPT, State.UNKNOWN)],
)
def test_a_result_save_resent_after_a_lost_answer_is_recorded_once(
    sms: SmsHarness, lose_answer: Callable[[str], list[int]], behaviour: FakeBehaviour, state: State
) -> None:
    """An unknown keeps its lease owner, so the resent save's condition still holds: only the
    `last_write` check stops the attempt from being appended twice."""
    lost = lose_answer("list_append")  # the attempt's outcome
    sms.fake.then(behaviour)
    event = order_event()
    sms.publish(event)
    assert sms.deliver() == {"batchItemFailures": []}

    assert lost == [1]
    record = sms.record(event)
    assert record.state is state
    assert [a["outcome"] for a in record.attempts] == [state.value]  # one attempt, recorded once
    assert sms.worker.last_outcome.status == "processed"  # not mistaken for a take-over


def test_unknowns_past_the_deadline_never_starve_newer_ones(
    sms: SmsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_sms_environment(monkeypatch, SMS_RECONCILE_BATCH_SIZE="2")
    sms.service.reset_runtime()
    sms.fake.lookup_unknown = True  # no lookup for the old ones: they wait for a person
    waiting = [order_event() for _ in range(3)]
    for event in waiting:
        sms.fake.then(FakeBehaviour.TIMEOUT_BEFORE_ACCEPT)
        sms.publish(event)
        sms.deliver()
    sms.clock.advance(25 * 3600)  # past the 24 h deadline
    sms.fake.lookup_unknown = False
    fresh = order_event()
    sms.fake.then(FakeBehaviour.TIMEOUT_AFTER_ACCEPT)  # the gateway took it; the answer was lost
    sms.publish(fresh)
    sms.deliver()

    report = sms.reconcile()

    assert (report["past_deadline"], report["checked"], report["accepted"]) == (3, 1, 1)
    assert sms.record(fresh).state is State.ACCEPTED
    assert {sms.record(event).state for event in waiting} == {State.UNKNOWN}
    assert len(sms.fake.calls) == 4  # nothing past the deadline was resent


def test_an_unresolved_unknown_never_expires_and_a_resolved_one_does(sms: SmsHarness) -> None:
    sms.fake.then(FakeBehaviour.TIMEOUT_AFTER_ACCEPT)
    event = order_event()
    sms.publish(event)
    sms.deliver()
    [item] = sms.journal_records()
    # No TTL attribute: DynamoDB never deletes it, however long it waits for a person.
    assert item["state"] == "unknown" and "expiration" not in item

    sms.clock.advance(3600)
    assert sms.reconcile()["accepted"] == 1  # the gateway, asked, has it
    [item] = sms.journal_records()
    retention = sms.service.runtime().settings.retention
    assert item["state"] == "accepted"
    assert int(item["expiration"]) == pytest.approx((sms.clock.now() + retention).timestamp(), abs=5)
