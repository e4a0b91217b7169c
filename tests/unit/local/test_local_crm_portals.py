"""The CRM portal stand-ins (Bitrix24, amoCRM) answer reads and emit webhooks as the real ones do.

A small loopback server stands in for the pipeline's handler and records what each fake posts
(`crm_portal_support.Receiver`; the fixtures are in this directory's conftest).
"""

from __future__ import annotations

import json
import re
import socket
import time
from typing import Any

import pytest

from local.fakes.amocrm import AmoCrmFake
from local.fakes.bitrix24 import Bitrix24PortalFake, portal_time
from local.fakes.emitting import NoHandlerError
from tests.unit.local.crm_portal_support import T0, Receiver, amo_get, control, http, rest, running

BITRIX_EVENT_KEYS = [
    "event",
    "event_handler_id",
    "data[FIELDS][ID]",
    "ts",
    "auth[domain]",
    "auth[client_endpoint]",
    "auth[server_endpoint]",
    "auth[member_id]",
    "auth[application_token]",
]
AMO_LEAD_KEYS = [
    "id",
    "name",
    "status_id",
    "old_status_id",
    "price",
    "responsible_user_id",
    "last_modified",
    "modified_user_id",
    "created_user_id",
    "date_create",
    "pipeline_id",
    "old_pipeline_id",
    "account_id",
    "created_at",
    "updated_at",
]
PORTAL_DATETIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+03:00$")


# -- Bitrix24: outgoing webhooks -------------------------------------------------------------------
def test_a_new_deal_emits_oncrmdealadd_form_encoded_as_the_portal_posts_it(
    portal: Bitrix24PortalFake, receiver: Receiver
) -> None:
    delivery = portal.create_deal("Order A-1")

    [post] = receiver.posts
    assert post.headers["content-type"] == "application/x-www-form-urlencoded"
    assert "data%5BFIELDS%5D%5BID%5D=1&" in post.body.decode()  # brackets encoded like http_build_query
    assert [key for key, _ in post.pairs()] == BITRIX_EVENT_KEYS
    form = post.form()
    assert form["event"] == "ONCRMDEALADD"
    assert form["data[FIELDS][ID]"] == str(delivery.deal_id) == "1"
    assert form["ts"] == str(T0)
    assert form["auth[domain]"] == "local.bitrix24.test"
    assert form["auth[client_endpoint]"] == "https://local.bitrix24.test/rest/"
    assert form["auth[server_endpoint]"] == "https://oauth.bitrix.info/rest/"
    assert re.fullmatch(r"[0-9a-f]{32}", form["auth[member_id]"])
    assert form["auth[application_token]"] == "localBitrixAppToken0123456789"
    assert (delivery.status, delivery.body, delivery.error) == (200, {"ok": True}, None)
    assert (delivery.event, delivery.payload) == ("ONCRMDEALADD", post.body.decode())


def test_a_move_changes_the_stage_and_moved_time_an_edit_only_date_modify(
    portal: Bitrix24PortalFake, receiver: Receiver
) -> None:
    deal_id = portal.create_deal("Order A-1").deal_id
    created = portal.deal(deal_id)

    moved = portal.move_deal(deal_id, "WON")
    after_move = portal.deal(deal_id)
    edited = portal.edit_deal(deal_id, TITLE="Order A-1 (gift)", OPPORTUNITY="1490.00")
    after_edit = portal.deal(deal_id)

    assert [post.form()["event"] for post in receiver.posts] == [
        "ONCRMDEALADD",
        "ONCRMDEALUPDATE",
        "ONCRMDEALUPDATE",
    ]
    assert (moved.event, edited.event) == ("ONCRMDEALUPDATE", "ONCRMDEALUPDATE")
    assert {post.form()["event_handler_id"] for post in receiver.posts[1:]} != {
        receiver.posts[0].form()["event_handler_id"]
    }
    assert created["MOVED_TIME"] == created["DATE_MODIFY"] == portal_time(T0)
    assert (after_move["STAGE_ID"], after_move["STAGE_SEMANTIC_ID"], after_move["CLOSED"]) == (
        "WON",
        "S",
        "Y",
    )
    assert after_move["MOVED_TIME"] == after_move["DATE_MODIFY"] == portal_time(T0 + 1)
    assert after_move["MOVED_BY_ID"] == "1"
    assert (after_edit["TITLE"], after_edit["OPPORTUNITY"]) == ("Order A-1 (gift)", "1490.00")
    assert after_edit["MOVED_TIME"] == portal_time(T0 + 1)
    assert after_edit["DATE_MODIFY"] == portal_time(T0 + 2)
    assert after_edit["STAGE_ID"] == "WON"
    assert PORTAL_DATETIME.fullmatch(after_edit["DATE_MODIFY"])


def test_times_advance_between_two_changes_within_one_second(receiver: Receiver) -> None:
    with running(Bitrix24PortalFake(handler_url=receiver.url)) as fake:
        deal_id = fake.create_deal("Order A-1").deal_id
        before = fake.deal(deal_id)["MOVED_TIME"]
        fake.move_deal(deal_id, "EXECUTING")

        assert fake.deal(deal_id)["MOVED_TIME"] > before


@pytest.mark.parametrize(
    ("stage", "semantic", "closed"),
    [("PREPARATION", "P", "N"), ("WON", "S", "Y"), ("LOSE", "F", "Y"), ("APOLOGY", "F", "Y")],
)
def test_stages_of_another_category_carry_its_prefix(
    portal: Bitrix24PortalFake, stage: str, semantic: str, closed: str
) -> None:
    deal_id = portal.create_deal("Order A-1", category_id=2).deal_id
    assert (portal.deal(deal_id)["STAGE_ID"], portal.deal(deal_id)["CATEGORY_ID"]) == ("C2:NEW", "2")

    portal.move_deal(deal_id, stage)

    deal = portal.deal(deal_id)
    assert (deal["STAGE_ID"], deal["STAGE_SEMANTIC_ID"], deal["CLOSED"]) == (f"C2:{stage}", semantic, closed)
    with pytest.raises(ValueError, match="belongs to category 3"):
        portal.move_deal(deal_id, "C3:WON")


def test_resend_posts_the_last_body_again_byte_for_byte(
    portal: Bitrix24PortalFake, receiver: Receiver
) -> None:
    first = portal.create_deal("Order A-1").deal_id
    portal.move_deal(first, "EXECUTING")
    second = portal.create_deal("Order A-2").deal_id

    again = portal.resend_last(first)
    latest = portal.resend_last()

    assert again.event == "ONCRMDEALUPDATE" and again.deal_id == first
    assert receiver.posts[3].body == receiver.posts[1].body
    assert latest.deal_id == second
    assert receiver.posts[4].body == receiver.posts[2].body
    with pytest.raises(LookupError, match="nothing emitted for deal 99"):
        portal.resend_last(99)


def test_the_handler_answer_is_the_delivery_and_an_unreachable_handler_is_an_error(
    portal: Bitrix24PortalFake, receiver: Receiver
) -> None:
    receiver.status, receiver.answer = 500, {"ok": False, "error": "internal"}
    failed = portal.create_deal("Order A-1")
    assert (failed.status, failed.body, failed.delivered) == (500, {"ok": False, "error": "internal"}, False)

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    portal.configure_handler(f"http://127.0.0.1:{closed_port}/crm/events", application_token="other")
    lost = portal.move_deal(failed.deal_id, "WON")

    assert lost.status is None and lost.body is None
    assert lost.error is not None and "could not deliver" in lost.error
    assert "auth%5Bapplication_token%5D=other" in lost.payload


def test_without_a_handler_nothing_is_created_and_the_reason_is_clear() -> None:
    with running(Bitrix24PortalFake()) as fake:
        with pytest.raises(NoHandlerError, match="configure_handler"):
            fake.create_deal("Order A-1")
        status, body = control(fake, "POST", "/_deals", {"title": "Order A-1"})
        assert status == 409 and "configure_handler" in body["error"]
        assert rest(fake, "crm.deal.get", {"id": 1}) == (400, {"error": "", "error_description": "Not found"})
        assert fake.create_deal("Order A-1", emit=False).status is None  # created without a webhook
        assert fake.deal(1)["TITLE"] == "Order A-1"


def test_the_handler_may_read_the_deal_while_it_answers_the_webhook(
    portal: Bitrix24PortalFake, receiver: Receiver
) -> None:
    seen: list[Any] = []
    receiver.on_post = lambda post: seen.append(
        rest(portal, "crm.deal.get", {"id": post.form()["data[FIELDS][ID]"]})
    )

    portal.move_deal(portal.create_deal("Order A-1").deal_id, "WON")

    assert [(status, body["result"]["STAGE_ID"]) for status, body in seen] == [(200, "NEW"), (200, "WON")]


# -- Bitrix24: REST --------------------------------------------------------------------------------
@pytest.mark.parametrize("transport", ["json", "form", "query"])
def test_rest_answers_deals_and_contacts_with_bitrix_field_names_and_strings(
    portal: Bitrix24PortalFake, transport: str
) -> None:
    contact_id = portal.create_contact("Ann", "+79161234567", last_name="Lee")
    deal_id = portal.create_deal("Order A-1", contact_id=contact_id).deal_id

    status, deal = rest(portal, "crm.deal.get", {"id": deal_id}, transport)
    assert status == 200
    result = deal["result"]
    assert (result["ID"], result["TITLE"], result["STAGE_ID"], result["CATEGORY_ID"]) == (
        "1",
        "Order A-1",
        "NEW",
        "0",
    )
    assert (result["CONTACT_ID"], result["STAGE_SEMANTIC_ID"], result["CLOSED"]) == (
        str(contact_id),
        "P",
        "N",
    )
    for name in ("TYPE_ID", "CURRENCY_ID", "OPPORTUNITY", "COMPANY_ID", "ASSIGNED_BY_ID", "MOVED_BY_ID"):
        assert isinstance(result[name], str), name
    for name in ("DATE_CREATE", "DATE_MODIFY", "MOVED_TIME"):
        assert PORTAL_DATETIME.fullmatch(result[name]), name
    assert {"start", "finish", "duration", "processing", "date_start", "date_finish"} <= set(deal["time"])

    status, contact = rest(portal, "crm.contact.get", {"ID": contact_id}, transport)
    assert status == 200
    assert contact["result"]["ID"] == str(contact_id)
    assert (contact["result"]["NAME"], contact["result"]["LAST_NAME"], contact["result"]["HAS_PHONE"]) == (
        "Ann",
        "Lee",
        "Y",
    )
    assert contact["result"]["PHONE"] == [
        {"ID": "1", "VALUE_TYPE": "MOBILE", "VALUE": "+79161234567", "TYPE_ID": "PHONE"}
    ]


def test_a_contact_without_a_phone_has_no_phone_multifield(portal: Bitrix24PortalFake) -> None:
    contact_id = portal.create_contact("Bob", None)

    _, contact = rest(portal, "crm.contact.get", {"id": contact_id})

    assert contact["result"]["HAS_PHONE"] == "N"
    assert "PHONE" not in contact["result"]


@pytest.mark.parametrize(
    ("method", "params", "expected"),
    [
        ("crm.deal.get", {"id": 42}, (400, {"error": "", "error_description": "Not found"})),
        ("crm.contact.get", {"id": 42}, (400, {"error": "", "error_description": "Not found"})),
        (
            "crm.deal.get",
            {"id": "abc"},
            (400, {"error": "", "error_description": "ID is not defined or invalid."}),
        ),
        ("crm.deal.get", {}, (400, {"error": "", "error_description": "ID is not defined or invalid."})),
        (
            "crm.deal.delete",
            {"id": 1},
            (404, {"error": "ERROR_METHOD_NOT_FOUND", "error_description": "Method not found!"}),
        ),
    ],
)
def test_rest_errors_are_bitrix_errors(
    portal: Bitrix24PortalFake, method: str, params: dict[str, Any], expected: tuple[int, Any]
) -> None:
    assert rest(portal, method, params) == expected


def test_rest_lists_deals_by_filter_and_the_category_stages(portal: Bitrix24PortalFake) -> None:
    portal.create_deal("Order A-1")
    won = portal.create_deal("Order A-2").deal_id
    portal.move_deal(won, "WON")

    status, listed = rest(portal, "crm.deal.list", {"filter": {"STAGE_ID": "WON"}})
    assert status == 200 and [deal["ID"] for deal in listed["result"]] == [str(won)] and listed["total"] == 1

    _, stages = rest(portal, "crm.status.list", {"filter": {"ENTITY_ID": "DEAL_STAGE_2"}})
    assert {stage["STATUS_ID"] for stage in stages["result"]} >= {"C2:NEW", "C2:WON", "C2:LOSE"}


INVALID_CREDENTIALS = (
    401,
    {"error": "INVALID_CREDENTIALS", "error_description": "Invalid request credentials"},
)


def test_another_code_or_user_or_a_revoked_webhook_is_refused(portal: Bitrix24PortalFake) -> None:
    deal_id = portal.create_deal("Order A-1").deal_id
    wrong_code = f"{portal.url}/rest/1/wrongcode/crm.deal.get.json?id={deal_id}"
    wrong_user = f"{portal.url}/rest/2/{portal.webhook_code}/crm.deal.get.json?id={deal_id}"
    for url in (wrong_code, wrong_user):
        status, _, raw = http(url)
        assert (status, json.loads(raw)) == INVALID_CREDENTIALS

    assert control(portal, "POST", "/_webhook/revoke") == (200, {"webhook_revoked": True})
    assert rest(portal, "crm.deal.get", {"id": deal_id}) == INVALID_CREDENTIALS
    assert control(portal, "POST", "/_webhook/restore") == (200, {"webhook_revoked": False})
    assert rest(portal, "crm.deal.get", {"id": deal_id})[0] == 200


def test_the_webhook_code_is_masked_in_the_calls(receiver: Receiver) -> None:
    with running(Bitrix24PortalFake(handler_url=receiver.url, webhook_code="s3cr3tc0de")) as fake:
        rest(fake, "crm.deal.get", {"id": 1})
        http(f"{fake.url}/rest/1/wrongc0de/crm.contact.get.json")

        status, calls = control(fake, "GET", "/_calls")

    assert status == 200
    assert [call["path"] for call in calls] == [
        "/rest/1/<code>/crm.deal.get",
        "/rest/1/<code>/crm.contact.get",
    ]
    assert "s3cr3tc0de" not in json.dumps(calls) and "wrongc0de" not in json.dumps(calls)


def test_faults_hit_rest_calls_with_bitrix_errors_and_leave_control_endpoints_alone(
    portal: Bitrix24PortalFake,
) -> None:
    assert control(portal, "POST", "/_faults", {"fail_next": 1})[0] == 200
    status, created = control(portal, "POST", "/_deals", {"title": "Order A-1"})
    assert status == 201  # the control endpoint did not take the fault

    assert rest(portal, "crm.deal.get", {"id": created["deal_id"]}) == (
        500,
        {"error": "INTERNAL_SERVER_ERROR", "error_description": "Internal server error"},
    )
    assert rest(portal, "crm.deal.get", {"id": created["deal_id"]})[0] == 200

    control(portal, "POST", "/_faults", {"rate_limit_next": 1, "match": "crm.contact.get"})
    assert rest(portal, "crm.deal.get", {"id": created["deal_id"]})[0] == 200
    assert rest(portal, "crm.contact.get", {"id": 1}) == (
        503,
        {"error": "QUERY_LIMIT_EXCEEDED", "error_description": "Too many requests"},
    )
    assert [call["fault"] for call in portal.calls()] == ["fail", None, None, "rate_limit"]


# -- Bitrix24: control endpoints -------------------------------------------------------------------
def test_control_endpoints_drive_the_portal_over_http(portal: Bitrix24PortalFake, receiver: Receiver) -> None:
    status, created = control(
        portal,
        "POST",
        "/_deals",
        {"title": "Order A-1", "category_id": 2, "contact": {"name": "Ann", "phone": "+79161234567"}},
    )
    assert status == 201
    deal_id, contact_id = created["deal_id"], created["contact_id"]
    assert created["delivery"]["status"] == 200 and created["delivery"]["event"] == "ONCRMDEALADD"
    assert control(portal, "GET", f"/_deals/{deal_id}")[1]["CONTACT_ID"] == str(contact_id)

    status, moved = control(portal, "POST", f"/_deals/{deal_id}/move", {"stage_id": "WON"})
    assert status == 200 and moved["deal"]["STAGE_ID"] == "C2:WON"
    assert moved["delivery"]["event"] == "ONCRMDEALUPDATE"

    status, edited = control(
        portal, "POST", f"/_deals/{deal_id}/edit", {"COMMENTS": "gift", "OPPORTUNITY": 1490}
    )
    assert status == 200 and (edited["deal"]["COMMENTS"], edited["deal"]["OPPORTUNITY"]) == ("gift", "1490")

    status, resent = control(portal, "POST", f"/_deals/{deal_id}/resend")
    assert status == 200 and resent["delivery"]["payload"] == edited["delivery"]["payload"]
    assert receiver.posts[-1].body == receiver.posts[-2].body

    assert control(portal, "POST", "/_contacts", {"name": "Bob", "phone": "+79160000000"}) == (
        201,
        {"contact_id": contact_id + 1},
    )
    assert control(portal, "GET", "/_portal")[1]["rest_url"] == portal.rest_url()


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/_deals", {}, "title must be a non-empty string"),
        ("/_deals", {"title": "x", "stage_id": "won now"}, "not a stage id"),
        ("/_deals", {"title": "x", "category_id": -1}, "category_id must be an integer >= 0"),
        ("/_deals", {"title": "x", "contact_id": 99}, "no contact 99"),
        ("/_deals", {"title": "x", "contact": {"phone": "+7916"}}, "name must be a non-empty string"),
        ("/_deals", {"title": "x", "colour": "red"}, "unknown keys ['colour']"),
        ("/_deals", [1], "expected a JSON object"),
        ("/_contacts", {"name": "Ann", "phone": 7916}, "phone must be a non-empty string"),
        ("/_deals/1/move", {"stage_id": 5}, "stage_id must be a non-empty string"),
        ("/_deals/1/move", {"stage_id": "C3:WON"}, "belongs to category 3"),
        ("/_deals/1/edit", {"STAGE_ID": "WON"}, "STAGE_ID cannot be edited"),
        ("/_deals/1/edit", {"title": "x"}, "not a Bitrix24 field name"),
        ("/_deals/1/edit", {}, "expected the fields to change"),
    ],
)
def test_control_input_it_cannot_follow_is_a_400_saying_why(
    portal: Bitrix24PortalFake, receiver: Receiver, path: str, body: Any, message: str
) -> None:
    portal.create_deal("Order A-1")
    posted = len(receiver.posts)

    status, answer = control(portal, "POST", path, body)

    assert status == 400 and message in answer["error"]
    assert len(receiver.posts) == posted
    assert portal.deal(1)["STAGE_ID"] == "NEW"
    assert rest(portal, "crm.deal.get", {"id": 2})[1]["error_description"] == "Not found"


def test_control_endpoints_for_a_deal_that_does_not_exist_are_404(portal: Bitrix24PortalFake) -> None:
    assert control(portal, "GET", "/_deals/7") == (404, {"error": "no deal 7"})
    assert control(portal, "POST", "/_deals/7/move", {"stage_id": "WON"}) == (404, {"error": "no deal 7"})


# -- amoCRM: the webhook ---------------------------------------------------------------------------
def test_one_webhook_carries_every_lead_with_old_and_new_status(amo: AmoCrmFake, receiver: Receiver) -> None:
    contact_id = amo.create_contact("Ann Lee", "+79161234567")
    first = amo.create_lead("Order A-1", pipeline_id=7001, status_id=61001, contact_id=contact_id)
    second = amo.create_lead("Order A-2", pipeline_id=7001, status_id=61002)

    delivery = amo.change_statuses([(first, 142), (second, 62001, 7002)])

    [post] = receiver.posts
    assert post.headers["content-type"] == "application/x-www-form-urlencoded"
    assert post.headers["user-agent"] == "amoCRM-Webhooks/3.0"
    assert re.fullmatch(r"[0-9a-f-]{36}", post.headers["x-amocrm-requestid"])
    assert "leads%5Bstatus%5D%5B0%5D%5Bid%5D=" in post.body.decode()
    expected_keys = ["account[subdomain]", "account[id]", "account[_links][self]"] + [
        f"leads[status][{index}][{key}]" for index in (0, 1) for key in AMO_LEAD_KEYS
    ]
    assert [key for key, _ in post.pairs()] == expected_keys
    form = post.form()
    assert (form["account[subdomain]"], form["account[id]"]) == ("localshop", "29085955")
    assert form["account[_links][self]"] == "https://localshop.amocrm.ru"
    lead_0 = {key: form[f"leads[status][0][{key}]"] for key in AMO_LEAD_KEYS}
    lead_1 = {key: form[f"leads[status][1][{key}]"] for key in AMO_LEAD_KEYS}
    assert (lead_0["id"], lead_0["old_status_id"], lead_0["status_id"]) == (str(first), "61001", "142")
    assert (lead_0["old_pipeline_id"], lead_0["pipeline_id"]) == ("7001", "7001")
    assert (lead_1["id"], lead_1["old_status_id"], lead_1["status_id"]) == (str(second), "61002", "62001")
    assert (lead_1["old_pipeline_id"], lead_1["pipeline_id"]) == ("7001", "7002")
    assert lead_0["name"] == "Order A-1" and lead_0["account_id"] == "29085955"
    assert lead_0["last_modified"] == lead_0["updated_at"] == str(T0 + 3)
    assert lead_0["date_create"] == lead_0["created_at"] == str(T0 + 1)
    assert (delivery.status, delivery.event, delivery.lead_ids) == (200, "leads.status", (first, second))

    assert amo.lead(first)["status_id"] == 142 and amo.lead(first)["closed_at"] == T0 + 3
    assert (amo.lead(second)["status_id"], amo.lead(second)["pipeline_id"]) == (62001, 7002)


def test_a_leads_custom_fields_ride_in_its_webhook_after_account_id_as_amocrm_posts_them(
    amo: AmoCrmFake, receiver: Receiver
) -> None:
    fields = {"Delivery": "Pickup point, Nemiga 5", "Order number": "A-1042"}
    lead_id = amo.create_lead("Order A-1", pipeline_id=7001, status_id=61001, custom_fields=fields)
    plain = amo.create_lead("Order A-2", pipeline_id=7001, status_id=61001)

    amo.change_statuses([(lead_id, 142), (plain, 142)])

    [post] = receiver.posts
    keys = [key for key, _ in post.pairs() if key.startswith("leads[status][0]")]
    custom = [
        f"leads[status][0][custom_fields][{k}][{part}]"
        for k in (0, 1)
        for part in ("id", "name", "values][0][value")
    ]
    at = AMO_LEAD_KEYS.index("account_id") + 1
    assert keys == [f"leads[status][0][{key}]" for key in AMO_LEAD_KEYS[:at]] + custom + [
        f"leads[status][0][{key}]" for key in AMO_LEAD_KEYS[at:]
    ]
    form = post.form()
    assert [form[f"leads[status][0][custom_fields][{k}][name]"] for k in (0, 1)] == list(fields)
    assert form["leads[status][0][custom_fields][0][values][0][value]"] == "Pickup point, Nemiga 5"
    assert not any("custom_fields" in key for key, _ in post.pairs() if key.startswith("leads[status][1]"))
    api_fields = amo.lead(lead_id)["custom_fields_values"]
    assert [(f["field_name"], f["values"]) for f in api_fields] == [
        (n, [{"value": v}]) for n, v in fields.items()
    ]
    assert [f["field_id"] for f in api_fields] == [
        int(form[f"leads[status][0][custom_fields][{k}][id]"]) for k in (0, 1)
    ]


def test_amocrm_resend_posts_the_same_request_again(amo: AmoCrmFake, receiver: Receiver) -> None:
    lead_id = amo.create_lead("Order A-1", pipeline_id=7001, status_id=61001)
    amo.change_statuses([(lead_id, 61002)])

    status, answer = control(amo, "POST", "/_resend")

    assert status == 200 and answer["delivery"]["lead_ids"] == [lead_id]
    first, again = receiver.posts
    assert again.body == first.body
    assert again.headers["x-amocrm-requestid"] == first.headers["x-amocrm-requestid"]


def test_a_status_change_for_a_lead_that_does_not_exist_changes_nothing(
    amo: AmoCrmFake, receiver: Receiver
) -> None:
    lead_id = amo.create_lead("Order A-1", pipeline_id=7001, status_id=61001)

    with pytest.raises(KeyError, match="no lead 5"):
        amo.change_statuses([(lead_id, 142), (5, 142)])

    assert amo.lead(lead_id)["status_id"] == 61001 and receiver.posts == []


# -- amoCRM: the API -------------------------------------------------------------------------------
def test_the_api_wants_the_bearer_token(amo: AmoCrmFake) -> None:
    lead_id = amo.create_lead("Order A-1", pipeline_id=7001, status_id=61001)
    path = f"/api/v4/leads/{lead_id}"

    for token in (None, "wrong-token"):
        status, headers, raw = amo_get(amo, path, token)
        assert status == 401 and headers["content-type"] == "application/problem+json"
        problem = json.loads(raw)
        assert {key: problem[key] for key in ("title", "type", "status")} == {
            "title": "Unauthorized",
            "type": "https://httpstatus.es/401",
            "status": 401,
        }
        assert problem["detail"]

    assert control(amo, "POST", "/_token/revoke") == (200, {"token_revoked": True})
    assert amo_get(amo, path)[0] == 401
    amo.restore_token()
    status, headers, raw = amo_get(amo, path)
    assert status == 200 and headers["content-type"] == "application/hal+json"
    assert json.loads(raw)["id"] == lead_id


def test_a_missing_lead_or_contact_is_204_with_no_body(amo: AmoCrmFake) -> None:
    for path in ("/api/v4/leads/123", "/api/v4/contacts/123"):
        status, _, raw = amo_get(amo, path)
        assert (status, raw) == (204, b"")


def test_with_contacts_embeds_the_leads_contacts(amo: AmoCrmFake) -> None:
    contact_id = amo.create_contact("Ann Lee", "+79161234567")
    lead_id = amo.create_lead("Order A-1", pipeline_id=7001, status_id=61001, contact_id=contact_id)
    alone = amo.create_lead("Order A-2", pipeline_id=7001, status_id=61001)

    plain = json.loads(amo_get(amo, f"/api/v4/leads/{lead_id}")[2])
    embedded = json.loads(amo_get(amo, f"/api/v4/leads/{lead_id}?with=contacts")[2])
    nobody = json.loads(amo_get(amo, f"/api/v4/leads/{alone}?with=contacts,loss_reason")[2])

    assert plain["_embedded"] == {"tags": [], "companies": []}
    assert embedded["_embedded"]["contacts"] == [
        {
            "id": contact_id,
            "is_main": True,
            "_links": {"self": {"href": f"{amo.base_url}/api/v4/contacts/{contact_id}"}},
        }
    ]
    assert nobody["_embedded"]["contacts"] == []
    for key in ("price", "responsible_user_id", "group_id", "status_id", "pipeline_id", "loss_reason_id"):
        assert key in plain
    assert (plain["is_deleted"], plain["account_id"], plain["closed_at"]) == (False, 29085955, None)
    assert plain["_links"]["self"]["href"] == f"{amo.base_url}/api/v4/leads/{lead_id}"


def test_a_contact_carries_its_phone_in_the_phone_custom_field(amo: AmoCrmFake) -> None:
    with_phone = amo.create_contact("Ann Lee", "+79161234567")
    without = amo.create_contact("Bob", None)

    contact = json.loads(amo_get(amo, f"/api/v4/contacts/{with_phone}")[2])
    bare = json.loads(amo_get(amo, f"/api/v4/contacts/{without}")[2])

    [phone] = contact["custom_fields_values"]
    assert (phone["field_code"], phone["field_type"], phone["field_name"]) == (
        "PHONE",
        "multitext",
        "Телефон",
    )
    assert phone["values"] == [
        {"value": "+79161234567", "enum_id": phone["values"][0]["enum_id"], "enum_code": "MOB"}
    ]
    assert (contact["first_name"], contact["last_name"], contact["name"]) == ("Ann", "Lee", "Ann Lee")
    assert bare["custom_fields_values"] is None


def test_amocrm_faults_are_problem_json_and_leave_control_endpoints_alone(amo: AmoCrmFake) -> None:
    control(amo, "POST", "/_faults", {"fail_next": 1, "status": 502})
    control(amo, "POST", "/_faults", {"rate_limit_next": 1, "retry_after": 9})
    status, created = control(
        amo, "POST", "/_leads", {"name": "Order A-1", "pipeline_id": 7001, "status_id": 61001}
    )
    assert status == 201

    status, headers, raw = amo_get(amo, f"/api/v4/leads/{created['lead_id']}")
    assert (status, headers["content-type"], json.loads(raw)["status"]) == (
        502,
        "application/problem+json",
        502,
    )
    status, headers, raw = amo_get(amo, f"/api/v4/leads/{created['lead_id']}")
    assert (status, headers["retry-after"]) == (429, "9")
    assert json.loads(raw)["title"] == "Too Many Requests"
    assert amo_get(amo, f"/api/v4/leads/{created['lead_id']}")[0] == 200


# -- amoCRM: control endpoints ---------------------------------------------------------------------
def test_amocrm_control_endpoints_drive_the_account_over_http(amo: AmoCrmFake, receiver: Receiver) -> None:
    status, created = control(
        amo,
        "POST",
        "/_leads",
        {
            "name": "Order A-1",
            "pipeline_id": 7001,
            "status_id": 61001,
            "contact": {"name": "Ann", "phone": "+7916"},
            "custom_fields": {"Delivery": "Pickup"},
        },
    )
    assert status == 201
    status, other = control(
        amo, "POST", "/_leads", {"name": "Order A-2", "pipeline_id": 7001, "status_id": 61001}
    )
    assert status == 201 and other["contact_id"] is None

    status, changed = control(
        amo,
        "POST",
        "/_leads/status",
        {"leads": [{"id": created["lead_id"], "status_id": 142}, {"id": other["lead_id"], "status_id": 143}]},
    )
    assert status == 200 and changed["delivery"]["status"] == 200
    assert changed["delivery"]["lead_ids"] == [created["lead_id"], other["lead_id"]]
    assert len(receiver.posts) == 1

    status, lead = control(amo, "GET", f"/_leads/{created['lead_id']}")
    assert status == 200 and lead["status_id"] == 142
    assert lead["_embedded"]["contacts"][0]["id"] == created["contact_id"]
    assert lead["custom_fields_values"][0]["values"] == [{"value": "Pickup"}]
    assert control(amo, "POST", "/_contacts", {"name": "Bob"})[0] == 201
    assert control(amo, "GET", "/_account")[1]["base_url"] == amo.base_url


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/_leads", {"pipeline_id": 1, "status_id": 2}, "name must be a non-empty string"),
        (
            "/_leads",
            {"name": "x", "pipeline_id": "seven", "status_id": 2},
            "pipeline_id must be a positive integer",
        ),
        ("/_leads", {"name": "x", "pipeline_id": 1, "status_id": 0}, "status_id must be a positive integer"),
        ("/_leads", {"name": "x", "pipeline_id": 1, "status_id": 2, "contact_id": 5}, "no contact 5"),
        (
            "/_leads",
            {"name": "x", "pipeline_id": 1, "status_id": 2, "custom_fields": ["a"]},
            "custom_fields must be",
        ),
        (
            "/_leads",
            {"name": "x", "pipeline_id": 1, "status_id": 2, "custom_fields": {"Delivery": 5}},
            "custom_fields must map non-empty field names to text values",
        ),
        ("/_leads/status", {"leads": []}, "leads must be a non-empty list"),
        ("/_leads/status", {"leads": [{"id": 5, "status_id": 142}]}, "no lead 5"),
        ("/_leads/status", {"leads": [{"id": 31000001}]}, "status_id must be a positive integer"),
        (
            "/_leads/status",
            {"leads": [{"id": 31000001, "status_id": 142, "stage": 1}]},
            "unknown keys ['stage']",
        ),
        ("/_contacts", {"phone": "+7916"}, "name must be a non-empty string"),
        ("/_contacts", "Ann", "expected a JSON object"),
    ],
)
def test_amocrm_control_input_it_cannot_follow_is_a_400_saying_why(
    amo: AmoCrmFake, receiver: Receiver, path: str, body: Any, message: str
) -> None:
    amo.create_lead("Order A-1", pipeline_id=7001, status_id=61001)

    status, answer = control(amo, "POST", path, body)

    assert status == 400 and message in answer["error"]
    assert receiver.posts == []
    assert amo.lead(31000001)["status_id"] == 61001


def test_amocrm_without_a_handler_refuses_to_emit() -> None:
    with running(AmoCrmFake()) as fake:
        lead_id = fake.create_lead("Order A-1", pipeline_id=7001, status_id=61001)
        with pytest.raises(NoHandlerError, match="configure_handler"):
            fake.change_statuses([(lead_id, 142)])
        assert fake.lead(lead_id)["status_id"] == 61001
        status, body = control(fake, "POST", "/_resend")
        assert status == 409 and "configure_handler" in body["error"]


def test_emission_timeout_is_short(monkeypatch: pytest.MonkeyPatch) -> None:
    """A handler that never answers costs the caller the emit timeout, not forever."""
    monkeypatch.setattr("local.fakes.emitting.EMIT_TIMEOUT_SECONDS", 0.3)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        with running(AmoCrmFake(handler_url=f"http://127.0.0.1:{listener.getsockname()[1]}/")) as fake:
            lead_id = fake.create_lead("Order A-1", pipeline_id=7001, status_id=61001)
            started = time.monotonic()
            delivery = fake.change_statuses([(lead_id, 142)])
    assert delivery.status is None and delivery.error is not None
    assert time.monotonic() - started < 3


# -- what the integration's user may read, and a contact's phone corrected -----------------------------
def test_a_hidden_deal_is_refused_by_crm_deal_get_and_left_out_of_the_lists(
    portal: Bitrix24PortalFake,
) -> None:
    """As a portal whose inbound webhook's user has no Read on the deal's pipeline: crm.deal.get
    says "Access denied" (HTTP 400, no code), the list methods leave it and its history out."""
    shown, hidden = portal.create_deal("Shown").deal_id, portal.create_deal("Hidden", category_id=2).deal_id
    assert control(portal, "POST", "/_access", {"hidden_pipelines": [2]}) == (
        200,
        {"hidden_pipelines": [2], "hidden_orders": []},
    )

    assert rest(portal, "crm.deal.get", {"id": hidden}) == (
        400,
        {"error": "", "error_description": "Access denied"},
    )
    assert rest(portal, "crm.deal.get", {"id": 999})[1]["error_description"] == "Not found"
    _, listed = rest(portal, "crm.deal.list", {})
    assert [deal["ID"] for deal in listed["result"]] == [str(shown)]
    _, history = rest(portal, "crm.stagehistory.list", {"entityTypeId": 2})
    assert [item["OWNER_ID"] for item in history["result"]["items"]] == [shown]
    assert control(portal, "POST", "/_access", {"hidden_pipelines": "2"})[0] == 400

    control(portal, "POST", "/_access", {})
    assert rest(portal, "crm.deal.get", {"id": hidden})[0] == 200


def test_a_hidden_lead_is_403_and_left_out_of_the_events(amo: AmoCrmFake) -> None:
    contact = amo.create_contact("Ann", "+375291234567")
    lead = amo.create_lead("Order", 7001, 70012, contact_id=contact)
    amo.access.hide(orders=[lead])

    status, headers, body = amo_get(amo, f"/api/v4/leads/{lead}")
    assert status == 403 and headers["content-type"] == "application/problem+json"
    assert json.loads(body)["title"] == "Forbidden"
    assert amo_get(amo, f"/api/v4/events?filter[entity]=lead&filter[entity_id][]={lead}")[0] == 204

    assert control(amo, "POST", f"/_contacts/{contact}/phone", {"phone": "+375297654321"})[0] == 200
    _, _, raw = amo_get(amo, f"/api/v4/contacts/{contact}")
    [field] = json.loads(raw)["custom_fields_values"]
    assert field["values"][0]["value"] == "+375297654321"


def test_a_bitrix24_contact_phone_corrected_through_the_control_endpoint(portal: Bitrix24PortalFake) -> None:
    contact = portal.create_contact("Ann", None)

    assert control(portal, "POST", f"/_contacts/{contact}/phone", {"phone": "+375297654321"})[0] == 200

    _, answer = rest(portal, "crm.contact.get", {"id": contact})
    assert [entry["VALUE"] for entry in answer["result"]["PHONE"]] == ["+375297654321"]
    assert answer["result"]["HAS_PHONE"] == "Y"
    assert control(portal, "POST", "/_contacts/999/phone", {"phone": "+375297654321"})[0] == 404
