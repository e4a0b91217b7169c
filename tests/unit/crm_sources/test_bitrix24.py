"""Bitrix24: outgoing-webhook events, crm.deal.get / crm.contact.get answers, the REST client's errors."""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from pipeline.crm.bitrix24 import DEAL_EVENTS, Bitrix24Rest, Contact, Deal, OutgoingEvent
from pipeline.crm.forms import parse_form
from pipeline.errors import AccountRefused, PermanentError, RemoteRefused, TransientError
from pipeline.observability import mask_phone
from pipeline.validation import Invalid
from tests.unit.consumers.conftest import FakeHttpServer, Scripted
from tests.unit.crm_sources.conftest import fixture_bytes, fixture_json

APP_TOKEN = "localBitrixAppToken0123456789"
CODE = "k3y7webhookcode9"
MSK = timezone(timedelta(hours=3))


def event_form(name: str) -> dict[str, Any]:
    return parse_form(fixture_bytes("bitrix24", name))


def deal_result(**changes: Any) -> dict[str, Any]:
    result: dict[str, Any] = fixture_json("bitrix24", "crm.deal.get.json")["result"]
    return {**result, **changes}


def contact_result(**changes: Any) -> dict[str, Any]:
    result: dict[str, Any] = fixture_json("bitrix24", "crm.contact.get.json")["result"]
    return {**result, **changes}


def phone(value: str, kind: str) -> dict[str, str]:
    return {"ID": "1", "VALUE_TYPE": kind, "VALUE": value, "TYPE_ID": "PHONE"}


# -- outgoing webhook events ---------------------------------------------------------------------
def test_a_deal_update_event_from_the_vendor_body() -> None:
    event = OutgoingEvent.from_form(event_form("ONCRMDEALUPDATE.form"))

    assert (event.event, event.deal_id, event.ts, event.event_handler_id) == (
        "ONCRMDEALUPDATE",
        759,
        1704784507,
        "201",
    )
    assert (event.domain, event.member_id) == ("example-shop.bitrix24.by", "0f1e2d3c4b5a69788796a5b4c3d2e1f0")
    assert event.application_token == APP_TOKEN
    assert event.is_deal_event


def test_a_deal_add_event_from_the_vendor_body() -> None:
    event = OutgoingEvent.from_form(event_form("ONCRMDEALADD.form"))

    assert (event.event, event.deal_id, event.is_deal_event) == ("ONCRMDEALADD", 760, True)
    assert DEAL_EVENTS == ("ONCRMDEALADD", "ONCRMDEALUPDATE")


def test_the_event_name_is_upper_cased_and_other_events_are_not_deal_events() -> None:
    form = event_form("ONCRMDEALUPDATE.form")

    assert OutgoingEvent.from_form({**form, "event": "onCrmDealUpdate"}).event == "ONCRMDEALUPDATE"
    assert not OutgoingEvent.from_form({**form, "event": "ONCRMLEADADD"}).is_deal_event


def test_the_token_never_shows_in_repr_or_str() -> None:
    event = OutgoingEvent.from_form(event_form("ONCRMDEALUPDATE.form"))

    for text in (repr(event), str(event)):
        assert APP_TOKEN not in text


def test_token_matches_compares_with_the_configured_token() -> None:
    event = OutgoingEvent.from_form(event_form("ONCRMDEALUPDATE.form"))

    assert event.token_matches(APP_TOKEN)
    assert not event.token_matches(APP_TOKEN + "x")
    assert not event.token_matches("")


def test_optional_fields_may_be_absent() -> None:
    form = {"event": "ONCRMDEALUPDATE", "data": {"FIELDS": {"ID": "5"}}, "auth": {"application_token": "t0k"}}

    event = OutgoingEvent.from_form(form)

    assert (event.deal_id, event.ts, event.domain, event.member_id, event.event_handler_id) == (
        5,
        None,
        None,
        None,
        None,
    )


def without(form: dict[str, Any], *path: str) -> dict[str, Any]:
    copy = json.loads(json.dumps(form))
    node = copy
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return copy


def replaced(form: dict[str, Any], value: Any, *path: str) -> dict[str, Any]:
    copy = json.loads(json.dumps(form))
    node = copy
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return copy


FORM = event_form("ONCRMDEALUPDATE.form")


@pytest.mark.parametrize(
    ("form", "field"),
    [
        (without(FORM, "auth", "application_token"), "auth[application_token]"),
        (replaced(FORM, "", "auth", "application_token"), "auth[application_token]"),
        (replaced(FORM, "   ", "auth", "application_token"), "auth[application_token]"),
        (without(FORM, "auth"), "auth[application_token]"),
        (without(FORM, "data", "FIELDS", "ID"), "data[FIELDS][ID]"),
        (replaced(FORM, "not-a-number", "data", "FIELDS", "ID"), "data[FIELDS][ID]"),
        (replaced(FORM, "0", "data", "FIELDS", "ID"), "data[FIELDS][ID]"),
        (replaced(FORM, "deal", "data", "FIELDS"), "data[FIELDS][ID]"),
        (without(FORM, "event"), "event"),
        (replaced(FORM, "ON CRM", "event"), "event"),
        (replaced(FORM, "yesterday", "ts"), "ts"),
    ],
)
def test_a_bad_event_names_the_form_field_and_never_the_token(form: dict[str, Any], field: str) -> None:
    with pytest.raises(Invalid) as caught:
        OutgoingEvent.from_form(form)

    assert field in [".".join(map(str, error["loc"])) for error in caught.value.errors()]
    assert field in str(caught.value)
    assert APP_TOKEN not in str(caught.value) and APP_TOKEN not in repr(caught.value)
    assert "not-a-number" not in str(caught.value)


# -- crm.deal.get / crm.contact.get --------------------------------------------------------------
def test_a_deal_from_the_crm_deal_get_fixture() -> None:
    deal = Deal.from_result(deal_result())

    assert (deal.id, deal.title, deal.stage_id, deal.category_id, deal.contact_id) == (
        759,
        "Order #1042",
        "C2:PREPARATION",
        "2",
        1234,
    )
    assert deal.moved_time == datetime(2024, 1, 9, 10, 15, 7, tzinfo=MSK)
    assert deal.moved_time is not None and deal.moved_time.astimezone(UTC).hour == 7
    assert deal.date_modify == datetime(2024, 1, 9, 10, 15, 7, tzinfo=MSK)
    assert (deal.opportunity, deal.currency_id) == ("129.00", "BYN")


@pytest.mark.parametrize("contact_id", ["0", "", None, 0])
def test_a_deal_without_a_contact(contact_id: Any) -> None:
    assert Deal.from_result(deal_result(CONTACT_ID=contact_id)).contact_id is None


def test_deal_defaults_and_loose_types() -> None:
    minimal = {"ID": "7", "STAGE_ID": "NEW"}
    deal = Deal.from_result(minimal)
    assert (deal.title, deal.category_id, deal.moved_time, deal.opportunity) == ("", "0", None, None)

    loose = Deal.from_result(
        {**minimal, "TITLE": None, "CATEGORY_ID": 4, "OPPORTUNITY": 99.5, "MOVED_TIME": ""}
    )
    assert (loose.title, loose.category_id, loose.opportunity, loose.moved_time) == ("", "4", "99.5", None)


@pytest.mark.parametrize(
    ("result", "field"),
    [
        ({k: v for k, v in deal_result().items() if k != "STAGE_ID"}, "STAGE_ID"),
        (deal_result(STAGE_ID=""), "STAGE_ID"),
        (deal_result(ID="abc"), "ID"),
        (deal_result(MOVED_TIME="2024-01-09T10:15:07"), "MOVED_TIME"),  # no offset: refused
        (deal_result(CONTACT_ID="someone"), "CONTACT_ID"),
    ],
)
def test_a_malformed_deal_names_the_field(result: dict[str, Any], field: str) -> None:
    with pytest.raises(Invalid) as caught:
        Deal.from_result(result)
    assert [error["loc"] for error in caught.value.errors()] == [(field,)]


def test_a_contact_from_the_crm_contact_get_fixture_texts_the_mobile_number() -> None:
    contact = Contact.from_result(contact_result())

    assert (contact.id, contact.name, contact.last_name, contact.display_name) == (
        1234,
        "Anna",
        "Kowalczyk",
        "Anna Kowalczyk",
    )
    assert contact.phones == ("+375 17 222-33-44", "+375 29 123-45-67")
    assert contact.phone_types == ("WORK", "MOBILE")
    assert contact.phone() == "+375 29 123-45-67"  # MOBILE, though WORK comes first


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        ([phone("+375 33 765-43-21", "HOME"), phone("+375 17 222-33-44", "WORK")], "+375 17 222-33-44"),
        ([phone("+375 33 765-43-21", "HOME"), phone("+375 17 222-33-44", "OTHER")], "+375 33 765-43-21"),
        ([phone("  ", "MOBILE"), phone("+375 17 222-33-44", "FAX")], "+375 17 222-33-44"),
        ([phone("+375 29 123-45-67", "mobile")], "+375 29 123-45-67"),
        ([{"VALUE": "+375 29 123-45-67"}, "junk", {"VALUE": None}], "+375 29 123-45-67"),
        ([], None),
    ],
)
def test_phone_choice(entries: list[Any], expected: str | None) -> None:
    assert Contact.from_result(contact_result(PHONE=entries)).phone() == expected


def test_a_contact_without_phone_or_names() -> None:
    result = {k: v for k, v in contact_result(NAME="", LAST_NAME=None).items() if k != "PHONE"}

    contact = Contact.from_result(result)

    assert (contact.phones, contact.phone(), contact.name, contact.display_name) == ((), None, None, "")


# -- the REST client -----------------------------------------------------------------------------
def rest(http_fake: FakeHttpServer, timeout: float = 5.0) -> Bitrix24Rest:
    return Bitrix24Rest(f"{http_fake.base_url}/rest/1/{CODE}/", timeout=timeout)


def test_deal_posts_crm_deal_get_with_the_id(http_fake: FakeHttpServer) -> None:
    http_fake.respond(Scripted(200, fixture_json("bitrix24", "crm.deal.get.json")))

    deal = rest(http_fake).deal(759)

    assert (deal.id, deal.stage_id) == (759, "C2:PREPARATION")
    [request] = http_fake.requests
    assert (request.method, request.path, request.body) == (
        "POST",
        f"/rest/1/{CODE}/crm.deal.get.json",
        {"id": 759},
    )
    assert request.headers["content-type"] == "application/json"


def test_contact_posts_crm_contact_get_with_the_id(http_fake: FakeHttpServer) -> None:
    http_fake.respond(Scripted(200, fixture_json("bitrix24", "crm.contact.get.json")))

    contact = rest(http_fake).contact(1234)

    assert contact.phone() == "+375 29 123-45-67"
    [request] = http_fake.requests
    assert (request.path, request.body) == (f"/rest/1/{CODE}/crm.contact.get.json", {"id": 1234})


def test_call_returns_the_result_and_none_without_one(http_fake: FakeHttpServer) -> None:
    http_fake.respond(Scripted(200, {"result": 3465, "time": {}}), Scripted(200, {"time": {}}))
    client = Bitrix24Rest(f"{http_fake.base_url}/rest/1/{CODE}")  # no trailing slash either

    assert client.call("crm.lead.add", {"fields": {"TITLE": "x"}}) == 3465
    assert client.call("profile", {}) is None
    assert [r.path for r in http_fake.requests] == [
        f"/rest/1/{CODE}/crm.lead.add.json",
        f"/rest/1/{CODE}/profile.json",
    ]


@pytest.mark.parametrize(
    ("status", "body", "kind", "reason"),
    [
        (
            400,
            fixture_json("bitrix24", "crm.deal.get.not_found.json"),
            "not_found",
            "HTTP 400 error: Not found",
        ),
        (400, {"error": "NOT_FOUND", "error_description": "Deal is gone"}, "not_found", None),
        (
            403,
            {"error": "INVALID_CREDENTIALS", "error_description": "Invalid request credentials"},
            "unauthorized",
            None,
        ),
        (
            403,
            {"error": "insufficient_scope", "error_description": "The request requires higher privileges"},
            "unauthorized",
            None,
        ),
        (403, {"error": "ACCESS_DENIED", "error_description": "Access denied"}, "unauthorized", None),
        (
            400,
            {"error": "", "error_description": "Access denied"},
            "unauthorized",
            "HTTP 400 error: Access denied",
        ),
        (403, None, "unauthorized", "HTTP 403"),
        (404, {"error": "ERROR_METHOD_NOT_FOUND", "error_description": "Method not found!"}, "refused", None),
        (400, {"error": "", "error_description": "ID is not defined or invalid."}, "refused", None),
        (
            400,
            {"error": "ERROR_CORE", "error_description": "Parameter 'fields' must be array."},
            "refused",
            None,
        ),
        (302, None, "refused", "HTTP 302"),
    ],
)
def test_refusals_are_classified_by_kind(
    http_fake: FakeHttpServer, status: int, body: Any, kind: str, reason: str | None
) -> None:
    http_fake.respond(Scripted(status, body))

    with pytest.raises(RemoteRefused) as caught:
        rest(http_fake).deal(759)

    assert isinstance(caught.value, PermanentError)
    assert caught.value.kind == kind
    expected = reason or f"HTTP {status} {body['error'] or 'error'}: {body['error_description']}"
    assert caught.value.reason == f"bitrix24 crm.deal.get: {expected}"


@pytest.mark.parametrize(
    ("status", "body", "cause"),
    [
        (401, fixture_json("bitrix24", "error.invalid_credentials.json"), "unauthorized"),
        (401, {"error": "NO_AUTH_FOUND", "error_description": "Wrong authorization data"}, "unauthorized"),
        (
            401,
            {"error": "expired_token", "error_description": "The access token provided has expired"},
            "unauthorized",
        ),
        (
            401,
            {"error": "invalid_token", "error_description": "The access token provided is invalid"},
            "unauthorized",
        ),
        (
            401,
            {"error": "insufficient_scope", "error_description": "The request requires higher privileges"},
            "unauthorized",
        ),
        (401, None, "unauthorized"),
        (
            401,
            {"error": "ACCESS_DENIED", "error_description": "REST is available only by subscription"},
            "unpaid",
        ),
        (
            403,
            {"error": "ACCESS_DENIED", "error_description": "REST API is available only on commercial plans"},
            "unpaid",
        ),
        (500, {"error": "PORTAL_DELETED", "error_description": "Portal was deleted"}, "blocked"),
        (403, {"error": "PORTAL_DELETED", "error_description": "Portal was deleted"}, "blocked"),
        (
            503,
            {"error": "OVERLOAD_LIMIT", "error_description": "REST API is blocked due to overload"},
            "blocked",
        ),
    ],
)
def test_refusals_of_the_whole_portal_are_account_refusals(
    http_fake: FakeHttpServer, status: int, body: Any, cause: str
) -> None:
    """The code refused, the plan without REST, the portal deleted or blocked: every call alike."""
    http_fake.respond(Scripted(status, body))

    with pytest.raises(AccountRefused) as caught:
        rest(http_fake).deal(759)

    assert caught.value.cause == cause
    assert caught.value.reason.startswith(f"bitrix24 crm.deal.get: HTTP {status}")


@pytest.mark.parametrize(
    ("status", "body", "headers", "retry_after"),
    [
        (503, {"error": "QUERY_LIMIT_EXCEEDED", "error_description": "Too many requests"}, {}, None),
        (200, {"error": "QUERY_LIMIT_EXCEEDED", "error_description": "Too many requests"}, {}, None),
        (
            429,
            {"error": "OPERATION_TIME_LIMIT", "error_description": "Method is blocked"},
            {"Retry-After": "7"},
            7.0,
        ),
        (500, {"error": "INTERNAL_SERVER_ERROR", "error_description": "Internal server error"}, {}, None),
        (
            500,
            {
                "error": "ERROR_UNEXPECTED_ANSWER",
                "error_description": "Server returned an unexpected response",
            },
            {},
            None,
        ),
        (502, None, {}, None),
        (429, None, {"Retry-After": "30"}, 30.0),
    ],
)
def test_limits_and_server_errors_are_transient(
    http_fake: FakeHttpServer, status: int, body: Any, headers: dict[str, str], retry_after: float | None
) -> None:
    http_fake.respond(Scripted(status, body, headers))

    with pytest.raises(TransientError) as caught:
        rest(http_fake).deal(759)

    assert caught.value.reason.startswith(f"bitrix24 crm.deal.get: HTTP {status}")
    assert caught.value.retry_after == retry_after


def test_no_answer_is_transient(http_fake: FakeHttpServer) -> None:
    http_fake.respond(Scripted(200, fixture_json("bitrix24", "crm.deal.get.json"), delay_seconds=1.0))

    with pytest.raises(TransientError) as caught:
        rest(http_fake, timeout=0.2).deal(759)
    assert caught.value.reason.startswith("bitrix24 crm.deal.get: ")
    assert CODE not in caught.value.reason


def test_a_refused_connection_is_transient_without_the_url() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/rest/1/{CODE}/"

    with pytest.raises(TransientError) as caught:
        Bitrix24Rest(url).contact(1)
    assert "connection failed" in caught.value.reason
    assert CODE not in caught.value.reason and url not in caught.value.reason


def test_reasons_never_carry_the_webhook_url_or_code_and_mask_phones(http_fake: FakeHttpServer) -> None:
    client = rest(http_fake)
    echo = f"No webhook {CODE} at {client.url} for +375291234567"
    http_fake.respond(Scripted(401, {"error": "INVALID_CREDENTIALS", "error_description": echo}))

    with pytest.raises(AccountRefused) as caught:
        client.deal(759)

    reason = caught.value.reason
    assert CODE not in reason and http_fake.base_url not in reason and "+375291234567" not in reason
    masked = mask_phone("+375291234567")
    assert (
        reason == f"bitrix24 crm.deal.get: HTTP 401 INVALID_CREDENTIALS: No webhook *** at *** for {masked}"
    )
    assert CODE not in repr(client)


@pytest.mark.parametrize(
    ("result", "message"),
    [
        (None, "the answer has no result object"),
        ([], "the answer has no result object"),
        ({k: v for k, v in deal_result().items() if k != "STAGE_ID"}, "malformed result (STAGE_ID)"),
        (deal_result(ID="760"), "answered deal 760 for 759"),
    ],
)
def test_a_malformed_deal_answer_is_refused_naming_the_field(
    http_fake: FakeHttpServer, result: Any, message: str
) -> None:
    http_fake.respond(Scripted(200, {"result": result, "time": {}}))

    with pytest.raises(RemoteRefused) as caught:
        rest(http_fake).deal(759)
    assert (caught.value.kind, caught.value.reason) == ("refused", f"bitrix24 crm.deal.get: {message}")


def test_a_malformed_contact_answer_is_refused_naming_the_field(http_fake: FakeHttpServer) -> None:
    http_fake.respond(Scripted(200, {"result": contact_result(ID="x"), "time": {}}))

    with pytest.raises(RemoteRefused) as caught:
        rest(http_fake).contact(1234)
    assert (caught.value.kind, caught.value.reason) == (
        "refused",
        "bitrix24 crm.contact.get: malformed result (ID)",
    )


def test_bad_arguments_are_programming_errors(http_fake: FakeHttpServer) -> None:
    client = rest(http_fake)
    with pytest.raises(ValueError, match="method name"):
        client.call("../crm.deal.get", {})
    with pytest.raises(ValueError, match="positive integer"):
        client.deal(0)
    assert http_fake.requests == []


# -- crm.stagehistory.list -------------------------------------------------------------------------
def test_stage_history_asks_for_deal_records_oldest_first_and_reads_strings_or_numbers(
    http_fake: FakeHttpServer,
) -> None:
    http_fake.respond(Scripted(200, fixture_json("bitrix24", "crm.stagehistory.list.json")))
    records, following = rest(http_fake).stage_history({"OWNER_ID": 759})
    [request] = http_fake.requests
    assert request.path == f"/rest/1/{CODE}/crm.stagehistory.list.json"
    assert request.body == {
        "entityTypeId": 2,
        "order": {"ID": "ASC"},
        "filter": {"OWNER_ID": 759},
        "start": 0,
    }
    assert [(r.id, r.type_id, r.owner_id, r.category_id, r.stage_id) for r in records] == [
        (1457, 1, 759, "0", "NEW"),
        (1460, 2, 759, "0", "EXECUTING"),
    ]
    assert records[1].created_time == datetime(2024, 1, 9, 10, 15, 7, tzinfo=MSK)
    assert following == 50


def test_the_last_page_of_a_stage_history_has_no_next(http_fake: FakeHttpServer) -> None:
    http_fake.respond(Scripted(200, {"result": {"items": []}, "total": 0, "time": {}}))
    assert rest(http_fake).stage_history({">ID": 10}, start=50) == ([], None)


@pytest.mark.parametrize(
    "body",
    [
        {"result": [], "time": {}},  # no items list
        {"result": {"items": [{"ID": 1, "TYPE_ID": 2, "OWNER_ID": 7, "STAGE_ID": "NEW"}]}},  # no time
    ],
)
def test_a_malformed_stage_history_is_refused(http_fake: FakeHttpServer, body: dict[str, Any]) -> None:
    http_fake.respond(Scripted(200, body))
    with pytest.raises(RemoteRefused) as refused:
        rest(http_fake).stage_history({"OWNER_ID": 7})
    assert refused.value.kind == "refused"
    assert CODE not in str(refused.value)
