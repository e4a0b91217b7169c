"""The customer's language chooses the text: the CRM event's `customer.language`, else the phone's
country, else the fallback; the journal records what each notification costs (its parts)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.stub import ANY, Stubber

from pipeline import aws
from pipeline.sms.journal import State
from tests.unit.sms.conftest import PHONE, SmsHarness, key_of, order_event, recent

RUSSIAN_PHONE = "+79123456789"
GERMAN_PHONE = "+4915771234567"
RULES = {
    "schema_version": 2,
    "fallback_language": "en",
    "languages": ["en", "ru", "de"],
    "language_by_country": {"RU": "ru", "DE": "de"},
    "rules": [
        {
            "name": "ready_for_pickup",
            "status": "ready_for_pickup",
            "template": {
                "en": "{customer_name}, your order {order_id} is ready for pickup.",
                "ru": "{customer_name}, ваш заказ {order_id} готов к выдаче.",
                "de": "{customer_name}, Ihre Bestellung {order_id} ist abholbereit.",
            },
        }
    ],
}


@pytest.fixture
def languages(sms: SmsHarness, monkeypatch: pytest.MonkeyPatch) -> SmsHarness:
    monkeypatch.setenv("SMS_RULES_JSON", json.dumps(RULES, ensure_ascii=False))
    sms.service.reset_runtime()
    return sms


def send(
    sms: SmsHarness, phone: str, language: str | None = None, name: str = "Olga", order_id: str = "A-1"
) -> dict[str, Any]:
    event = order_event(order_id=order_id, phone=phone)
    event["customer"]["name"] = name
    if language is not None:
        event["customer"]["language"] = language
    sms.publish(event)
    sms.deliver()
    return event


def test_a_russian_customer_named_so_by_the_crm_gets_the_russian_text(languages: SmsHarness) -> None:
    # A Belarusian number (no country rule): the CRM's language field decides.
    event = send(languages, PHONE, language="ru-RU")

    assert languages.fake.texts_to(PHONE) == ["Olga, ваш заказ A-1 готов к выдаче."]
    record = languages.record(event)
    assert (record.parts, record.encoding) == (1, "UCS-2")
    assert languages.journal_records()[0]["language"] == "ru"


def test_without_a_language_field_the_phones_country_chooses_and_else_the_fallback(
    languages: SmsHarness,
) -> None:
    send(languages, RUSSIAN_PHONE, order_id="R-1")
    send(languages, GERMAN_PHONE, order_id="D-1")
    send(languages, PHONE, language="fr", order_id="B-1")  # not configured; Belarus has no rule

    assert languages.fake.texts_to(RUSSIAN_PHONE) == ["Olga, ваш заказ R-1 готов к выдаче."]
    assert languages.fake.texts_to(GERMAN_PHONE) == ["Olga, Ihre Bestellung D-1 ist abholbereit."]
    assert languages.fake.texts_to(PHONE) == ["Olga, your order B-1 is ready for pickup."]


def test_each_send_records_its_parts_and_a_field_longer_than_its_maximum_is_cut(
    languages: SmsHarness,
) -> None:
    # A 200-character name: cut to 40, so the text stays within what the synth counted.
    event = send(languages, GERMAN_PHONE, name="Ж" * 200)

    [text] = languages.fake.texts_to(GERMAN_PHONE)
    assert text == "Ж" * 40 + ", Ihre Bestellung A-1 ist abholbereit."
    record = languages.record(event)
    assert (record.parts, record.encoding) == (2, "UCS-2")  # 78 UCS-2 units: two parts of 67


def test_the_rules_max_price_goes_with_every_end_user_messaging_send(
    sms: SmsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SMS_GATEWAY", "end_user_messaging")
    monkeypatch.setenv("SMS_RULES_JSON", json.dumps({**RULES, "max_price": "0.05"}, ensure_ascii=False))
    sms.service.reset_runtime()
    event = order_event(order_id="P-1", phone=GERMAN_PHONE, occurred_at=recent())
    client = aws.non_retrying_client("pinpoint-sms-voice-v2")
    with Stubber(client) as stubber:
        stubber.add_response(
            "send_text_message",
            {"MessageId": "eum-1"},
            expected_params={
                "DestinationPhoneNumber": GERMAN_PHONE,
                "MessageBody": "Olga Ivanova, Ihre Bestellung P-1 ist abholbereit.",
                "MessageType": "TRANSACTIONAL",
                "MaxPrice": "0.05",
                # What is left of the rule's maximum age (test_sms_endstates checks it).
                "TimeToLive": ANY,
                "Context": {"notification_key": key_of(event)},
            },
        )
        sms.publish(event)
        sms.deliver()
        stubber.assert_no_pending_responses()
    assert sms.record(event).state is State.ACCEPTED
