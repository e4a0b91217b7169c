"""Notifications that end unsent, as a customer and an operator see them (issue 43, issue 39):
an opted-out number (End User Messaging's own list, filled by a STOP reply; the suppression list
of HTTP gateways and local runs), a redrive past the rule's maximum age, quiet hours, and a
pending record whose order moved on. Through the deployed pieces on moto and the stand-ins."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pipeline.pause import PAUSE_SECONDS
from pipeline.sms import endstates
from pipeline.sms.journal import State
from tests.unit.consumer_support import Output, control
from tests.unit.sms.conftest import PHONE, SmsHarness, order_event
from tests.unit.sms.test_sms_account_refused import (  # noqa: F401 - fixtures
    eum_gateway,
    let_time_pass,
    waiting,
)


def test_a_customer_who_replied_stop_gets_nothing_and_leaves_no_dead_letter(
    sms: SmsHarness, request: pytest.FixtureRequest, output: Callable[[Any], Output]
) -> None:
    """End User Messaging keeps the opt-out list (STOP is handled by AWS) and refuses a send to a
    listed number with ConflictException DESTINATION_PHONE_NUMBER_OPTED_OUT: `suppressed`, once,
    for every later order too; never retried, never dead-lettered. START opts back in."""
    url, texts = request.getfixturevalue("eum_gateway")
    log = output(sms.worker)
    control(url, "/_inbound", {"from": PHONE, "text": "Stop"})
    first, second = order_event(), order_event("shipped", "paid")

    for event in (first, second):
        sms.publish(event)
        assert sms.deliver() == {"batchItemFailures": []}

    assert texts() == 0 and sms.queues.dead_letters() == []
    for event in (first, second):
        record = sms.record(event)
        assert record.state is State.SUPPRESSED and len(record.attempts) == 1
        assert record.attempts[0]["error_code"] == "ConflictException:DESTINATION_PHONE_NUMBER_OPTED_OUT"
    assert len(log.emf("SmsSuppressed")) == 2
    assert [item["state"] for item in sms.journal_records()] == ["suppressed", "suppressed"]
    assert all("sms_state" not in item and "expiration" in item for item in sms.journal_records())

    control(url, "/_inbound", {"from": PHONE, "text": "START"})
    sms.publish(order_event())
    sms.deliver()
    assert texts() == 1
    assert PHONE not in "\n".join(str(line) for line in log.read())


def test_a_number_on_the_suppression_list_gets_nothing_and_the_gateway_is_not_called(
    sms: SmsHarness, output: Callable[[Any], Output]
) -> None:
    """HTTP gateways and local runs: the list `ops sms opt-out` fills (the same function)."""
    log = output(sms.worker)
    endstates.opt_out(sms.service.runtime().journal, PHONE, by="operator")
    event = order_event()
    sms.publish(event)

    assert sms.deliver() == {"batchItemFailures": []}

    assert sms.fake.calls == [] and sms.queues.dead_letters() == []
    assert sms.record(event).state is State.SUPPRESSED
    assert len(log.emf("SmsSuppressed")) == 1


def test_a_three_day_old_redrive_sends_nothing(sms: SmsHarness, output: Callable[[Any], Output]) -> None:
    """The gateway refused for now until attempts ran out: dead-lettered. Three days later the
    operator redrives it; "ready for pickup" is past its maximum age (2 h): `expired`,
    counted, not sent, and not dead-lettered again."""
    log = output(sms.worker)
    sms.fake.then("refuse", "refuse", "refuse")
    event = order_event()
    published = sms.publish(event)
    sms.deliver()
    sms.wait_for_retry()
    sms.deliver()
    sms.wait_for_retry()
    sms.deliver()
    assert len(sms.queues.dead_letters()) == 1 and sms.record(event).state is State.FAILED

    sms.clock.advance(3 * 24 * 3600)
    sms.queues.send(published)  # the redrive: the same message again
    assert sms.deliver() == {"batchItemFailures": []}

    assert sms.fake.delivered == [] and len(sms.queues.dead_letters()) == 1
    record = sms.record(event)
    assert record.state is State.EXPIRED and len(record.attempts) == 3
    assert len(log.emf("SmsExpired")) == 1


def test_quiet_hours_delay_the_sms_durably_then_send_it(
    sms: SmsHarness, output: Callable[[Any], Output], monkeypatch: Any
) -> None:
    """22:00-08:00 local (Minsk, UTC+3): "ready for pickup" moved at 23:00 waits in the queue,
    handed back 900 s at a time, nothing dropped, nothing sent by the reconciler meanwhile;
    at 08:00 it is sent once."""
    monkeypatch.setenv("SMS_QUIET_HOURS", "22:00-08:00")
    monkeypatch.setenv("SMS_QUIET_STATUSES", "ready_for_pickup")
    monkeypatch.setenv("SMS_MAX_AGE_SECONDS", str(12 * 3600))  # a night's wait stays within it
    sms.service.reset_runtime()
    sms.clock.stop(datetime(2026, 12, 5, 20, 0, tzinfo=UTC))  # 23:00 in Minsk, in the past
    log = output(sms.worker)
    event = order_event()
    sms.publish(event)

    handed_back = 0
    while not sms.fake.delivered:
        assert sms.deliver() == {"batchItemFailures": []}
        if sms.fake.delivered:
            break
        handed_back += 1
        [wait] = waiting(sms)
        assert 0 < wait <= PAUSE_SECONDS and sms.record(event).state is State.PENDING
        sms.reconcile()
        assert sms.fake.delivered == []
        let_time_pass(sms, PAUSE_SECONDS)
        assert handed_back < 50

    assert handed_back == 9 * 3600 // PAUSE_SECONDS  # 23:00 -> 08:00, 900 s a time
    assert sms.clock.now() >= datetime(2026, 12, 6, 5, 0, tzinfo=UTC)
    assert len(sms.fake.delivered) == 1 and sms.queues.dead_letters() == []
    assert sms.record(event).state is State.ACCEPTED
    assert len(log.emf("SmsQuietHoursDelayed")) == handed_back


def test_issue_39_seed_40_a_pending_sms_behind_a_paused_message_is_superseded_by_the_newer_status(
    sms: SmsHarness, request: pytest.FixtureRequest, output: Callable[[Any], Output]
) -> None:
    """Seed 40: End User Messaging refused the account twice for the order's first status (its
    first move, then a repeat of that entry); the record waited for its paused message, and the
    order moved on to "shipped" meanwhile. Nothing closed the old record: it stayed `pending`, or
    its paused message sent "ready for pickup" after "shipped". The rule: a newer status
    supersedes the pending notification of the entry it left (`superseded`, counted)."""
    url, texts = request.getfixturevalue("eum_gateway")
    log = output(sms.worker)
    now = sms.clock.now()
    ready = order_event(occurred_at=(now - timedelta(minutes=30)).isoformat(), order_id="ORD-40")
    repeat = order_event(occurred_at=(now - timedelta(minutes=20)).isoformat(), order_id="ORD-40")
    shipped = order_event(
        "shipped",
        "ready_for_pickup",
        occurred_at=(now - timedelta(minutes=10)).isoformat(),
        order_id="ORD-40",
    )
    control(url, "/_account/block", {"cause": "blocked"})
    for event in (ready, repeat):
        sms.publish(event)
        assert sms.deliver() == {"batchItemFailures": []}  # paused, re-sent delayed
    assert sms.record(ready).state is State.PENDING and len(waiting(sms)) == 2

    control(url, "/_account/unblock")
    sms.publish(shipped)
    assert sms.deliver() == {"batchItemFailures": []}  # only shipped is visible yet
    let_time_pass(sms, PAUSE_SECONDS)
    while waiting(sms):
        sms.deliver()  # the paused messages of the first status

    assert texts() == 1 and sms.queues.dead_letters() == []
    assert sms.record(shipped).state is State.ACCEPTED
    record = sms.record(ready)
    assert record.state is State.SUPERSEDED and record.attempts == ()
    assert [item["state"] for item in sms.journal_records()].count("pending") == 0
    assert len(log.emf("SmsSuperseded")) == 1
