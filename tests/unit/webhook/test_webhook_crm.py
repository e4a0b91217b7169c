"""POST /crm/events: signature, validation, and what reaches SNS."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from pipeline import phones
from pipeline.crm import contract
from pipeline.envelope import Envelope, fifo_keys
from tests.unit.webhook.support import (
    CRM_KEY,
    CRM_ORDER_EVENT,
    CRM_ORDER_FIXTURES,
    CRM_PATH,
    CapturedOutput,
    Invoke,
    Pipeline,
    assert_crm_unauthorized,
    crm_event,
    http_event,
    load_fixture,
    metrics_emitted,
    response_json,
)

ORDER_EVENT = CRM_ORDER_EVENT


@pytest.mark.parametrize("fixture", CRM_ORDER_FIXTURES, ids=lambda path: path.stem)
def test_signed_event_publishes_one_envelope(invoke: Invoke, pipeline: Pipeline, fixture: Path) -> None:
    event = load_fixture(fixture)

    response = invoke(crm_event(event, request_id="crm-req-1"))

    assert response["statusCode"] == 200
    assert response_json(response) == {"ok": True, "event_id": f"crm:{event['event_id']}"}
    [published] = pipeline.published()
    envelope = Envelope.parse(published.envelope)
    assert envelope.event_id == f"crm:{event['event_id']}"
    assert (envelope.source, envelope.type, envelope.correlation_id) == (
        "crm",
        "order.status_changed",
        "crm-req-1",
    )
    # Raw body as received, including the fields the model does not know (`crm`, `total`, ...).
    assert envelope.payload == event
    assert published.attributes == {
        "source": "crm",
        "type": "order.status_changed",
        "status": event["order"]["status"],
    }
    # Grouped by order; deduplicated on the change's content, never on the reusable event id.
    [request] = pipeline.publishes
    assert request["MessageGroupId"] == f"crm:order:crm:{event['order']['id']}"
    assert request["MessageDeduplicationId"] == fifo_keys(envelope).deduplication_id
    assert event["event_id"] not in request["MessageDeduplicationId"]


def test_base64_body_is_verified_over_its_decoded_bytes(invoke: Invoke, pipeline: Pipeline) -> None:
    raw = json.dumps(load_fixture(ORDER_EVENT), ensure_ascii=False).encode()

    response = invoke(crm_event(raw))

    assert response["statusCode"] == 200
    assert len(pipeline.published()) == 1


def _with_signature(header: str | None) -> dict[str, Any]:
    raw = json.dumps(load_fixture(ORDER_EVENT))
    headers = {} if header is None else {"x-signature": header}
    return http_event(CRM_PATH, body=raw, headers=headers)


def _signature_for(body: str, key: str = CRM_KEY, age: int = 0) -> str:
    return contract.sign(key, body.encode(), int(time.time()) - age)


BODY = json.dumps(load_fixture(ORDER_EVENT))


# Headers are built when the test runs: a timestamp taken at collection would drift.
@pytest.mark.parametrize(
    ("make_header", "detail"),
    [
        (lambda: None, "missing"),
        (lambda: "", "missing"),
        (lambda: "sha256=abc", "malformed"),
        (lambda: "t=abc,v1=" + "0" * 64, "malformed"),
        (lambda: f"t={int(time.time())}", "malformed"),
        (lambda: f"t={int(time.time())},v1=xyz", "malformed"),
        (lambda: _signature_for(BODY).upper(), "malformed"),
        (lambda: _signature_for(BODY, key="not-the-key"), "mismatch"),
        (lambda: _signature_for(BODY + " "), "mismatch"),
        (lambda: _signature_for(BODY, age=301), "stale"),
        (lambda: _signature_for(BODY, age=-301), "stale"),
    ],
    ids=[
        "absent",
        "empty",
        "other-scheme",
        "bad-timestamp",
        "no-v1",
        "bad-hex",
        "upper-case",
        "wrong-key",
        "other-body",
        "too-old",
        "from-the-future",
    ],
)
def test_bad_signature_is_401_and_publishes_nothing(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput, make_header: Any, detail: str
) -> None:
    response = invoke(_with_signature(make_header()))

    assert_crm_unauthorized(response, pipeline, output, detail)


def test_signature_of_another_timestamp_is_rejected(invoke: Invoke, pipeline: Pipeline) -> None:
    signed = _signature_for(BODY)
    timestamp, digest = signed.split(",")
    replayed = f"t={int(timestamp[2:]) - 1},{digest}"

    response = invoke(_with_signature(replayed))

    assert response["statusCode"] == 401
    assert pipeline.published() == []


def test_signed_body_that_is_not_json_is_400(invoke: Invoke, pipeline: Pipeline) -> None:
    response = invoke(crm_event("order=42&status=shipped"))

    assert response["statusCode"] == 400
    assert response_json(response)["error"] == "invalid"
    assert pipeline.published() == []


def _mutated(change: Any) -> dict[str, Any]:
    event = load_fixture(ORDER_EVENT)
    change(event)
    return event


@pytest.mark.parametrize(
    ("event", "loc"),
    [
        (_mutated(lambda e: e["customer"].pop("phone")), ["customer", "phone"]),
        (_mutated(lambda e: e.update(occurred_at="2026-01-15T09:30:12")), ["occurred_at"]),
        (_mutated(lambda e: e.update(occurred_at="yesterday")), ["occurred_at"]),
        (_mutated(lambda e: e.update(type=42)), ["type"]),
        (_mutated(lambda e: e.pop("event_id")), ["event_id"]),
        (_mutated(lambda e: e["order"].update(status="")), ["order", "status"]),
        (_mutated(lambda e: e["order"].update(id=42)), ["order", "id"]),
        (_mutated(lambda e: e["order"].update(status="shipped\x00")), ["order", "status"]),
        ([load_fixture(ORDER_EVENT)], []),
    ],
    ids=[
        "no-phone",
        "naive-datetime",
        "not-a-datetime",
        "numeric-type",
        "no-event-id",
        "empty-status",
        "numeric-order-id",
        "control-char-status",
        "array",
    ],
)
def test_invalid_event_is_422_with_field_errors(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput, event: Any, loc: list[str]
) -> None:
    response = invoke(crm_event(event))

    assert response["statusCode"] == 422
    answer = response_json(response)
    assert answer["error"] == "invalid"
    assert [error["loc"] for error in answer["errors"]] == [loc]
    assert all(set(error) == {"loc", "msg"} for error in answer["errors"])
    assert pipeline.published() == []
    assert ("EventsRejected", {"source": "crm", "reason": "invalid"}) in metrics_emitted(output.lines())


@pytest.mark.parametrize(
    ("event", "dimension"),
    [
        (_mutated(lambda e: e.update(type="order.created")), "order.created"),
        ({"type": "customer.updated", "id": 7}, "customer.updated"),  # no other field is judged
        ({"type": "what ever\n"}, "other"),  # a metric dimension only when it looks like a type
    ],
    ids=["order-created", "other-shape", "odd-type"],
)
def test_an_event_type_not_handled_is_acknowledged_counted_and_not_published(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput, event: Any, dimension: str
) -> None:
    response = invoke(crm_event(event))

    assert response["statusCode"] == 200
    assert response_json(response) == {"ok": True, "ignored": dimension}
    assert pipeline.published() == []
    emitted = metrics_emitted(output.lines())
    assert ("EventsIgnored", {"source": "crm", "type": dimension}) in emitted
    assert not [name for name, _ in emitted if name in ("EventsAccepted", "EventsRejected")]


@pytest.mark.parametrize("key", [None, "not-the-key"], ids=["unsigned", "wrong-key"])
def test_an_unauthenticated_event_of_a_type_not_handled_is_still_401(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput, key: str | None
) -> None:
    response = invoke(crm_event(_mutated(lambda e: e.update(type="order.created")), key=key))

    assert response["statusCode"] == 401
    assert pipeline.published() == []
    assert "EventsIgnored" not in [name for name, _ in metrics_emitted(output.lines())]


def test_422_never_echoes_the_phone_number(invoke: Invoke) -> None:
    bad_phone = "+0491709876543"
    event = _mutated(lambda e: e["customer"].update(phone=bad_phone))

    response = invoke(crm_event(event))

    assert response["statusCode"] == 422
    assert bad_phone not in response["body"]
    assert "0491709876543" not in response["body"]


# -- customer.phone: one customer, one recipient ----------------------------------------------------
BY_NUMBER = "+375291234567"
BY_FORMS = ["+375 29 123-45-67", "+375 (29) 123-45-67", "+375-29-1234567", BY_NUMBER]
BY_NATIONAL_FORMS = ["8 029 123-45-67", "8 (029) 123-45-67"]


def _with_phone(phone: str, event_id: str = "evt-phone-1") -> dict[str, Any]:
    return _mutated(lambda e: (e["customer"].update(phone=phone), e.update(event_id=event_id)))


def _published_phones(pipeline: Pipeline) -> list[str]:
    return [Envelope.parse(p.envelope).payload["customer"]["phone"] for p in pipeline.published()]


def test_every_international_form_of_one_number_is_published_as_one_e164_string(
    invoke: Invoke, pipeline: Pipeline
) -> None:
    for index, written in enumerate(BY_FORMS):
        assert invoke(crm_event(_with_phone(written, f"evt-{index}")))["statusCode"] == 200

    assert _published_phones(pipeline) == [BY_NUMBER] * len(BY_FORMS)


def test_the_published_payload_is_the_received_one_but_for_the_phone(
    invoke: Invoke, pipeline: Pipeline
) -> None:
    received = _with_phone("+375 (29) 123-45-67")

    assert invoke(crm_event(received))["statusCode"] == 200

    [published] = pipeline.published()
    payload = Envelope.parse(published.envelope).payload
    assert payload == {**received, "customer": {**received["customer"], "phone": BY_NUMBER}}


def test_national_forms_are_published_in_e164_with_the_default_region(
    invoke: Invoke, pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(phones.DEFAULT_REGION_ENV, "BY")
    forms = [*BY_NATIONAL_FORMS, *BY_FORMS]
    for index, written in enumerate(forms):
        assert invoke(crm_event(_with_phone(written, f"evt-{index}")))["statusCode"] == 200

    assert _published_phones(pipeline) == [BY_NUMBER] * len(forms)


@pytest.mark.parametrize("region", [None, ""], ids=["unset", "blank"])
def test_a_national_form_without_a_default_region_is_refused(
    invoke: Invoke,
    pipeline: Pipeline,
    output: CapturedOutput,
    monkeypatch: pytest.MonkeyPatch,
    region: str | None,
) -> None:
    if region is None:
        monkeypatch.delenv(phones.DEFAULT_REGION_ENV, raising=False)
    else:
        monkeypatch.setenv(phones.DEFAULT_REGION_ENV, region)

    response = invoke(crm_event(_with_phone("8 029 123-45-67")))

    assert response["statusCode"] == 422
    answer = response_json(response)
    assert answer["error"] == "invalid_phone"
    [error] = answer["errors"]
    assert error["loc"] == ["customer", "phone"]
    assert "no default region" in error["msg"]
    assert pipeline.published() == []
    assert ("EventsRejected", {"source": "crm", "reason": "invalid_phone"}) in metrics_emitted(output.lines())


@pytest.mark.parametrize(
    ("written", "why"),
    [
        ("+375 12", "not a phone number"),
        ("not-a-phone", "not a phone number"),
        ("+375 11 111-11-11", "not a valid phone number for region BY"),
        ("+0491701234567", "not a phone number"),
        ("8 029 12", "not a valid phone number for region BY"),
    ],
    ids=["too-short", "letters", "invalid-BY-number", "leading-zero-country-code", "short-national"],
)
def test_an_impossible_phone_is_422_invalid_phone_and_publishes_nothing(
    invoke: Invoke,
    pipeline: Pipeline,
    output: CapturedOutput,
    monkeypatch: pytest.MonkeyPatch,
    written: str,
    why: str,
) -> None:
    monkeypatch.setenv(phones.DEFAULT_REGION_ENV, "BY")

    response = invoke(crm_event(_with_phone(written)))

    assert response["statusCode"] == 422
    answer = response_json(response)
    assert answer["error"] == "invalid_phone"
    assert [(e["loc"], e["msg"].startswith(why)) for e in answer["errors"]] == [(["customer", "phone"], True)]
    assert pipeline.published() == []
    text = output.text()
    digits = "".join(char for char in written if char.isdigit())
    for shown in (response["body"], text):
        assert written not in shown
        assert not digits or digits not in shown
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert ("EventsRejected", {"source": "crm", "reason": "invalid_phone"}) in metrics_emitted(lines)


def test_an_event_broken_besides_its_phone_is_rejected_as_invalid(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput
) -> None:
    event = _with_phone("+375 12")
    event.pop("event_id")

    response = invoke(crm_event(event))

    assert response["statusCode"] == 422
    answer = response_json(response)
    assert answer["error"] == "invalid"
    assert sorted(e["loc"] for e in answer["errors"]) == [["customer", "phone"], ["event_id"]]
    assert pipeline.published() == []
    assert ("EventsRejected", {"source": "crm", "reason": "invalid"}) in metrics_emitted(output.lines())
