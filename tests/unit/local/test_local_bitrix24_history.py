"""The Bitrix24 stand-in keeps the portal's stage history and serves `crm.stagehistory.list` as
Bitrix24 does; deals and moves can be dated in the past, moves can come in bursts, and a portal
can answer deals without MOVED_TIME."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from local.fakes.bitrix24 import Bitrix24PortalFake, portal_time
from tests.unit.local.crm_portal_support import T0, Post, Receiver, control, rest, rest_fields, running

WEEK = 7 * 24 * 3600
NEW_YORK = timezone(timedelta(hours=-5))
HISTORY = "crm.stagehistory.list"


def history(portal: Bitrix24PortalFake, **params: Any) -> list[dict[str, Any]]:
    status, answer = rest(portal, HISTORY, {"entityTypeId": 2, **params})
    assert status == 200, answer
    return list(answer["result"]["items"])


def record(
    record_id: int, type_id: int, deal_id: int, at: int, stage: str, category: int = 0
) -> dict[str, Any]:
    semantic = {"WON": "S", "LOSE": "F", "APOLOGY": "F"}.get(stage.rpartition(":")[2], "P")
    return {
        "ID": record_id,
        "TYPE_ID": type_id,
        "OWNER_ID": deal_id,
        "CREATED_TIME": portal_time(at),
        "CATEGORY_ID": category,
        "STAGE_SEMANTIC_ID": semantic,
        "STAGE_ID": stage,
    }


# -- the records -----------------------------------------------------------------------------------
def test_creation_and_each_move_add_a_record_as_the_portal_answers_it(portal: Bitrix24PortalFake) -> None:
    deal_id = portal.create_deal("Order A-1042", category_id=2).deal_id
    portal.move_deal(deal_id, "PREPARATION")
    portal.edit_deal(deal_id, COMMENTS="gift wrap")  # not a stage change: no record
    portal.move_deal(deal_id, "PREPARATION")  # a re-save in the same stage: no record
    portal.move_deal(deal_id, "WON")
    lost = portal.create_deal("Order A-1043").deal_id
    portal.move_deal(lost, "APOLOGY")

    status, answer = rest(portal, HISTORY, {"entityTypeId": 2})

    assert status == 200
    assert answer["result"]["items"] == [
        record(1, 1, deal_id, T0, "C2:NEW", category=2),
        record(2, 2, deal_id, T0 + 1, "C2:PREPARATION", category=2),
        record(3, 3, deal_id, T0 + 4, "C2:WON", category=2),
        record(4, 1, lost, T0 + 5, "NEW"),
        record(5, 3, lost, T0 + 6, "APOLOGY"),
    ]
    assert answer["total"] == 5 and "next" not in answer
    assert {"start", "finish", "duration"} <= set(answer["time"])
    first = answer["result"]["items"][0]
    assert all(isinstance(first[key], int) for key in ("ID", "TYPE_ID", "OWNER_ID", "CATEGORY_ID"))
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+03:00", first["CREATED_TIME"])


@pytest.mark.parametrize("entity_type", [1, 5, "1"])
def test_leads_and_old_invoices_have_no_records_here(portal: Bitrix24PortalFake, entity_type: object) -> None:
    portal.create_deal("Order A-1042")

    status, answer = rest(portal, HISTORY, {"entityTypeId": entity_type})

    assert status == 200 and answer["result"] == {"items": []} and answer["total"] == 0


@pytest.mark.parametrize("params", [{}, {"entityTypeId": 3}, {"entityTypeId": 31}, {"entityTypeId": "deal"}])
def test_another_entity_type_is_a_bitrix_400(portal: Bitrix24PortalFake, params: dict[str, Any]) -> None:
    status, answer = rest(portal, HISTORY, params)

    assert status == 400 and answer["error"] == "ENTITY_TYPE_NOT_SUPPORTED"
    assert "is not supported" in answer["error_description"]


def test_pages_hold_50_records_with_total_and_next(portal: Bitrix24PortalFake) -> None:
    deal_id = portal.create_deal("Order A-1042").deal_id
    for move in range(59):
        portal.move_deal(deal_id, "PREPARATION" if move % 2 == 0 else "EXECUTING")

    status, first = rest(portal, HISTORY, {"entityTypeId": 2})
    _, second = rest(portal, HISTORY, {"entityTypeId": 2, "start": first["next"]})

    assert status == 200 and (first["total"], first["next"]) == (60, 50)
    assert [item["ID"] for item in first["result"]["items"]] == list(range(1, 51))
    assert second["total"] == 60 and "next" not in second
    assert [item["ID"] for item in second["result"]["items"]] == list(range(51, 61))


# -- filter, order, select -------------------------------------------------------------------------
@pytest.fixture
def two_deals(portal: Bitrix24PortalFake) -> Bitrix24PortalFake:
    """Records 1-3 for deal 1 (NEW, EXECUTING, WON), 4-5 for deal 2 (NEW, LOSE), one second apart."""
    first = portal.create_deal("Order A-1042").deal_id
    portal.move_deal(first, "EXECUTING")
    portal.move_deal(first, "WON")
    second = portal.create_deal("Order A-1043").deal_id
    portal.move_deal(second, "LOSE")
    return portal


@pytest.mark.parametrize(
    ("conditions", "ids"),
    [
        ({"OWNER_ID": 2}, [4, 5]),
        ({"=OWNER_ID": "2"}, [4, 5]),
        ({">ID": 2}, [3, 4, 5]),
        ({">=ID": 2, "<ID": 4}, [2, 3]),
        ({"<=ID": 2}, [1, 2]),
        ({"!TYPE_ID": 1}, [2, 3, 5]),
        ({"!=STAGE_ID": "NEW"}, [2, 3, 5]),
        ({"TYPE_ID": [1, 3]}, [1, 3, 4, 5]),
        ({"@STAGE_ID": ["WON", "LOSE"]}, [3, 5]),
        ({"!@STAGE_ID": ["WON", "LOSE"]}, [1, 2, 4]),
        ({"!OWNER_ID": [1]}, [4, 5]),
        ({"STAGE_SEMANTIC_ID": "F"}, [5]),
        ({"CATEGORY_ID": 0, "TYPE_ID": 3}, [3, 5]),
        ({">=CREATED_TIME": portal_time(T0 + 2)}, [3, 4, 5]),
        # The same instant written in UTC and in another zone: compared as instants.
        ({">CREATED_TIME": datetime.fromtimestamp(T0 + 2, UTC).isoformat()}, [4, 5]),
        ({"<CREATED_TIME": datetime.fromtimestamp(T0 + 2, NEW_YORK).isoformat()}, [1, 2]),
        ({"OWNER_ID": 99}, []),
    ],
)
def test_filters_take_bitrix_prefixes_and_lists(
    two_deals: Bitrix24PortalFake, conditions: dict[str, Any], ids: list[int]
) -> None:
    assert [item["ID"] for item in history(two_deals, filter=conditions)] == ids


def test_form_and_query_parameters_read_as_php_reads_them(two_deals: Bitrix24PortalFake) -> None:
    fields = [
        ("entityTypeId", "2"),
        ("filter[>=ID]", "2"),
        ("filter[OWNER_ID][]", "1"),
        ("filter[OWNER_ID][]", "2"),
        ("filter[!TYPE_ID]", "3"),
        ("order[ID]", "DESC"),
        ("select[]", "ID"),
        ("select[]", "STAGE_ID"),
    ]
    expected = [{"ID": 4, "STAGE_ID": "NEW"}, {"ID": 2, "STAGE_ID": "EXECUTING"}]
    for transport in ("form", "query"):
        status, answer = rest_fields(two_deals, HISTORY, fields, transport)
        assert status == 200 and answer["result"]["items"] == expected, transport


def test_order_by_id_or_by_created_time(two_deals: Bitrix24PortalFake) -> None:
    # A move dated before deal 2 was made: its record has the last ID but not the last time.
    two_deals.move_deal(1, "APOLOGY", at=T0 + 2)

    by_id = history(two_deals, order={"ID": "DESC"}, select=["ID"])
    by_time = history(two_deals, order={"CREATED_TIME": "asc"}, select=["ID", "CREATED_TIME"])
    default = history(two_deals, select=["ID"])

    assert [item["ID"] for item in by_id] == [6, 5, 4, 3, 2, 1]
    assert [item["ID"] for item in by_time] == [1, 2, 3, 6, 4, 5]  # ties stay in ID order
    assert [item["ID"] for item in default] == [1, 2, 3, 4, 5, 6]


def test_select_answers_only_the_fields_named(two_deals: Bitrix24PortalFake) -> None:
    assert history(two_deals, select=["OWNER_ID", "TYPE_ID"], filter={"ID": 3}) == [
        {"TYPE_ID": 3, "OWNER_ID": 1}
    ]
    assert list(history(two_deals, select=["*"], filter={"ID": 3})[0]) == [
        "ID",
        "TYPE_ID",
        "OWNER_ID",
        "CREATED_TIME",
        "CATEGORY_ID",
        "STAGE_SEMANTIC_ID",
        "STAGE_ID",
    ]


@pytest.mark.parametrize(
    ("params", "description"),
    [
        ({"filter": {"TITLE": "x"}}, "Invalid filter: field 'TITLE' is not allowed in filter"),
        ({"filter": {">OWNER_ID": "two"}}, "Invalid filter: field 'OWNER_ID' has invalid value"),
        (
            {"filter": {"<CREATED_TIME": "yesterday"}},
            "Invalid filter: field 'CREATED_TIME' has invalid value",
        ),
        ({"filter": {">ID": [1, 2]}}, "Invalid filter: field 'ID' has invalid value"),
        ({"order": {"TITLE": "ASC"}}, "Invalid order: field 'TITLE' is not allowed in order"),
        ({"order": {"ID": "UP"}}, "allowed sort directions are ASC, DESC. But got 'UP' for field 'ID'"),
    ],
)
def test_a_filter_or_order_it_cannot_follow_is_a_bitrix_400(
    two_deals: Bitrix24PortalFake, params: dict[str, Any], description: str
) -> None:
    status, answer = rest(two_deals, HISTORY, {"entityTypeId": 2, **params})

    assert status == 400 and answer["error"] == "INVALID_ARG_VALUE"
    assert description in answer["error_description"]


# -- dated in the past -----------------------------------------------------------------------------
def test_a_week_old_deal_and_a_move_made_20_minutes_ago(
    portal: Bitrix24PortalFake, receiver: Receiver
) -> None:
    status, created = control(portal, "POST", "/_deals", {"title": "Order A-1042", "age_seconds": WEEK})
    assert status == 201
    deal_id = created["deal_id"]
    deal = portal.deal(deal_id)
    assert deal["DATE_CREATE"] == deal["MOVED_TIME"] == portal_time(T0 - WEEK)

    status, moved = control(
        portal, "POST", f"/_deals/{deal_id}/move", {"stage_id": "EXECUTING", "age_seconds": 1200}
    )

    assert status == 200
    assert moved["deal"]["MOVED_TIME"] == moved["deal"]["DATE_MODIFY"] == portal_time(T0 - 1200)
    assert [post.form()["ts"] for post in receiver.posts] == [str(T0 - WEEK), str(T0 - 1200)]
    assert history(portal) == [
        record(1, 1, deal_id, T0 - WEEK, "NEW"),
        record(2, 2, deal_id, T0 - 1200, "EXECUTING"),
    ]
    assert [item["ID"] for item in history(portal, filter={">=CREATED_TIME": portal_time(T0 - 3600)})] == [2]


def test_created_at_and_at_take_unix_seconds(portal: Bitrix24PortalFake) -> None:
    status, created = control(portal, "POST", "/_deals", {"title": "Order A-1042", "created_at": T0 - 86400})
    assert status == 201
    deal_id = created["deal_id"]
    control(portal, "POST", f"/_deals/{deal_id}/move", {"stage_id": "WON", "at": T0 - 60})

    assert [item["CREATED_TIME"] for item in history(portal)] == [
        portal_time(T0 - 86400),
        portal_time(T0 - 60),
    ]


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/_deals", {"title": "Order A-1043", "created_at": T0 + 3600}, "is in the future"),
        (
            "/_deals",
            {"title": "Order A-1043", "age_seconds": -5},
            "age_seconds must be a number of seconds >= 0",
        ),
        ("/_deals", {"title": "Order A-1043", "created_at": T0 - 60, "age_seconds": 60}, "give one of"),
        (
            "/_deals/1/move",
            {"stage_id": "WON", "age_seconds": 2 * WEEK},
            "before the deal's last stage change",
        ),
        ("/_deals/1/move", {"stage_id": "WON", "at": "yesterday"}, "at must be a number of seconds"),
    ],
)
def test_a_date_it_cannot_follow_is_a_400_and_changes_nothing(
    portal: Bitrix24PortalFake, receiver: Receiver, path: str, body: dict[str, Any], message: str
) -> None:
    control(portal, "POST", "/_deals", {"title": "Order A-1042", "age_seconds": WEEK})
    posted = len(receiver.posts)

    status, answer = control(portal, "POST", path, body)

    assert status == 400 and message in answer["error"]
    assert len(receiver.posts) == posted
    assert [item["ID"] for item in history(portal)] == [1]
    assert portal.deal(1)["STAGE_ID"] == "NEW"


# -- bursts ----------------------------------------------------------------------------------------
def test_a_burst_posts_one_update_per_move_after_all_the_moves(
    portal: Bitrix24PortalFake, receiver: Receiver
) -> None:
    deal_id = portal.create_deal("Order A-1042").deal_id
    seen: list[str] = []

    def read_deal(post: Post) -> None:
        seen.append(
            rest(portal, "crm.deal.get", {"id": post.form()["data[FIELDS][ID]"]})[1]["result"]["STAGE_ID"]
        )

    receiver.on_post = read_deal
    status, burst = control(
        portal, "POST", f"/_deals/{deal_id}/burst", {"stage_ids": ["PREPARATION", "EXECUTING", "WON"]}
    )

    assert status == 200 and burst["deal"]["STAGE_ID"] == "WON"
    assert [(item["fate"], item["status"]) for item in burst["deliveries"]] == [("posted", 200)] * 3
    updates = receiver.posts[1:]
    assert [post.form()["event"] for post in updates] == ["ONCRMDEALUPDATE"] * 3
    assert len({post.body for post in updates}) == 1  # same deal, same second: byte-identical
    assert updates[0].form()["ts"] == str(T0 + 1)
    assert seen == ["WON", "WON", "WON"]  # the handler only ever reads the last stage
    assert history(portal)[1:] == [
        record(2, 2, deal_id, T0 + 1, "PREPARATION"),
        record(3, 2, deal_id, T0 + 1, "EXECUTING"),
        record(4, 3, deal_id, T0 + 1, "WON"),
    ]


def test_a_collapsed_burst_posts_one_update_and_keeps_every_record(
    portal: Bitrix24PortalFake, receiver: Receiver
) -> None:
    deal_id = portal.create_deal("Order A-1042", category_id=2).deal_id

    deliveries = portal.burst_moves(deal_id, ["PREPARATION", "LOSE"], collapse=True)

    assert len(deliveries) == 1 and deliveries[0].status == 200
    assert [post.form()["event"] for post in receiver.posts] == ["ONCRMDEALADD", "ONCRMDEALUPDATE"]
    assert [(item["TYPE_ID"], item["STAGE_ID"]) for item in history(portal)] == [
        (1, "C2:NEW"),
        (2, "C2:PREPARATION"),
        (3, "C2:LOSE"),
    ]


def test_each_webhook_of_a_burst_may_be_lost(portal: Bitrix24PortalFake, receiver: Receiver) -> None:
    deal_id = portal.create_deal("Order A-1042").deal_id
    control(portal, "POST", "/_webhook_faults", {"lose_next_webhooks": 2})

    deliveries = portal.burst_moves(deal_id, ["EXECUTING", "FINAL_INVOICE", "WON"])

    assert [delivery.fate for delivery in deliveries] == ["lost", "lost", "posted"]
    assert len(receiver.posts) == 2
    assert len(history(portal)) == 4


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"stage_ids": ["WON"]}, "at least two stage ids"),
        ({"stage_ids": ["EXECUTING", "EXECUTING"]}, "EXECUTING follows EXECUTING"),
        ({"stage_ids": ["NEW", "WON"]}, "NEW follows NEW"),
        ({"stage_ids": ["EXECUTING", "C3:WON"]}, "belongs to category 3"),
        ({"stage_ids": "WON"}, "stage_ids must be a list"),
        ({"stage_ids": ["EXECUTING", "WON"], "collapse": "yes"}, "collapse must be true or false"),
    ],
)
def test_a_burst_it_cannot_follow_is_a_400_and_moves_nothing(
    portal: Bitrix24PortalFake, receiver: Receiver, body: dict[str, Any], message: str
) -> None:
    deal_id = portal.create_deal("Order A-1042").deal_id

    status, answer = control(portal, "POST", f"/_deals/{deal_id}/burst", body)

    assert status == 400 and message in answer["error"]
    assert portal.deal(deal_id)["STAGE_ID"] == "NEW" and len(history(portal)) == 1
    assert len(receiver.posts) == 1


# -- a portal without MOVED_TIME -------------------------------------------------------------------
def test_a_portal_without_moved_time_answers_deals_without_it(receiver: Receiver) -> None:
    with running(Bitrix24PortalFake(handler_url=receiver.url, omit_moved_time=True)) as portal:
        deal_id = portal.create_deal("Order A-1042").deal_id
        portal.move_deal(deal_id, "WON")

        got = rest(portal, "crm.deal.get", {"id": deal_id})[1]["result"]
        listed = rest(portal, "crm.deal.list", {"filter": {"ID": deal_id}})[1]["result"]
        assert "MOVED_TIME" not in got and got["STAGE_ID"] == "WON" and "DATE_MODIFY" in got
        assert "MOVED_TIME" not in listed[0]
        assert "MOVED_TIME" not in control(portal, "GET", f"/_deals/{deal_id}")[1]
        assert control(portal, "GET", "/_portal")[1]["omit_moved_time"] is True
        assert [item["STAGE_ID"] for item in history(portal)] == ["NEW", "WON"]  # the history is there

        status, options = control(portal, "POST", "/_portal", {"omit_moved_time": False})

        assert status == 200 and options["omit_moved_time"] is False
        assert "MOVED_TIME" in rest(portal, "crm.deal.get", {"id": deal_id})[1]["result"]


def test_the_moved_time_option_can_be_set_over_http(portal: Bitrix24PortalFake) -> None:
    deal_id = portal.create_deal("Order A-1042").deal_id

    assert control(portal, "POST", "/_portal", {"omit_moved_time": True})[0] == 200

    assert "MOVED_TIME" not in rest(portal, "crm.deal.get", {"id": deal_id})[1]["result"]
    assert control(portal, "POST", "/_portal", {"omit_moved_time": "yes"})[0] == 400
    assert control(portal, "POST", "/_portal", {"moved_time": False})[0] == 400
