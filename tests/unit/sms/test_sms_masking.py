"""The customer's phone number never appears in a log line, whatever path a notification takes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pipeline.sms.gateways import FakeBehaviour
from tests.unit.consumer_support import Output
from tests.unit.sms.conftest import (
    LOOKUP_SETTLE_SECONDS,
    MASKED_PHONE,
    PHONE,
    SmsHarness,
    delivery_message,
    key_of,
    order_event,
)


def test_the_phone_is_masked_in_every_log_line(
    sms: SmsHarness, output: Callable[[Any], Output], capsys: pytest.CaptureFixture[str]
) -> None:
    captured = output(sms.worker)
    # accepted after a refusal; unknown then resent by the reconciler; refused for good (the
    # gateway's message quotes the number) and dead-lettered; a delivery event; a bad event.
    sms.fake.then(
        FakeBehaviour.REFUSE,
        FakeBehaviour.ACCEPT,
        FakeBehaviour.TIMEOUT_BEFORE_ACCEPT,
        FakeBehaviour.REFUSE_PERMANENTLY,
    )
    retried, lost, refused = (order_event(order_id=f"ORD-{n}") for n in (1, 2, 3))
    sms.publish(retried)
    sms.deliver()
    sms.wait_for_retry()
    sms.deliver()
    for event in (lost, refused):
        sms.publish(event)
        sms.deliver()
    sms.clock.advance(LOOKUP_SETTLE_SECONDS)  # a lookup that misses proves nothing sooner
    sms.reconcile()
    sms.delivery_event(delivery_message(key_of(retried)))
    broken = order_event(order_id="ORD-4")
    broken["customer"]["phone"] = PHONE.replace("+", "00")  # not E.164: refused with the field name only
    sms.publish(broken)
    sms.deliver()

    lines = captured.read()
    printed = capsys.readouterr()
    text = "\n".join(str(line) for line in lines) + printed.out + printed.err
    assert PHONE not in text and PHONE.lstrip("+") not in text
    # The lines were captured (this test would pass vacuously otherwise) and name the masked number.
    masked = [line for line in lines if line.get("recipient") == MASKED_PHONE]
    assert {line["message"] for line in masked} >= {
        "SMS notification recorded",
        "SMS attempt finished",
        "SMS outcome unknown: left to the reconciler, not resent",
        "SMS proven not received: resending once with the same key",
    }
    [dead] = captured.logs("record sent to the DLQ")[-1:]
    assert dead["reason"] == "invalid CRM order event (customer.phone)"
    letters = sms.queues.dead_letters()
    assert [letter["attributes"]["dead_letter_reason"] for letter in letters] == [
        "gateway refused the SMS for good (InvalidNumber)",
        "invalid CRM order event (customer.phone)",
    ]
    assert all(PHONE not in str(record.attempts) for record in map(sms.record, (retried, lost, refused)))
