"""End User Messaging delivery events (configuration set -> SNS -> sms_events) in the journal."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pipeline.sms.gateways import FakeBehaviour
from pipeline.sms.journal import State
from tests.unit.sms.conftest import PHONE, SmsHarness, delivery_message, key_of, order_event


def test_a_delivery_event_records_the_status_and_closes_an_unknown(sms: SmsHarness) -> None:
    sms.fake.then(FakeBehaviour.TIMEOUT_AFTER_ACCEPT)
    event = order_event()
    sms.publish(event)
    sms.deliver()
    assert sms.record(event).state is State.UNKNOWN

    delivered = delivery_message(key_of(event), "TEXT_DELIVERED")
    assert sms.delivery_event(delivered) == {"closed_unknown": 1}
    record = sms.record(event)
    assert record.state is State.ACCEPTED and record.delivery_status == "delivered"
    assert record.message_id == delivered["messageId"]
    [item] = sms.journal_records()
    assert item["resolved_by"] == "delivery_event:TEXT_DELIVERED" and item["delivery_final"] is True
    assert "sms_state" not in item  # accepted records leave the by_state index
    assert sms.reconcile()["unknown_count"] == 0
    assert len(sms.fake.calls) == 1


def test_delivery_status_is_kept_apart_from_the_send_state_and_never_goes_back_in_time(
    sms: SmsHarness,
) -> None:
    event = order_event()
    sms.publish(event)
    sms.deliver()
    key = key_of(event)
    queued = delivery_message(key, "TEXT_QUEUED", eventTimestamp=1_768_464_246_000, isFinal=False)
    blocked = delivery_message(key, "TEXT_CARRIER_BLOCKED", eventTimestamp=1_768_464_250_000, isFinal=True)
    late_pending = delivery_message(key, "TEXT_PENDING", eventTimestamp=1_768_464_248_000, isFinal=False)
    assert sms.delivery_event(queued, blocked, late_pending) == {"recorded": 2, "stale": 1}
    record = sms.record(event)
    assert record.state is State.ACCEPTED  # the gateway took it; the carrier blocked it
    assert record.delivery_status == "carrier_blocked"


def test_events_that_are_not_ours_change_nothing_and_unreadable_ones_are_not_lost(sms: SmsHarness) -> None:
    event = order_event()
    sms.publish(event)
    sms.deliver()
    foreign = delivery_message(key_of(event))
    foreign["context"] = {"account": "another-app"}
    voice = delivery_message(key_of(event), "VOICE_COMPLETED")
    expired = delivery_message("0" * 64)  # a record past its TTL
    assert sms.delivery_event(foreign, voice, expired) == {"not_ours": 2, "unknown_key": 1}
    assert sms.record(event).delivery_status is None
    with pytest.raises(ValueError, match="unreadable"):
        sms.delivery_event(json.dumps({"eventType": "TEXT_DELIVERED"}))  # retried, then kept by the DLQ


@pytest.mark.parametrize(
    ("message", "fields"),
    [
        (
            {"eventType": "TEXT_DELIVERED", "eventTimestamp": f"tel:{PHONE}", "messageId": PHONE},
            ["eventTimestamp"],
        ),
        (
            {"eventType": "TEXT_DELIVERED", "messageId": "m", "context": {"phone": 375291234567}},
            ["context.phone", "eventTimestamp"],
        ),
        (f'{{"eventType": "TEXT_DELIVERED", "destinationPhoneNumber": "{PHONE}"', ["message"]),
        (f'["{PHONE}"]', ["message"]),
    ],
    ids=["a-field", "missing-and-context", "no-json", "no-object"],
)
def test_an_unreadable_event_is_logged_by_its_fields_never_their_values(
    sms: SmsHarness, caplog: pytest.LogCaptureFixture, message: dict[str, Any] | str, fields: list[str]
) -> None:
    """An event may hold the customer's phone; the log names what was refused, never a value."""
    with pytest.raises(ValueError, match="1 unreadable"):
        sms.delivery_event(message if isinstance(message, str) else json.dumps(message))
    [record] = [record for record in caplog.records if record.getMessage() == "Unreadable SMS delivery event"]
    assert record.fields == fields
    logged = json.dumps([vars(record) for record in caplog.records], default=str)
    assert "375291234567" not in logged
