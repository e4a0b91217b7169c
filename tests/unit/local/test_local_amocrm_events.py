"""The amoCRM stand-in keeps the account's events and serves `GET /api/v4/events` as amoCRM does;
leads and moves can be dated in the past, and moves can come in bursts."""

from __future__ import annotations

import json
import re
import urllib.parse
from typing import Any

import pytest

from local.fakes.amocrm import AmoCrmFake
from tests.unit.local.crm_portal_support import T0, Receiver, amo_get, control, http

EVENT_ID = re.compile(r"^[0-9a-hjkmnp-tv-z]{26}$")  # lowercase Crockford base32, as amoCRM's
PIPELINE, NEW, PACKED, READY, WON = 7001, 70011, 70012, 70013, 142
USER_ID, ACCOUNT_ID = 10000698, 29085955
WEEK = 7 * 24 * 3600


def events(amo: AmoCrmFake, query: list[tuple[str, str]] | str = "") -> tuple[int, dict[str, str], Any]:
    """`GET /api/v4/events` with the query as sent; (status, headers, JSON or None for no body)."""
    encoded = query if isinstance(query, str) else urllib.parse.urlencode(query)
    status, headers, raw = amo_get(amo, f"/api/v4/events?{encoded}" if encoded else "/api/v4/events")
    return status, headers, json.loads(raw) if raw else None


def listed(amo: AmoCrmFake, query: list[tuple[str, str]] | str = "") -> list[dict[str, Any]]:
    status, _, document = events(amo, query)
    if status == 204:
        return []
    assert status == 200, document
    return list(document["_embedded"]["events"])


def moves(found: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    """(lead, status before, status after) of each lead_status_changed event, as listed."""
    return [
        (
            event["entity_id"],
            event["value_before"][0]["lead_status"]["id"],
            event["value_after"][0]["lead_status"]["id"],
        )
        for event in found
        if event["type"] == "lead_status_changed"
    ]


# -- the events ------------------------------------------------------------------------------------
def test_a_new_lead_and_its_moves_are_events_in_amocrm_shape(amo: AmoCrmFake) -> None:
    lead_id = amo.create_lead("Order A-1042", pipeline_id=PIPELINE, status_id=NEW)
    amo.change_statuses([(lead_id, READY, 7002)])
    amo.change_statuses([(lead_id, READY)])  # already there: a webhook, but no event

    status, headers, document = events(amo)

    assert status == 200 and headers["content-type"] == "application/hal+json"
    assert document["_page"] == 1 and "next" not in document["_links"]
    assert document["_links"]["self"]["href"] == f"{amo.base_url}/api/v4/events?page=1&limit=50"
    moved, added = document["_embedded"]["events"]  # newest first
    assert EVENT_ID.fullmatch(moved["id"]) and EVENT_ID.fullmatch(added["id"])
    assert moved == {
        "id": moved["id"],
        "type": "lead_status_changed",
        "entity_id": lead_id,
        "entity_type": "lead",
        "created_by": USER_ID,
        "created_at": T0 + 1,
        "value_after": [{"lead_status": {"id": READY, "pipeline_id": 7002}}],
        "value_before": [{"lead_status": {"id": NEW, "pipeline_id": PIPELINE}}],
        "account_id": ACCOUNT_ID,
        "_links": {"self": {"href": f"{amo.base_url}/api/v4/events/{moved['id']}"}},
        "_embedded": {
            "entity": {"id": lead_id, "_links": {"self": {"href": f"{amo.base_url}/api/v4/leads/{lead_id}"}}}
        },
    }
    # A creation is `lead_added`, its value_after a note, as amoCRM documents it: not a status.
    assert (added["type"], added["entity_id"], added["created_at"]) == ("lead_added", lead_id, T0)
    assert added["value_before"] == [] and list(added["value_after"][0]) == ["note"]
    assert isinstance(added["value_after"][0]["note"]["id"], int)


def test_one_event_can_be_read_by_its_id(amo: AmoCrmFake) -> None:
    lead_id = amo.create_lead("Order A-1042", pipeline_id=PIPELINE, status_id=NEW)
    amo.change_statuses([(lead_id, PACKED)])
    [moved, _] = listed(amo)

    status, headers, raw = amo_get(amo, f"/api/v4/events/{moved['id']}")

    assert (status, headers["content-type"]) == (200, "application/hal+json")
    assert json.loads(raw) == moved
    assert amo_get(amo, "/api/v4/events/01pz58t6p04ymgsgfbmfyfy1mf")[:3:2] == (204, b"")


def test_event_ids_are_time_ordered_strings(amo: AmoCrmFake) -> None:
    older = amo.create_lead("Order A-1041", pipeline_id=PIPELINE, status_id=NEW, created_at=T0 - WEEK)
    newer = amo.create_lead("Order A-1042", pipeline_id=PIPELINE, status_id=NEW)
    amo.change_statuses([(newer, PACKED)])
    amo.change_statuses([(older, PACKED)], at={older: T0 - 3600})  # made later, dated earlier

    found = listed(amo)

    assert [(event["entity_id"], event["created_at"]) for event in found] == [
        (newer, T0 + 2),
        (newer, T0 + 1),
        (older, T0 - 3600),
        (older, T0 - WEEK),
    ]
    assert [event["id"] for event in found] == sorted((event["id"] for event in found), reverse=True)


def test_no_events_is_204_with_an_empty_body(amo: AmoCrmFake) -> None:
    status, _, raw = amo_get(amo, "/api/v4/events")
    assert (status, raw) == (204, b"")

    amo.create_lead("Order A-1042", pipeline_id=PIPELINE, status_id=NEW)
    assert events(amo, [("filter[type]", "lead_status_changed")])[:3:2] == (204, None)
    assert events(amo, [("page", "2")])[0] == 204


def test_events_want_the_bearer_token(amo: AmoCrmFake) -> None:
    amo.create_lead("Order A-1042", pipeline_id=PIPELINE, status_id=NEW)

    status, headers, _ = amo_get(amo, "/api/v4/events", token="wrong-token")

    assert (status, headers["content-type"]) == (401, "application/problem+json")


# -- filters -----------------------------------------------------------------------------------------
@pytest.fixture
def two_leads(amo: AmoCrmFake) -> tuple[AmoCrmFake, int, int]:
    """Events at T0 .. T0+4: lead 1 added, lead 2 added, 1 -> PACKED, 2 -> READY, 1 -> WON."""
    first = amo.create_lead("Order A-1042", pipeline_id=PIPELINE, status_id=NEW)
    second = amo.create_lead("Order A-1043", pipeline_id=PIPELINE, status_id=NEW)
    amo.change_statuses([(first, PACKED)])
    amo.change_statuses([(second, READY)])
    amo.change_statuses([(first, WON)])
    return amo, first, second


def test_filter_by_type_one_or_several(two_leads: tuple[AmoCrmFake, int, int]) -> None:
    amo, first, second = two_leads
    changed = [("filter[type]", "lead_status_changed")]

    assert moves(listed(amo, changed)) == [(first, PACKED, WON), (second, NEW, READY), (first, NEW, PACKED)]
    assert len(listed(amo, changed)) == 3
    both = [("filter[type][]", "lead_added"), ("filter[type][]", "lead_status_changed")]
    assert len(listed(amo, both)) == 5
    assert len(listed(amo, [("filter[type]", "lead_added,lead_status_changed")])) == 5
    assert [event["type"] for event in listed(amo, [("filter[type][0]", "lead_added")])] == ["lead_added"] * 2


def test_filter_by_entity_and_entity_id(two_leads: tuple[AmoCrmFake, int, int]) -> None:
    amo, first, second = two_leads

    one = listed(amo, [("filter[entity]", "lead"), ("filter[entity_id][]", str(first))])
    both = listed(
        amo,
        [
            ("filter[entity][]", "lead"),
            ("filter[entity_id][]", str(first)),
            ("filter[entity_id][]", str(second)),
        ],
    )

    assert [(event["entity_id"], event["created_at"]) for event in one] == [
        (first, T0 + 4),
        (first, T0 + 2),
        (first, T0),
    ]
    assert len(both) == 5
    assert listed(amo, [("filter[entity]", "contact")]) == []


@pytest.mark.parametrize(
    "query",
    [
        [("filter[entity_id][]", "31000001")],
        [("filter[entity][]", "lead"), ("filter[entity][]", "contact"), ("filter[entity_id][]", "31000001")],
        [("filter[entity]", "lead,contact"), ("filter[entity_id]", "31000001")],
    ],
)
def test_entity_id_without_exactly_one_entity_type_is_refused(
    two_leads: tuple[AmoCrmFake, int, int], query: list[tuple[str, str]]
) -> None:
    status, headers, problem = events(two_leads[0], query)

    assert (status, headers["content-type"]) == (400, "application/problem+json")
    assert (problem["status"], problem["title"]) == (400, "Bad Request")
    [error] = problem["validation-errors"][0]["errors"]
    assert error["path"] == "filter.entity_id" and "exactly one entity type" in error["detail"]


def test_filter_by_created_at_from_and_to_inclusive(two_leads: tuple[AmoCrmFake, int, int]) -> None:
    amo, _, _ = two_leads

    def times(query: list[tuple[str, str]]) -> list[int]:
        return [event["created_at"] for event in listed(amo, query)]

    assert times([("filter[created_at][from]", str(T0 + 1)), ("filter[created_at][to]", str(T0 + 3))]) == [
        T0 + 3,
        T0 + 2,
        T0 + 1,
    ]
    assert times([("filter[created_at][from]", str(T0 + 3))]) == [T0 + 4, T0 + 3]
    assert times([("filter[created_at][to]", str(T0))]) == [T0]
    assert times([("filter[created_at]", str(T0 + 4))]) == [T0 + 4]


def test_filter_by_the_status_a_lead_moved_to(two_leads: tuple[AmoCrmFake, int, int]) -> None:
    amo, first, second = two_leads
    query = [
        ("filter[value_after][leads_statuses][0][pipeline_id]", str(PIPELINE)),
        ("filter[value_after][leads_statuses][0][status_id]", str(READY)),
        ("filter[value_after][leads_statuses][1][pipeline_id]", str(PIPELINE)),
        ("filter[value_after][leads_statuses][1][status_id]", str(WON)),
    ]

    assert moves(listed(amo, query)) == [(first, PACKED, WON), (second, NEW, READY)]


# -- pages ---------------------------------------------------------------------------------------------
def test_pages_follow_limit_and_page_with_a_next_link(two_leads: tuple[AmoCrmFake, int, int]) -> None:
    amo, _, _ = two_leads
    query = [("filter[entity]", "lead"), ("limit", "2")]

    status, _, first = events(amo, query)
    assert status == 200 and first["_page"] == 1
    assert [event["created_at"] for event in first["_embedded"]["events"]] == [T0 + 4, T0 + 3]
    next_href = first["_links"]["next"]["href"]
    assert next_href.startswith(f"{amo.base_url}/api/v4/events?")
    assert "page=2" in next_href and "limit=2" in next_href and "filter%5Bentity%5D=lead" in next_href

    status, _, raw = http(next_href, headers={"Authorization": f"Bearer {amo.token}"})
    second = json.loads(raw)
    assert status == 200 and second["_page"] == 2
    assert [event["created_at"] for event in second["_embedded"]["events"]] == [T0 + 2, T0 + 1]

    status, _, third = events(amo, [*query, ("page", "3")])
    assert status == 200 and "next" not in third["_links"]
    assert [event["created_at"] for event in third["_embedded"]["events"]] == [T0]
    assert events(amo, [*query, ("page", "4")])[0] == 204


def test_the_default_page_holds_50_events(amo: AmoCrmFake) -> None:
    lead_id = amo.create_lead("Order A-1042", pipeline_id=PIPELINE, status_id=NEW)
    for move in range(59):
        amo.change_statuses([(lead_id, PACKED if move % 2 == 0 else READY)])

    status, _, first = events(amo)
    _, _, second = events(amo, [("page", "2")])

    assert status == 200 and len(first["_embedded"]["events"]) == 50 and "next" in first["_links"]
    assert len(second["_embedded"]["events"]) == 10 and "next" not in second["_links"]
    assert len(listed(amo, [("limit", "100")])) == 60


@pytest.mark.parametrize(
    ("query", "path"),
    [("limit=101", "limit"), ("limit=0", "limit"), ("limit=many", "limit"), ("page=0", "page")],
)
def test_a_limit_over_100_or_a_bad_page_is_refused(amo: AmoCrmFake, query: str, path: str) -> None:
    amo.create_lead("Order A-1042", pipeline_id=PIPELINE, status_id=NEW)

    status, _, problem = events(amo, query)

    assert status == 400 and problem["validation-errors"][0]["errors"][0]["path"] == path


# -- dated in the past ---------------------------------------------------------------------------------
def test_a_week_old_lead_and_a_move_made_20_minutes_ago(amo: AmoCrmFake, receiver: Receiver) -> None:
    status, created = control(
        amo,
        "POST",
        "/_leads",
        {"name": "Order A-1042", "pipeline_id": PIPELINE, "status_id": NEW, "age_seconds": WEEK},
    )
    assert status == 201
    lead_id = created["lead_id"]
    assert amo.lead(lead_id)["created_at"] == T0 - WEEK

    status, changed = control(
        amo, "POST", "/_leads/status", {"leads": [{"id": lead_id, "status_id": WON, "age_seconds": 1200}]}
    )

    assert status == 200 and changed["delivery"]["status"] == 200
    lead = amo.lead(lead_id)
    assert (lead["updated_at"], lead["closed_at"]) == (T0 - 1200, T0 - 1200)
    assert receiver.posts[0].form()["leads[status][0][updated_at]"] == str(T0 - 1200)
    assert [(event["type"], event["created_at"]) for event in listed(amo)] == [
        ("lead_status_changed", T0 - 1200),
        ("lead_added", T0 - WEEK),
    ]
    assert listed(amo, [("filter[created_at][from]", str(T0 - 3600))])[0]["created_at"] == T0 - 1200


def test_at_takes_unix_seconds_on_creation_and_on_a_move(amo: AmoCrmFake) -> None:
    status, created = control(
        amo,
        "POST",
        "/_leads",
        {"name": "Order A-1042", "pipeline_id": PIPELINE, "status_id": NEW, "at": T0 - 86400},
    )
    assert status == 201
    control(
        amo,
        "POST",
        "/_leads/status",
        {"leads": [{"id": created["lead_id"], "status_id": PACKED, "at": T0 - 60}]},
    )

    assert [event["created_at"] for event in listed(amo)] == [T0 - 60, T0 - 86400]


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        (
            "/_leads",
            {"name": "Order A-1043", "pipeline_id": PIPELINE, "status_id": NEW, "at": T0 + 60},
            "in the future",
        ),
        (
            "/_leads/status",
            {"leads": [{"id": 31000001, "status_id": WON, "age_seconds": 2 * WEEK}]},
            "latest event",
        ),
        (
            "/_leads/status",
            {"leads": [{"id": 31000001, "status_id": WON, "at": T0 - 5, "age_seconds": 5}]},
            "give one of",
        ),
    ],
)
def test_a_date_it_cannot_follow_is_a_400_and_changes_nothing(
    amo: AmoCrmFake, receiver: Receiver, path: str, body: dict[str, Any], message: str
) -> None:
    amo.create_lead("Order A-1042", pipeline_id=PIPELINE, status_id=NEW, created_at=T0 - WEEK)

    status, answer = control(amo, "POST", path, body)

    assert status == 400 and message in answer["error"]
    assert receiver.posts == [] and len(listed(amo)) == 1
    assert amo.lead(31000001)["status_id"] == NEW


# -- bursts ------------------------------------------------------------------------------------------
def test_a_burst_posts_one_request_per_move(amo: AmoCrmFake, receiver: Receiver) -> None:
    lead_id = amo.create_lead("Order A-1042", pipeline_id=PIPELINE, status_id=NEW)

    status, burst = control(
        amo,
        "POST",
        f"/_leads/{lead_id}/burst",
        {"statuses": [PACKED, READY, {"status_id": WON, "pipeline_id": PIPELINE}]},
    )

    assert status == 200 and burst["lead"]["status_id"] == WON
    assert [item["status"] for item in burst["deliveries"]] == [200, 200, 200]
    forms = [post.form() for post in receiver.posts]
    assert [
        (form["leads[status][0][old_status_id]"], form["leads[status][0][status_id]"]) for form in forms
    ] == [
        (str(NEW), str(PACKED)),
        (str(PACKED), str(READY)),
        (str(READY), str(WON)),
    ]
    assert {form["leads[status][0][updated_at]"] for form in forms} == {str(T0 + 1)}  # the same second
    assert len({post.headers["x-amocrm-requestid"] for post in receiver.posts}) == 3
    found = listed(amo, [("filter[type]", "lead_status_changed")])
    assert moves(found) == [(lead_id, READY, WON), (lead_id, PACKED, READY), (lead_id, NEW, PACKED)]
    assert {event["created_at"] for event in found} == {T0 + 1}


def test_a_collapsed_burst_posts_the_net_change_once_and_keeps_every_event(
    amo: AmoCrmFake, receiver: Receiver
) -> None:
    lead_id = amo.create_lead("Order A-1042", pipeline_id=PIPELINE, status_id=NEW)

    deliveries = amo.burst_statuses(lead_id, [PACKED, READY, WON], collapse=True)

    assert [delivery.lead_ids for delivery in deliveries] == [(lead_id,)]
    [post] = receiver.posts
    assert (post.form()["leads[status][0][old_status_id]"], post.form()["leads[status][0][status_id]"]) == (
        str(NEW),
        str(WON),
    )
    assert len(listed(amo, [("filter[type]", "lead_status_changed")])) == 3


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"statuses": [WON]}, "at least two statuses"),
        ({"statuses": [PACKED, PACKED]}, "follows itself"),
        ({"statuses": [NEW, WON]}, "follows itself"),
        ({"statuses": [PACKED, "won"]}, "status_id must be a positive integer"),
        ({"statuses": PACKED}, "statuses must be a list"),
        ({"statuses": [PACKED, WON], "collapse": 1}, "collapse must be true or false"),
    ],
)
def test_a_burst_it_cannot_follow_is_a_400_and_moves_nothing(
    amo: AmoCrmFake, receiver: Receiver, body: dict[str, Any], message: str
) -> None:
    lead_id = amo.create_lead("Order A-1042", pipeline_id=PIPELINE, status_id=NEW)

    status, answer = control(amo, "POST", f"/_leads/{lead_id}/burst", body)

    assert status == 400 and message in answer["error"]
    assert amo.lead(lead_id)["status_id"] == NEW and receiver.posts == [] and len(listed(amo)) == 1


def test_a_burst_for_a_lead_that_does_not_exist_is_404(amo: AmoCrmFake) -> None:
    assert control(amo, "POST", "/_leads/31000099/burst", {"statuses": [PACKED, WON]}) == (
        404,
        {"error": "no lead 31000099"},
    )
