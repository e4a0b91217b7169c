"""amoCRM: lead-status webhooks, API v4 lead and contact answers, the API client's errors."""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs

import pytest

from pipeline.crm import forms
from pipeline.crm.amocrm import (
    ACCOUNT_FIELDS,
    NO_STATUS_CHANGES,
    STATUS_FIELDS,
    Account,
    AmoCrmApi,
    AmoWebhookError,
    Contact,
    Lead,
    NoStatusChanges,
    StatusChange,
    StatusWebhook,
    read_status_webhook,
)
from pipeline.errors import AccountRefused, PermanentError, RemoteRefused, TransientError
from pipeline.observability import mask_phone
from pipeline.validation import Invalid
from tests.support import amocrm_webhooks
from tests.unit.consumers.conftest import FakeHttpServer, Scripted
from tests.unit.crm_sources.conftest import fixture_bytes, fixture_json

TOKEN = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.long-lived.s1gn4tur3"


def read(pairs: list[tuple[str, str]]) -> StatusWebhook:
    return read_status_webhook(amocrm_webhooks.form(pairs).encode())


# -- the webhook ---------------------------------------------------------------------------------
def test_two_status_changes_and_the_account_from_the_vendor_body() -> None:
    webhook = read_status_webhook(fixture_bytes("amocrm", "lead_status_two_leads.form"))

    assert webhook.account == Account(id=31415926, subdomain="exampleshop")
    assert [
        (c.lead_id, c.status_id, c.pipeline_id, c.old_status_id, c.old_pipeline_id) for c in webhook.changes
    ] == [
        (21804135, 61482550, 7391542, 61482546, 7391542),
        (21804177, 142, 7391542, 61482550, 7391542),
    ]
    assert webhook.refused == ()
    assert all(isinstance(c, StatusChange) and isinstance(c.lead_id, int) for c in webhook.changes)


def test_a_batch_of_100_leads_with_50_custom_fields_each_is_read_whole() -> None:
    """Some 25,000 form fields: only the five ids of each lead are read."""
    webhook = read_status_webhook(amocrm_webhooks.status_batch(leads=100, custom_fields_per_lead=50).encode())

    first = amocrm_webhooks.FIRST_LEAD_ID
    assert [c.lead_id for c in webhook.changes] == list(range(first, first + 100))
    assert webhook.refused == ()
    assert webhook.account == Account(id=amocrm_webhooks.ACCOUNT_ID, subdomain=amocrm_webhooks.SUBDOMAIN)


def test_custom_fields_are_never_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Skipped unread: a custom field's value is not even %-decoded (nor built into anything)."""
    decoded: list[str] = []
    real_value = forms.FormField.value
    monkeypatch.setattr(
        forms.FormField, "value", lambda field: decoded.append(field.path[-1]) or real_value(field)
    )

    webhook = read_status_webhook(amocrm_webhooks.status_batch(leads=2, custom_fields_per_lead=4).encode())

    assert len(webhook.changes) == 2
    assert sorted(set(decoded)) == sorted({*STATUS_FIELDS, *ACCOUNT_FIELDS})


def test_changes_come_in_numeric_index_order() -> None:
    pairs = [
        (f"leads[status][{index}][{name}]", value)
        for index in (10, 2, 0, 1)
        for name, value in (("id", str(100 + index)), ("status_id", "1"), ("pipeline_id", "2"))
    ]

    assert [c.lead_id for c in read(pairs).changes] == [100, 101, 102, 110]


def test_the_minimal_shape_and_no_account_is_an_empty_account() -> None:
    webhook = read_status_webhook(
        b"leads%5Bstatus%5D%5B0%5D%5Bid%5D=916659&leads%5Bstatus%5D%5B0%5D%5Bstatus_id%5D=45648904"
        b"&leads%5Bstatus%5D%5B0%5D%5Bpipeline_id%5D=5080363"
    )

    [change] = webhook.changes
    assert webhook.account == Account(id=None, subdomain=None)
    assert (change.lead_id, change.old_status_id, change.old_pipeline_id) == (916659, None, None)


def test_a_time_the_webhook_does_not_read_cannot_refuse_a_lead() -> None:
    pairs = amocrm_webhooks.status_batch_pairs(leads=1, custom_fields_per_lead=1)
    pairs = [(k, "soon" if k.endswith(("[last_modified]", "[updated_at]")) else v) for k, v in pairs]

    assert [c.lead_id for c in read(pairs).changes] == [amocrm_webhooks.FIRST_LEAD_ID]


@pytest.mark.parametrize(
    "pairs",
    [
        [],
        [("account[id]", "1"), ("account[subdomain]", "x")],
        [("leads[add][0][id]", "1"), ("account[id]", "1")],
        [("leads", "status")],
    ],
)
def test_a_webhook_without_status_changes_says_how_to_subscribe(pairs: list[tuple[str, str]]) -> None:
    with pytest.raises(NoStatusChanges) as caught:
        read(pairs)
    assert str(caught.value) == (
        "no lead status changes in the webhook (is it subscribed to 'lead status changed'?)"
    )
    assert str(caught.value) == NO_STATUS_CHANGES


LEAD_0 = [
    ("leads[status][0][id]", "1"),
    ("leads[status][0][status_id]", "2"),
    ("leads[status][0][pipeline_id]", "3"),
]


@pytest.mark.parametrize(
    ("pairs", "errors"),
    [
        (
            [*LEAD_0, ("leads[status][1][id]", "9")],
            [
                ("leads[status][1][pipeline_id]", "Field required"),
                ("leads[status][1][status_id]", "Field required"),
            ],
        ),
        (
            [
                *LEAD_0,
                ("leads[status][1][id]", "+79123456789x"),
                *[(k.replace("[0]", "[1]"), v) for k, v in LEAD_0[1:]],
            ],
            [
                (
                    "leads[status][1][id]",
                    "Input should be a valid integer, unable to parse string as an integer",
                )
            ],
        ),
        ([*LEAD_0, ("leads[status][1]", "secret-ish")], [("leads[status][1]", "not an entry")]),
        (
            [
                *LEAD_0,
                *[(k.replace("[0]", "[1]"), v) for k, v in LEAD_0],
                ("leads[status][1][status_id]", "7"),
            ],
            [("leads[status][1][status_id]", "given twice")],
        ),
        (
            [*LEAD_0, ("leads[status][1][custom_fields][0][values][0][value]", "+79123456789")],
            [
                ("leads[status][1][id]", "Field required"),
                ("leads[status][1][pipeline_id]", "Field required"),
                ("leads[status][1][status_id]", "Field required"),
            ],
        ),
    ],
    ids=["missing", "not-a-number", "not-an-entry", "given-twice", "only-custom-fields"],
)
def test_a_malformed_entry_is_refused_alone_naming_its_fields_never_their_values(
    pairs: list[tuple[str, str]], errors: list[tuple[str, str]]
) -> None:
    webhook = read(pairs)

    assert [c.lead_id for c in webhook.changes] == [1]
    [refused] = webhook.refused
    assert refused.index == "1"
    assert sorted((error["loc"][0], error["msg"]) for error in refused.errors) == errors
    assert "+7912" not in str(refused) and "secret-ish" not in str(refused)


def test_a_field_repeated_a_thousand_times_is_one_fault() -> None:
    """What a refused entry reports is bounded by its fields, not by how often they repeat."""
    webhook = read([*LEAD_0, *[("leads[status][1][id]", "7")] * 1000, *[("leads[status][1]", "x")] * 2])

    assert [c.lead_id for c in webhook.changes] == [1]
    [refused] = webhook.refused
    assert sorted(error["loc"][0] for error in refused.errors) == ["leads[status][1]", "leads[status][1][id]"]


def test_an_index_that_looks_like_a_phone_is_masked_where_it_is_named() -> None:
    webhook = read([*LEAD_0, ("leads[status][375291234567][id]", "x")])

    [refused] = webhook.refused
    assert all("375291234567" not in error["loc"][0] for error in refused.errors)


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        ([("leads[status]", "1")], "leads[status] has an entry that is not numbered"),
        ([("leads[status][]", "1")], "leads[status] has an entry that is not numbered"),
        ([("leads[status][x][id]", "secret-ish")], "leads[status] has an entry that is not numbered"),
        ([("leads[status][01][id]", "1")], "leads[status] has an entry that is not numbered"),
        ([*LEAD_0, ("account[id]", "shop")], "invalid account (account[id])"),
        ([*LEAD_0, ("account[id]", "1"), ("account[id]", "2")], "invalid account (account[id])"),
    ],
)
def test_a_webhook_not_shaped_as_amocrm_sends_them_is_refused_whole(
    pairs: list[tuple[str, str]], message: str
) -> None:
    with pytest.raises(AmoWebhookError) as caught:
        read(pairs)
    assert str(caught.value) == message
    assert not isinstance(caught.value, NoStatusChanges)
    assert caught.value.errors and all(len(error["loc"]) == 1 for error in caught.value.errors)
    assert "secret-ish" not in str(caught.value) + str(caught.value.errors)


def test_a_body_that_is_not_a_form_is_a_form_error() -> None:
    with pytest.raises(forms.FormError):
        read_status_webhook(b"leads[status][0][id=1")


# -- API v4 answers ------------------------------------------------------------------------------
def test_a_lead_from_the_api_picks_the_main_contact() -> None:
    lead = Lead.from_api(fixture_json("amocrm", "lead_with_contacts.json"))

    assert (lead.id, lead.name, lead.status_id, lead.pipeline_id) == (
        21804135,
        "Заказ #1042",
        61482550,
        7391542,
    )
    assert lead.updated_at == datetime(2024, 1, 9, 7, 15, 7, tzinfo=UTC)
    assert lead.main_contact_id == 40112299  # is_main, though listed second


@pytest.mark.parametrize(
    ("embedded", "expected"),
    [
        ({"contacts": [{"id": 7, "is_main": False}, {"id": 8, "is_main": False}]}, 7),
        ({"contacts": [{"id": 7}]}, 7),
        ({"contacts": []}, None),
        ({"tags": []}, None),
        (None, None),
    ],
)
def test_without_a_main_contact_the_first_one_else_none(embedded: Any, expected: int | None) -> None:
    body = {
        "id": 1,
        "name": None,
        "status_id": 2,
        "pipeline_id": 3,
        "updated_at": None,
        "_embedded": embedded,
    }

    lead = Lead.from_api(body)

    assert (lead.main_contact_id, lead.name, lead.updated_at) == (expected, "", None)


def test_a_malformed_lead_names_the_fields() -> None:
    with pytest.raises(Invalid) as caught:
        Lead.from_api({"id": 1, "pipeline_id": "x"})
    assert sorted(error["loc"] for error in caught.value.errors()) == [("pipeline_id",), ("status_id",)]


def test_a_contact_from_the_api_texts_the_mobile_number() -> None:
    contact = Contact.from_api(fixture_json("amocrm", "contact.json"))

    assert (contact.id, contact.name) == (40112299, "Иван Петров")
    assert contact.phones == ("+7 495 123-45-67", "+7 912 345-67-89")  # EMAIL values are not phones
    assert contact.phone_codes == ("WORK", "MOB")
    assert contact.phone() == "+7 912 345-67-89"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            [{"field_code": "PHONE", "values": [{"value": "+7 495 123-45-67", "enum_code": "WORK"}]}],
            "+7 495 123-45-67",
        ),
        (
            [
                {"field_code": "PHONE", "values": [{"value": " ", "enum_code": "MOB"}]},
                {"field_code": "PHONE", "values": [{"value": "+7 912 345-67-89", "enum_code": "OTHER"}]},
            ],
            "+7 912 345-67-89",
        ),
        ([{"field_code": "EMAIL", "values": [{"value": "a@example.com", "enum_code": "WORK"}]}], None),
        (None, None),
    ],
)
def test_contact_phone_choice(fields: Any, expected: str | None) -> None:
    contact = Contact.from_api({"id": 5, "name": "", "custom_fields_values": fields})

    assert (contact.phone(), contact.name) == (expected, None)


# -- the API client ------------------------------------------------------------------------------
def api(http_fake: FakeHttpServer, timeout: float = 5.0) -> AmoCrmApi:
    return AmoCrmApi(http_fake.base_url, TOKEN, timeout=timeout)


def test_lead_gets_the_lead_with_its_contacts_with_the_bearer_token(http_fake: FakeHttpServer) -> None:
    http_fake.respond(Scripted(200, fixture_json("amocrm", "lead_with_contacts.json")))

    lead = api(http_fake).lead(21804135)

    assert lead.main_contact_id == 40112299
    [request] = http_fake.requests
    assert (request.method, request.path) == ("GET", "/api/v4/leads/21804135?with=contacts")
    assert request.headers["authorization"] == f"Bearer {TOKEN}"


def test_contact_gets_the_contact(http_fake: FakeHttpServer) -> None:
    http_fake.respond(Scripted(200, fixture_json("amocrm", "contact.json")))

    contact = AmoCrmApi(f"{http_fake.base_url}/", TOKEN).contact(40112299)

    assert contact.phone() == "+7 912 345-67-89"
    [request] = http_fake.requests
    assert (request.method, request.path) == ("GET", "/api/v4/contacts/40112299")


PROBLEM_403 = {
    "title": "Forbidden",
    "type": "https://httpstatus.es/403",
    "status": 403,
    "detail": "Access denied",
}
PROBLEM_400 = {
    "title": "Bad Request",
    "type": "https://httpstatus.es/400",
    "status": 400,
    "detail": "Invalid id",
}


@pytest.mark.parametrize(
    ("status", "body", "kind", "reason"),
    [
        (204, None, "not_found", "HTTP 204 (no such lead)"),
        (404, None, "not_found", "HTTP 404"),
        (400, PROBLEM_400, "refused", "HTTP 400 Bad Request: Invalid id"),
        # A 403 that does not say the account is blocked: this lead is out of the user's rights.
        (403, PROBLEM_403, "unauthorized", "HTTP 403 Forbidden: Access denied"),
        (302, None, "refused", "HTTP 302"),
        (200, None, "refused", "HTTP 200: the answer is not a lead"),
        (200, [1, 2], "refused", "HTTP 200: the answer is not a lead"),
    ],
)
def test_refusals_are_classified_by_kind(
    http_fake: FakeHttpServer, status: int, body: Any, kind: str, reason: str
) -> None:
    http_fake.respond(Scripted(status, body, {"Content-Type": "application/problem+json"}))

    with pytest.raises(RemoteRefused) as caught:
        api(http_fake).lead(21804135)

    assert isinstance(caught.value, PermanentError)
    assert (caught.value.kind, caught.value.reason) == (kind, f"amocrm lead: {reason}")


@pytest.mark.parametrize(
    ("status", "body", "cause", "reason"),
    [
        (
            401,
            fixture_json("amocrm", "unauthorized.json"),
            "unauthorized",
            "HTTP 401 Unauthorized: Invalid user name or password",
        ),
        (402, {"title": "Payment Required"}, "unpaid", "HTTP 402 Payment Required"),
        (
            403,
            {**PROBLEM_403, "detail": "Account is blocked"},
            "blocked",
            "HTTP 403 Forbidden: Account is blocked",
        ),
    ],
)
def test_refusals_of_the_whole_account_are_account_refusals(
    http_fake: FakeHttpServer, status: int, body: Any, cause: str, reason: str
) -> None:
    """amoCRM's 401 (the token), 402 (the subscription ended), 403 (the account blocked): every
    lead alike, so not a refusal of this one."""
    http_fake.respond(Scripted(status, body, {"Content-Type": "application/problem+json"}))

    with pytest.raises(AccountRefused) as caught:
        api(http_fake).lead(21804135)

    assert not isinstance(caught.value, PermanentError)
    assert (caught.value.cause, caught.value.reason) == (cause, f"amocrm lead: {reason}")


def test_a_missing_contact_is_not_found(http_fake: FakeHttpServer) -> None:
    http_fake.respond(Scripted(204, None))

    with pytest.raises(RemoteRefused) as caught:
        api(http_fake).contact(1)
    assert (caught.value.kind, caught.value.reason) == (
        "not_found",
        "amocrm contact: HTTP 204 (no such contact)",
    )


@pytest.mark.parametrize(
    ("status", "headers", "retry_after"),
    [
        (429, {"Retry-After": "3"}, 3.0),
        (429, {}, None),
        (500, {}, None),
        (502, {}, None),
        (503, {"Retry-After": "60"}, 60.0),
        (408, {}, None),
    ],
)
def test_limits_and_server_errors_are_transient(
    http_fake: FakeHttpServer, status: int, headers: dict[str, str], retry_after: float | None
) -> None:
    http_fake.respond(Scripted(status, {"title": "Too Many Requests", "status": status}, headers))

    with pytest.raises(TransientError) as caught:
        api(http_fake).lead(1)
    assert caught.value.reason.startswith(f"amocrm lead: HTTP {status}")
    assert caught.value.retry_after == retry_after


def test_no_answer_in_time_is_transient(http_fake: FakeHttpServer) -> None:
    http_fake.respond(Scripted(200, fixture_json("amocrm", "contact.json"), delay_seconds=1.0))

    with pytest.raises(TransientError) as caught:
        api(http_fake, timeout=0.2).contact(40112299)
    assert caught.value.reason.startswith("amocrm contact: ")


def test_a_refused_connection_is_transient() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    with pytest.raises(TransientError, match="connection failed"):
        AmoCrmApi(f"http://127.0.0.1:{port}", TOKEN).lead(1)


def test_the_token_never_shows_and_phones_are_masked(http_fake: FakeHttpServer) -> None:
    client = api(http_fake)
    detail = f"token Bearer {TOKEN} revoked; call +79123456789"
    http_fake.respond(Scripted(401, {"title": "Unauthorized", "status": 401, "detail": detail}))

    with pytest.raises(AccountRefused) as caught:
        client.lead(1)

    reason = caught.value.reason
    assert TOKEN not in reason and "+79123456789" not in reason
    assert (
        reason == f"amocrm lead: HTTP 401 Unauthorized: token *** revoked; call {mask_phone('+79123456789')}"
    )
    assert TOKEN not in repr(client)


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("lead", {"id": 21804135, "name": "x", "pipeline_id": 1}, "amocrm lead: malformed lead (status_id)"),
        (
            "lead",
            {**fixture_json("amocrm", "lead_with_contacts.json"), "id": 5},
            "amocrm lead: answered lead 5 for 21804135",
        ),
        ("contact", {"id": "x"}, "amocrm contact: malformed contact (id)"),
        ("contact", {"id": 5}, "amocrm contact: answered contact 5 for 21804135"),
    ],
)
def test_a_malformed_answer_is_refused_naming_the_field(
    http_fake: FakeHttpServer, path: str, body: dict[str, Any], message: str
) -> None:
    http_fake.respond(Scripted(200, body))
    client = api(http_fake)

    with pytest.raises(RemoteRefused) as caught:
        client.lead(21804135) if path == "lead" else client.contact(21804135)
    assert (caught.value.kind, caught.value.reason) == ("refused", message)


@pytest.mark.parametrize(
    ("base_url", "token"),
    [
        ("ftp://shop.amocrm.ru", TOKEN),
        ("https://shop.amocrm.ru/api/v4", TOKEN),
        ("https://shop.amocrm.ru?x=1", TOKEN),
        ("shop.amocrm.ru", TOKEN),
        ("https://shop.amocrm.ru", ""),
        ("https://shop.amocrm.ru", f" {TOKEN}"),
        ("https://shop.amocrm.ru", f"{TOKEN}\r\nX-Evil: 1"),
    ],
)
def test_a_bad_configuration_is_refused_without_quoting_the_token(base_url: str, token: str) -> None:
    with pytest.raises(ValueError) as caught:
        AmoCrmApi(base_url, token)
    assert TOKEN not in str(caught.value)


def test_a_bad_id_is_a_programming_error(http_fake: FakeHttpServer) -> None:
    with pytest.raises(ValueError, match="positive integer"):
        api(http_fake).lead(-1)
    assert http_fake.requests == []


# -- GET /api/v4/events ------------------------------------------------------------------------------
def test_status_events_asks_for_lead_status_changes_and_reads_before_and_after(
    http_fake: FakeHttpServer,
) -> None:
    http_fake.respond(Scripted(200, fixture_json("amocrm", "events.lead_status_changed.json")))
    events, more = api(http_fake).status_events({"filter[entity_id][]": 21804135})
    [request] = http_fake.requests
    assert request.method == "GET"
    path, _, query = request.path.partition("?")
    assert path == "/api/v4/events"
    assert parse_qs(query) == {
        "filter[type]": ["lead_status_changed"],
        "filter[entity]": ["lead"],
        "filter[entity_id][]": ["21804135"],
        "limit": ["100"],
        "page": ["1"],
    }
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    [event] = events
    assert (event.id, event.entity_id, event.after, event.before) == (
        "01hmjz6m7r5q8x1n2c3v4b5n6m",
        21804135,
        (7391542, 61482550),
        (7391542, 61482546),
    )
    assert event.created_at == datetime(2024, 1, 9, 7, 15, 7, tzinfo=UTC)
    assert more is True


def test_no_status_event_is_an_empty_page_not_an_error(http_fake: FakeHttpServer) -> None:
    http_fake.respond(Scripted(204, None))
    assert api(http_fake).status_events({"filter[entity_id][]": 5}) == ([], False)


def test_a_status_event_without_its_new_status_is_refused(http_fake: FakeHttpServer) -> None:
    body = fixture_json("amocrm", "events.lead_status_changed.json")
    del body["_embedded"]["events"][0]["value_after"]
    http_fake.respond(Scripted(200, body))
    with pytest.raises(RemoteRefused) as refused:
        api(http_fake).status_events({})
    assert refused.value.kind == "refused" and TOKEN not in str(refused.value)
