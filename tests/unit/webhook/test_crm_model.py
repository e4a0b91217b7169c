"""`pipeline.crm.contract`: the order-status event model and the request signature."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path
from typing import Any

import pytest

from pipeline.crm import contract
from pipeline.crm.contract import SignatureCheck, sign, verify
from pipeline.crm.event_model import CrmEvent
from pipeline.validation import Invalid
from tests.unit.webhook.support import CRM_ORDER_EVENT, CRM_ORDER_FIXTURES, load_fixture

KEY = "signing-key-for-tests"
BODY = b'{"event_id":"e1","type":"order.status_changed"}'
NOW = 1_768_469_412


def test_signature_is_hmac_sha256_of_timestamp_dot_body() -> None:
    expected = hmac.new(KEY.encode(), f"{NOW}.".encode() + BODY, hashlib.sha256).hexdigest()
    assert sign(KEY, BODY, NOW) == f"t={NOW},v1={expected}"


@pytest.mark.parametrize("age", [0, 1, 299, 300, -300])
def test_signature_inside_the_tolerance_is_valid(age: int) -> None:
    assert verify(sign(KEY, BODY, NOW - age), BODY, [KEY], now=NOW) is SignatureCheck.VALID


@pytest.mark.parametrize("age", [301, 3600, -301])
def test_signature_outside_the_tolerance_is_stale(age: int) -> None:
    assert verify(sign(KEY, BODY, NOW - age), BODY, [KEY], now=NOW) is SignatureCheck.STALE


def test_any_candidate_key_is_accepted() -> None:
    header = sign("previous-key", BODY, NOW)
    assert verify(header, BODY, ["current-key", "previous-key"], now=NOW) is SignatureCheck.VALID
    assert verify(header, BODY, ["current-key"], now=NOW) is SignatureCheck.MISMATCH
    assert verify(header, BODY, [], now=NOW) is SignatureCheck.MISMATCH


def test_any_of_several_signatures_is_accepted() -> None:
    valid = sign(KEY, BODY, NOW).split(",")[1]
    header = f"t={NOW},v1={'0' * 64},{valid},v0=legacy"
    assert verify(header, BODY, [KEY], now=NOW) is SignatureCheck.VALID


def test_changed_body_does_not_match() -> None:
    assert verify(sign(KEY, BODY, NOW), BODY + b" ", [KEY], now=NOW) is SignatureCheck.MISMATCH


@pytest.mark.parametrize("header", [None, ""])
def test_missing_signature(header: str | None) -> None:
    assert verify(header, BODY, [KEY], now=NOW) is SignatureCheck.MISSING


@pytest.mark.parametrize(
    "header",
    [
        "garbage",
        f"t={NOW}",
        "v1=" + "a" * 64,
        f"t={NOW},v1=" + "a" * 63,
        f"t={NOW},v1=" + "A" * 64,
        f"t={NOW},v1=" + "g" * 64,
        f"t=-{NOW},v1=" + "a" * 64,
        f"t={NOW},t={NOW},v1=" + "a" * 64,
        f"t={NOW}.5,v1=" + "a" * 64,
        f"t={NOW};v1=" + "a" * 64,
        f"t={NOW},v1=" + "a" * 64 + ",",
        "t=" + "9" * 40 + ",v1=" + "a" * 64,
        "t=١٢٣,v1=" + "a" * 64,
    ],
)
def test_malformed_signature(header: str) -> None:
    assert verify(header, BODY, [KEY], now=NOW) is SignatureCheck.MALFORMED


def test_comparison_is_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[str, str]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(contract.hmac, "compare_digest", spy)
    assert verify(sign(KEY, BODY, NOW), BODY, ["other", KEY], now=NOW) is SignatureCheck.VALID
    # Both keys were compared: no early exit on the first match or mismatch.
    assert len(compared) == 2


@pytest.mark.parametrize("fixture", CRM_ORDER_FIXTURES, ids=lambda path: path.stem)
def test_fixtures_are_valid_events(fixture: Path) -> None:
    event = CrmEvent.parse(load_fixture(fixture))
    assert event.type == "order.status_changed"
    assert event.occurred_at.tzinfo is not None


def test_unknown_fields_are_kept() -> None:
    event = CrmEvent.parse(load_fixture(CRM_ORDER_EVENT))
    assert event.extra == {"crm": {"account": "shop-eu", "webhook_version": 3}}
    assert event.order.extra["tracking_number"] == "00340434161094042557"


def _order_event(**changes: Any) -> dict[str, Any]:
    data = load_fixture(CRM_ORDER_EVENT)
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        target = data
        for parent in parents:
            target = target[parent]
        target[leaf] = value
    return data


@pytest.mark.parametrize(
    "changes",
    [
        {"occurred_at": "2026-01-15T09:30:12"},
        {"type": "order.created"},
        {"customer__phone": "+12345"},
        {"customer__phone": "+1234567890123456"},
        {"customer__phone": 491701234567},
        {"order__status": ""},
        {"order__previous_status": 3},
        {"event_id": ""},
    ],
)
def test_invalid_events(changes: dict[str, Any]) -> None:
    with pytest.raises(Invalid):
        CrmEvent.parse(_order_event(**changes))


def test_previous_status_may_be_null_or_absent() -> None:
    assert CrmEvent.parse(_order_event(order__previous_status=None)).order.previous_status is None
    data = _order_event()
    del data["order"]["previous_status"]
    assert CrmEvent.parse(data).order.previous_status is None


# One Belarusian mobile number as CRMs write it; E.164 is what every consumer must see.
BY_NUMBER = "+375291234567"
INTERNATIONAL_FORMS = ["+375 29 123-45-67", "+375 (29) 123-45-67", "+375-29-1234567", BY_NUMBER]
NATIONAL_FORMS = ["8 029 123-45-67", "8 (029) 123-45-67", "80291234567"]


@pytest.mark.parametrize("written", INTERNATIONAL_FORMS)
def test_international_phone_forms_validate_to_e164_without_a_region(written: str) -> None:
    assert CrmEvent.parse(_order_event(customer__phone=written)).customer.phone == BY_NUMBER


@pytest.mark.parametrize("written", [*INTERNATIONAL_FORMS, *NATIONAL_FORMS])
def test_national_phone_forms_validate_to_e164_in_the_default_region(written: str) -> None:
    event = CrmEvent.parse(_order_event(customer__phone=written), phone_default_region="BY")
    assert event.customer.phone == BY_NUMBER


@pytest.mark.parametrize("written", NATIONAL_FORMS)
def test_national_phone_forms_are_refused_without_a_region(written: str) -> None:
    with pytest.raises(Invalid) as raised:
        CrmEvent.parse(_order_event(customer__phone=written))
    [error] = raised.value.errors()
    assert (error["loc"], error["type"]) == (("customer", "phone"), contract.PHONE_ERROR_TYPE)
    assert "no default region" in error["msg"]


@pytest.mark.parametrize(
    ("written", "why"),
    [
        ("+375 12", "not a phone number"),
        ("call me maybe", "not a phone number"),
        ("+375 11 111-11-11", "not a valid phone number for region BY"),
        ("+999 1234567", "not a phone number"),
    ],
    ids=["too-short", "letters", "invalid-for-BY", "unknown-country-code"],
)
def test_impossible_phones_are_refused_saying_why_but_not_which(written: str, why: str) -> None:
    with pytest.raises(Invalid) as raised:
        CrmEvent.parse(_order_event(customer__phone=written), phone_default_region="BY")
    [error] = raised.value.errors(include_input=False)
    assert (error["loc"], error["type"]) == (("customer", "phone"), contract.PHONE_ERROR_TYPE)
    assert error["msg"].startswith(why)
    digits = "".join(char for char in written if char.isdigit())
    assert written not in str(raised.value)
    assert not digits or digits not in str(raised.value)


def test_the_published_payload_is_the_raw_one_with_the_phone_in_e164() -> None:
    raw = _order_event(customer__phone="8 029 123-45-67")
    event = CrmEvent.parse(raw, phone_default_region="BY")

    published = event.normalised_payload(raw)

    assert published["customer"]["phone"] == BY_NUMBER
    assert {**published, "customer": {**published["customer"], "phone": "8 029 123-45-67"}} == raw
    assert raw["customer"]["phone"] == "8 029 123-45-67"  # the received payload is left as it was
