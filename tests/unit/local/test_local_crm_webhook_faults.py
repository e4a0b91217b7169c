"""The CRM stand-ins' webhook faults: a change happens, its webhook is lost, or held and posted later.

What reaches the pipeline is observed at a small loopback receiver (`crm_portal_support.Receiver`).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from local.fakes.amocrm import AmoCrmFake
from local.fakes.bitrix24 import Bitrix24PortalFake
from tests.unit.local.crm_portal_support import Receiver, control, running


def test_a_lost_webhook_is_never_posted_but_the_move_is_made(
    portal: Bitrix24PortalFake, receiver: Receiver
) -> None:
    deal_id = portal.create_deal("Order A-1042").deal_id
    assert control(portal, "POST", "/_webhook_faults", {"lose_next_webhooks": 1})[0] == 200

    status, moved = control(portal, "POST", f"/_deals/{deal_id}/move", {"stage_id": "EXECUTING"})

    assert status == 200 and moved["deal"]["STAGE_ID"] == "EXECUTING"
    lost = moved["delivery"]
    assert (lost["fate"], lost["status"], lost["body"]) == ("lost", None, None)
    assert "never posted" in lost["error"]
    assert [post.form()["event"] for post in receiver.posts] == ["ONCRMDEALADD"]
    state = control(portal, "GET", "/_webhook_faults")[1]
    assert state["pending"] == [] and [item["payload"] for item in state["lost"]] == [lost["payload"]]

    after = portal.move_deal(deal_id, "WON")  # the fault was for one webhook only
    assert (after.fate, after.status) == ("posted", 200)
    assert [post.form()["event"] for post in receiver.posts] == ["ONCRMDEALADD", "ONCRMDEALUPDATE"]


def test_a_resent_webhook_counts_as_one_the_fault_may_take(amo: AmoCrmFake, receiver: Receiver) -> None:
    lead_id = amo.create_lead("Order A-1042", pipeline_id=7001, status_id=70011)
    amo.change_statuses([(lead_id, 70012)])
    control(amo, "POST", "/_webhook_faults", {"lose_next_webhooks": 1})

    status, resent = control(amo, "POST", "/_resend")

    assert status == 200 and resent["delivery"]["fate"] == "lost"
    assert len(receiver.posts) == 1


def test_a_delayed_webhook_is_posted_seconds_later_and_its_answer_kept(
    amo: AmoCrmFake, receiver: Receiver
) -> None:
    lead_id = amo.create_lead("Order A-1042", pipeline_id=7001, status_id=70011)
    control(amo, "POST", "/_webhook_faults", {"delay_next_webhooks": 1, "seconds": 0.4})
    # The pipeline's answer comes a moment after the post, as on a loaded machine (CI's stop 57
    # read the stand-in's state between the two).
    receiver.on_post = lambda post: time.sleep(0.3)
    started = time.monotonic()

    held = amo.change_statuses([(lead_id, 70013)])

    assert (held.fate, held.status, held.held_id) == ("held", None, 1)
    assert amo.lead(lead_id)["status_id"] == 70013  # the move is made at once
    assert receiver.posts == []
    [post] = receiver.wait_for(1)
    assert time.monotonic() - started >= 0.4
    assert post.body.decode() == held.payload
    assert post.form()["leads[status][0][status_id]"] == "70013"
    # The receiver has the post before the stand-in has its answer (it answers after recording
    # it): the answer is kept once the post returns, a moment later on a loaded machine.
    deadline = time.monotonic() + 30
    while (
        not (state := control(amo, "GET", "/_webhook_faults")[1])["released"] and time.monotonic() < deadline
    ):
        time.sleep(0.02)
    assert state["held"] == []
    [released] = state["released"]
    assert (released["fate"], released["held_id"], released["status"], released["body"]) == (
        "released",
        1,
        200,
        {"ok": True},
    )
    assert released["lead_ids"] == [lead_id]


def test_flush_posts_the_held_webhooks_now_in_the_order_they_were_held(
    portal: Bitrix24PortalFake, receiver: Receiver
) -> None:
    first = portal.create_deal("Order A-1042").deal_id
    second = portal.create_deal("Order A-1043").deal_id
    control(portal, "POST", "/_webhook_faults", {"delay_next_webhooks": 2, "seconds": 600})
    held = [portal.move_deal(first, "EXECUTING"), portal.move_deal(second, "WON")]
    posted = len(receiver.posts)

    state = control(portal, "GET", "/_webhook_faults")[1]
    assert [item["held_id"] for item in state["held"]] == [1, 2]
    assert all(500 < item["due_in"] <= 600 for item in state["held"])

    status, flushed = control(portal, "POST", "/_webhook_faults/flush")

    assert status == 200
    assert [(item["held_id"], item["deal_id"], item["status"]) for item in flushed["released"]] == [
        (1, first, 200),
        (2, second, 200),
    ]
    assert [post.body.decode() for post in receiver.posts[posted:]] == [item.payload for item in held]
    assert control(portal, "GET", "/_webhook_faults")[1]["held"] == []
    assert control(portal, "POST", "/_webhook_faults/flush") == (200, {"released": []})


def test_faults_apply_in_the_order_given_and_delete_forgets_the_pending_ones(
    portal: Bitrix24PortalFake, receiver: Receiver
) -> None:
    deal_id = portal.create_deal("Order A-1042").deal_id
    faults = {"lose_next_webhooks": 1, "delay_next_webhooks": 2, "seconds": 600}
    status, state = control(portal, "POST", "/_webhook_faults", faults)
    assert status == 200
    assert [(fault["kind"], fault["remaining"]) for fault in state["pending"]] == [("lose", 1), ("delay", 2)]

    assert portal.move_deal(deal_id, "PREPARATION").fate == "lost"
    assert portal.move_deal(deal_id, "EXECUTING").fate == "held"
    assert control(portal, "GET", "/_webhook_faults")[1]["pending"] == [
        {"kind": "delay", "remaining": 1, "seconds": 600.0}
    ]

    status, cleared = control(portal, "DELETE", "/_webhook_faults")

    assert status == 200 and cleared["pending"] == []
    assert [item["held_id"] for item in cleared["held"]] == [1]  # what is held stays held
    assert portal.move_deal(deal_id, "WON").fate == "posted"
    assert [post.form()["event"] for post in receiver.posts] == ["ONCRMDEALADD", "ONCRMDEALUPDATE"]


def test_webhooks_held_when_the_stand_in_stops_are_never_posted(receiver: Receiver) -> None:
    with running(AmoCrmFake(handler_url=receiver.url)) as fake:
        lead_id = fake.create_lead("Order A-1042", pipeline_id=7001, status_id=70011)
        fake.webhook_faults.add({"delay_next_webhooks": 1, "seconds": 0.2})
        assert fake.change_statuses([(lead_id, 142)]).fate == "held"
    time.sleep(0.4)
    assert receiver.posts == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "expected a JSON object"),
        ({"lose_next_webhooks": 0}, "lose_next_webhooks must be an integer >= 1"),
        ({"delay_next_webhooks": 1.5}, "delay_next_webhooks must be an integer >= 1"),
        ({"seconds": 5}, "seconds goes with delay_next_webhooks"),
        ({"delay_next_webhooks": 1, "seconds": 0}, "seconds must be a number > 0"),
        ({"delay_next_webhooks": 1, "seconds": 7200}, "seconds must be a number > 0 and <= 3600"),
        ({"lose_next": 1}, "unknown keys ['lose_next']"),
    ],
)
def test_a_webhook_fault_it_cannot_follow_is_a_400_saying_why(
    portal: Bitrix24PortalFake, body: dict[str, Any], message: str
) -> None:
    status, answer = control(portal, "POST", "/_webhook_faults", body)

    assert status == 400 and message in answer["error"]
    assert control(portal, "GET", "/_webhook_faults")[1]["pending"] == []
