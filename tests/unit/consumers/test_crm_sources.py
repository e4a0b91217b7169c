"""The bitrix24 and amocrm consumers' real handlers against the local CRM stand-ins (real HTTP).

Each reads the deal or lead the webhook's event names, maps its stage through the deployment's
status map, reads the contact's phone and publishes the order-status event the `sms` consumer
reads (to a moto topic here). What cannot become one is ignored (counted) or, where a person must
fix something, dead-lettered with the reason and counted for the alarm.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest

from local.fakes.amocrm import AmoCrmFake
from local.fakes.bitrix24 import Bitrix24PortalFake
from local.overlay import LOCAL_AMOCRM_PIPELINE, LOCAL_AMOCRM_STATUSES, LOCAL_BITRIX24_STAGES
from pipeline import aws
from pipeline.crm.amocrm import AmoCrmApi
from pipeline.crm.bitrix24 import Bitrix24Rest
from pipeline.crm.event_model import CrmEvent
from tests.unit.consumer_support import Output, Published, amocrm_envelope, bitrix24_envelope
from tests.unit.consumers.conftest import DeployedConsumer, FakeHttpServer

PHONE = "+375 29 123-45-67"
E164 = "+375291234567"
WEBHOOK_CODE = "b24SecretWebhookCode42"
AMO_TOKEN = "amoLongLivedTokenThatMustNotLeak0123"


@pytest.fixture
def order_events(moto_aws: None, monkeypatch: pytest.MonkeyPatch) -> Callable[[], list[dict[str, Any]]]:
    """The events topic (moto) the consumers publish to, and a reader of what reached it."""
    sns, sqs = aws.client("sns"), aws.client("sqs")
    suffix = uuid.uuid4().hex[:8]
    topic_arn = sns.create_topic(
        Name=f"events-{suffix}.fifo", Attributes={"FifoTopic": "true", "ContentBasedDeduplication": "false"}
    )["TopicArn"]
    queue_url = sqs.create_queue(QueueName=f"published-{suffix}")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]
    sns.subscribe(TopicArn=topic_arn, Protocol="sqs", Endpoint=queue_arn["QueueArn"])
    monkeypatch.setenv("EVENTS_TOPIC_ARN", topic_arn)
    monkeypatch.setenv("PHONE_DEFAULT_REGION", "")

    def published() -> list[dict[str, Any]]:
        found = []
        while batch := sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages"):
            for message in batch:
                notification = json.loads(message["Body"])
                attributes = {k: v["Value"] for k, v in notification["MessageAttributes"].items()}
                found.append({"envelope": json.loads(notification["Message"]), "attributes": attributes})
                sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
        return found

    return published


# -- Bitrix24 -------------------------------------------------------------------------------------
@pytest.fixture
def portal(http_fake: FakeHttpServer) -> Iterator[Bitrix24PortalFake]:
    """The portal stand-in; its outgoing webhooks go to a receiver that only answers 200 (the
    tests hand the consumer the events the webhook would publish)."""
    fake = Bitrix24PortalFake(webhook_code=WEBHOOK_CODE, handler_url=f"{http_fake.base_url}/crm/bitrix24")
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture
def bitrix24(
    run_consumer: Callable[[str], DeployedConsumer],
    put_secret: Callable[[str, str], None],
    portal: Bitrix24PortalFake,
    order_events: Callable[[], list[dict[str, Any]]],
    monkeypatch: pytest.MonkeyPatch,
) -> DeployedConsumer:
    monkeypatch.setenv("BITRIX24_STAGES", json.dumps(LOCAL_BITRIX24_STAGES))
    consumer = run_consumer("bitrix24")
    put_secret("bitrix24_api", json.dumps({"url": portal.rest_url()}))
    return consumer


def deal_event(deal_id: int, event: str = "ONCRMDEALUPDATE", ts: float | None = None) -> Published:
    return bitrix24_envelope(deal_id, event, ts)


def moved_deal(portal: Bitrix24PortalFake, stage: str, phone: str | None = PHONE, category: int = 0) -> int:
    contact = portal.create_contact("Ann", phone, last_name="Smith")
    delivery = portal.create_deal(
        "Order 1042",
        stage_id="NEW" if category == 0 else f"C{category}:NEW",
        category_id=category,
        contact_id=contact,
    )
    portal.move_deal(delivery.deal_id, stage)
    return delivery.deal_id


def statuses(published: list[dict[str, Any]]) -> list[tuple[str | None, str]]:
    """(previous status, status) of each order event published, in order."""
    return [
        (
            p["envelope"]["payload"]["order"].get("previous_status"),
            p["envelope"]["payload"]["order"]["status"],
        )
        for p in published
    ]


def test_a_deal_moved_to_a_mapped_stage_publishes_each_transition_of_its_history(
    bitrix24: DeployedConsumer, portal: Bitrix24PortalFake, order_events: Callable[[], list[dict[str, Any]]]
) -> None:
    deal_id = moved_deal(portal, "EXECUTING")

    delivery = bitrix24.deliver(deal_event(deal_id))

    assert delivery.failed == []
    created, moved = order_events()
    assert statuses([created, moved]) == [(None, "new"), ("new", "ready_for_pickup")]
    event = CrmEvent.parse(moved["envelope"]["payload"])
    assert moved["attributes"] == {
        "source": "crm",
        "type": "order.status_changed",
        "status": "ready_for_pickup",
    }
    assert moved["envelope"]["source"] == "crm"
    assert (event.order.id, event.customer.phone, event.customer.name) == (str(deal_id), E164, "Ann Smith")
    # The transition is the portal's history record: its id and when it was written.
    records, _ = Bitrix24Rest(portal.rest_url()).stage_history({"OWNER_ID": deal_id, "STAGE_ID": "EXECUTING"})
    [record] = records
    assert event.order.transition_id == f"bitrix24:stagehistory:{record.id}"
    assert event.occurred_at == record.created_time
    assert moved["envelope"]["payload"]["source"] == {
        "crm": "bitrix24",
        "deal_id": deal_id,
        "category_id": "0",
        "pipeline": "0",
        "stage": "EXECUTING",
        "history_record": event.order.transition_id,
    }


def test_edits_and_resends_of_a_handled_history_publish_nothing(
    bitrix24: DeployedConsumer, portal: Bitrix24PortalFake, order_events: Callable[[], list[dict[str, Any]]]
) -> None:
    """Five edits after the move, and the move's event resent: the history has nothing new."""
    deal_id = moved_deal(portal, "EXECUTING")
    assert bitrix24.deliver(deal_event(deal_id)).failed == []
    assert len(order_events()) == 2
    for number in range(5):
        portal.edit_deal(deal_id, COMMENTS=f"call before delivery ({number})")
        assert bitrix24.deliver(deal_event(deal_id)).failed == []
    assert order_events() == []


def test_a_move_whose_webhook_left_the_queue_twenty_minutes_late_still_publishes(
    bitrix24: DeployedConsumer, portal: Bitrix24PortalFake, order_events: Callable[[], list[dict[str, Any]]]
) -> None:
    """The 15-minute edit rule took a slow portal queue (`ts` twenty minutes after the move) for
    an edit: no SMS, no dead letter, no alarm. The history says the deal moved."""
    deal_id = moved_deal(portal, "EXECUTING")
    moved = datetime.fromisoformat(portal.deal(deal_id)["MOVED_TIME"]).timestamp()

    assert bitrix24.deliver(deal_event(deal_id, ts=moved + 20 * 60)).failed == []

    assert statuses(order_events())[-1] == ("new", "ready_for_pickup")


def test_an_old_deal_edited_on_a_portal_without_moved_time_is_counted_not_texted(
    bitrix24: DeployedConsumer,
    portal: Bitrix24PortalFake,
    order_events: Callable[[], list[dict[str, Any]]],
    output: Callable[[Any], Output],
) -> None:
    """A week-old deal in "ready", the pipeline connected since, its first edit: its history is
    older than the age limit when first seen. Recorded and counted (alarmed), never texted."""
    portal.omit_moved_time = True
    week = 7 * 24 * 3600
    contact = portal.create_contact("Ann", PHONE, last_name="Smith")
    deal_id = portal.create_deal("Order 7", contact_id=contact, created_at=int(time.time()) - week).deal_id
    portal.move_deal(deal_id, "EXECUTING", at=int(time.time()) - week + 60)
    portal.edit_deal(deal_id, COMMENTS="called the customer")
    log = output(bitrix24.app.worker)

    assert bitrix24.deliver(deal_event(deal_id)).failed == []

    assert order_events() == [] and bitrix24.dead_letter_reasons() == []
    [metrics] = log.emf("CrmTransitionsTooOld")
    assert metrics["CrmTransitionsTooOld"] == [1.0]
    lines = log.logs("CRM transition first seen too late to text")
    assert [(line["status"], line["has_rule"]) for line in lines] == [
        ("new", False),
        ("ready_for_pickup", True),
    ]
    assert not [c for c in portal.calls() if "crm.contact.get" in c["path"]]


def test_a_to_b_to_a_to_b_in_one_second_publishes_four_transitions_in_order(
    bitrix24: DeployedConsumer, portal: Bitrix24PortalFake, order_events: Callable[[], list[dict[str, Any]]]
) -> None:
    """Reading the deal as it is now saw only the final stage: one SMS where README promises two."""
    deal_id = moved_deal(portal, "PREPARATION")
    portal.burst_moves(deal_id, ["EXECUTING", "PREPARATION", "EXECUTING"], collapse=True)

    assert bitrix24.deliver(deal_event(deal_id)).failed == []

    assert statuses(order_events())[2:] == [
        ("processing", "ready_for_pickup"),
        ("ready_for_pickup", "processing"),
        ("processing", "ready_for_pickup"),
    ]


def test_two_stages_of_one_status_are_one_transition(
    bitrix24: DeployedConsumer, portal: Bitrix24PortalFake, order_events: Callable[[], list[dict[str, Any]]]
) -> None:
    deal_id = moved_deal(portal, "LOSE")
    portal.move_deal(deal_id, "APOLOGY")
    portal.move_deal(deal_id, "LOSE")

    assert bitrix24.deliver(deal_event(deal_id)).failed == []

    assert statuses(order_events()) == [(None, "new"), ("new", "cancelled")]


def test_a_stage_missing_from_the_map_is_dead_lettered_naming_it_and_counted(
    bitrix24: DeployedConsumer,
    portal: Bitrix24PortalFake,
    order_events: Callable[[], list[dict[str, Any]]],
    output: Callable[[Any], Output],
) -> None:
    deal_id = moved_deal(portal, "UC_ASSEMBLY")
    log = output(bitrix24.app.worker)

    assert bitrix24.deliver(deal_event(deal_id)).failed == []

    assert order_events() == []
    [reason] = bitrix24.dead_letter_reasons()
    assert f"bitrix24 deal {deal_id}: stage 'UC_ASSEMBLY' of pipeline '0' is not in bitrix24_stages" in reason
    assert log.emf("CrmSourceMisconfigured")


def test_a_deal_of_a_category_not_connected_publishes_nothing(
    bitrix24: DeployedConsumer,
    portal: Bitrix24PortalFake,
    order_events: Callable[[], list[dict[str, Any]]],
    output: Callable[[Any], Output],
) -> None:
    deal_id = moved_deal(portal, "C3:WON", category=3)
    log = output(bitrix24.app.worker)

    assert bitrix24.deliver(deal_event(deal_id)).failed == []

    assert order_events() == [] and bitrix24.dead_letter_reasons() == []
    [metrics] = log.emf("CrmHistoryNotTransitions")
    assert metrics["CrmHistoryNotTransitions"] == [2.0]  # the deal's two records, both of category 3


@pytest.mark.parametrize(("stage", "dead_lettered"), [("EXECUTING", True), ("PREPARATION", False)])
def test_a_contact_without_a_phone_is_misconfiguration_only_where_an_sms_rule_applies(
    bitrix24: DeployedConsumer,
    portal: Bitrix24PortalFake,
    order_events: Callable[[], list[dict[str, Any]]],
    stage: str,
    dead_lettered: bool,
) -> None:
    deal_id = moved_deal(portal, stage, phone=None)

    assert bitrix24.deliver(deal_event(deal_id)).failed == []

    assert order_events() == []
    reasons = bitrix24.dead_letter_reasons()
    if dead_lettered:
        [reason] = reasons
        assert "has no phone, and status 'ready_for_pickup' has an SMS rule" in reason
    else:
        assert reasons == []


def test_a_revoked_inbound_webhook_pauses_the_event_without_its_code(
    bitrix24: DeployedConsumer, portal: Bitrix24PortalFake, output: Callable[[Any], Output]
) -> None:
    """Every event would be refused alike: paused, not dead-lettered (tests/unit/consumers/
    test_account_refusals.py follows a pause to its end)."""
    deal_id = moved_deal(portal, "EXECUTING")
    portal.revoke_webhook()
    log = output(bitrix24.app.worker)

    assert bitrix24.deliver(deal_event(deal_id)).failed == []

    assert bitrix24.dead_letter_reasons() == []
    [paused] = log.logs("record paused: the remote refused the account")
    assert "INVALID_CREDENTIALS" in paused["reason"] and paused["cause"] == "unauthorized"
    assert WEBHOOK_CODE not in json.dumps(log.read())
    assert log.emf("AccountPaused")


def test_the_portal_down_retries_the_event_and_it_publishes_once_it_is_back(
    bitrix24: DeployedConsumer, portal: Bitrix24PortalFake, order_events: Callable[[], list[dict[str, Any]]]
) -> None:
    deal_id = moved_deal(portal, "EXECUTING")
    portal.add_faults({"fail_next": 1, "status": 500, "match": "crm.deal.get"})

    first = bitrix24.deliver(deal_event(deal_id))

    assert len(first.failed) == 1, "a transient failure is retried, not dead-lettered"
    assert order_events() == [] and bitrix24.dead_letter_reasons() == []
    bitrix24.queues.sqs.change_message_visibility(
        QueueUrl=bitrix24.queues.queue_url,
        ReceiptHandle=first.event["Records"][0]["receiptHandle"],
        VisibilityTimeout=0,
    )
    event = bitrix24.queues.receive_event()
    response = bitrix24.app.lambda_handler(event, bitrix24.context)
    bitrix24.queues.acknowledge(event, response)
    assert response["batchItemFailures"] == []
    assert [p["attributes"]["status"] for p in order_events()] == ["new", "ready_for_pickup"]


def test_a_deal_deleted_since_its_event_is_ignored(
    bitrix24: DeployedConsumer, order_events: Callable[[], list[dict[str, Any]]]
) -> None:
    assert bitrix24.deliver(deal_event(987654)).failed == []

    assert order_events() == [] and bitrix24.dead_letter_reasons() == []


# -- amoCRM ---------------------------------------------------------------------------------------
@pytest.fixture
def account(http_fake: FakeHttpServer) -> Iterator[AmoCrmFake]:
    fake = AmoCrmFake(token=AMO_TOKEN, handler_url=f"{http_fake.base_url}/crm/amocrm/token")
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture
def amocrm(
    run_consumer: Callable[[str], DeployedConsumer],
    put_secret: Callable[[str, str], None],
    account: AmoCrmFake,
    order_events: Callable[[], list[dict[str, Any]]],
    monkeypatch: pytest.MonkeyPatch,
) -> DeployedConsumer:
    monkeypatch.setenv("AMOCRM_STATUSES", json.dumps(LOCAL_AMOCRM_STATUSES))
    consumer = run_consumer("amocrm")
    put_secret("amocrm_api", json.dumps({"base_url": account.base_url, "token": AMO_TOKEN}))
    return consumer


def lead_event(lead_id: int, status_id: int, old_status_id: int) -> Published:
    return amocrm_envelope(lead_id, status_id, old_status_id, LOCAL_AMOCRM_PIPELINE)


def lead_in(account: AmoCrmFake, status_id: int, phone: str | None = PHONE) -> int:
    contact = account.create_contact("Ann", phone)
    return account.create_lead("Order 1042", LOCAL_AMOCRM_PIPELINE, status_id, contact_id=contact)


def test_a_lead_status_change_publishes_the_order_status_with_the_previous_one(
    amocrm: DeployedConsumer, account: AmoCrmFake, order_events: Callable[[], list[dict[str, Any]]]
) -> None:
    lead_id = lead_in(account, 70012)
    account.change_statuses([(lead_id, 70013)])

    assert amocrm.deliver(lead_event(lead_id, 70013, 70012)).failed == []

    [published] = order_events()
    event = CrmEvent.parse(published["envelope"]["payload"])
    assert (event.order.id, event.order.status, event.order.previous_status) == (
        str(lead_id),
        "ready_for_pickup",
        "processing",
    )
    assert (event.customer.phone, event.customer.name) == (E164, "Ann")
    assert published["attributes"]["status"] == "ready_for_pickup"


def test_a_late_webhook_publishes_every_transition_since_in_order(
    amocrm: DeployedConsumer, account: AmoCrmFake, order_events: Callable[[], list[dict[str, Any]]]
) -> None:
    """The webhook for ready_for_pickup is read after the lead was shipped: both moves are in the
    account's events, and both are published, in the order they happened."""
    lead_id = lead_in(account, 70012)
    account.change_statuses([(lead_id, 70013)])
    account.change_statuses([(lead_id, 70014)])

    assert amocrm.deliver(lead_event(lead_id, 70013, 70012)).failed == []

    assert statuses(order_events()) == [("processing", "ready_for_pickup"), ("ready_for_pickup", "shipped")]


def test_an_amocrm_burst_collapsed_into_one_webhook_is_every_transition(
    amocrm: DeployedConsumer, account: AmoCrmFake, order_events: Callable[[], list[dict[str, Any]]]
) -> None:
    lead_id = lead_in(account, 70012)
    account.burst_statuses(lead_id, [70013, 70012, 70013], collapse=True)

    assert amocrm.deliver(lead_event(lead_id, 70013, 70012)).failed == []

    assert statuses(order_events()) == [
        ("processing", "ready_for_pickup"),
        ("ready_for_pickup", "processing"),
        ("processing", "ready_for_pickup"),
    ]


def test_a_revoked_amocrm_token_pauses_the_event_without_the_token(
    amocrm: DeployedConsumer, account: AmoCrmFake, output: Callable[[Any], Output]
) -> None:
    lead_id = lead_in(account, 70013)
    account.revoke_token()
    log = output(amocrm.app.worker)

    assert amocrm.deliver(lead_event(lead_id, 70013, 70012)).failed == []

    assert amocrm.dead_letter_reasons() == []
    [paused] = log.logs("record paused: the remote refused the account")
    assert "HTTP 401" in paused["reason"] and paused["cause"] == "unauthorized"
    assert AMO_TOKEN not in json.dumps(log.read())
    assert log.emf("AccountPaused")


def test_an_amocrm_status_missing_from_the_map_is_dead_lettered_naming_it(
    amocrm: DeployedConsumer, account: AmoCrmFake
) -> None:
    lead_id = lead_in(account, 70012)
    account.change_statuses([(lead_id, 79999)])

    assert amocrm.deliver(lead_event(lead_id, 79999, 70012)).failed == []

    [reason] = amocrm.dead_letter_reasons()
    assert (
        f"amocrm lead {lead_id}: stage '79999' of pipeline '{LOCAL_AMOCRM_PIPELINE}'"
        " is not in amocrm_statuses" in reason
    )


def test_an_amocrm_order_event_occurred_when_its_status_event_was_written(
    amocrm: DeployedConsumer, account: AmoCrmFake, order_events: Callable[[], list[dict[str, Any]]]
) -> None:
    """The webhook carries no reliable time of the change: the event's own `created_at` and id
    name the transition (the sms consumer's order history)."""
    lead_id = lead_in(account, 70012)
    account.change_statuses([(lead_id, 70013)])

    assert amocrm.deliver(lead_event(lead_id, 70013, 70012)).failed == []

    [published] = order_events()
    [event], _ = AmoCrmApi(account.base_url, AMO_TOKEN).status_events({"filter[entity_id][]": lead_id})
    payload = published["envelope"]["payload"]
    assert datetime.fromisoformat(payload["occurred_at"]) == event.created_at
    assert payload["order"]["transition_id"] == f"amocrm:event:{event.id}"


# -- orders hidden from the integration's user ------------------------------------------------------
# Both CRMs apply the API user's rights silently in their list methods (the stage history, the
# events come back empty) and refuse the order itself ("Access denied", 403); the stand-ins hide an
# order the same way (`local.fakes.crm_access`).
HIDDEN = "CRM order hidden from the integration's user"


def _hidden_line(log: Output) -> dict[str, Any]:
    [line] = log.logs(HIDDEN)
    [metrics] = log.emf("CrmOrdersHidden")
    assert metrics["CrmOrdersHidden"] == [1.0]
    assert not log.emf("CrmEventsIgnored")
    return line


@pytest.mark.parametrize("hide", ["category", "deal"])
def test_a_deal_the_webhook_user_may_not_read_is_counted_and_names_the_deal_and_the_right(
    bitrix24: DeployedConsumer,
    portal: Bitrix24PortalFake,
    order_events: Callable[[], list[dict[str, Any]]],
    output: Callable[[Any], Output],
    hide: str,
) -> None:
    deal_id = moved_deal(portal, "C2:EXECUTING", category=2)
    portal.access.hide(**({"pipelines": [2]} if hide == "category" else {"orders": [deal_id]}))
    log = output(bitrix24.app.worker)

    assert bitrix24.deliver(deal_event(deal_id)).failed == []

    assert order_events() == [] and bitrix24.dead_letter_reasons() == []
    line = _hidden_line(log)
    assert line["deal_id"] == deal_id
    assert f"may not read deal {deal_id}" in line["missing_right"] and "Read" in line["missing_right"]
    assert "Access denied" in line["crm_answer"]


def test_a_hidden_deal_granted_again_publishes_its_whole_history_at_its_next_event(
    bitrix24: DeployedConsumer, portal: Bitrix24PortalFake, order_events: Callable[[], list[dict[str, Any]]]
) -> None:
    """Nothing was marked handled while it was hidden: the next look reads it whole."""
    deal_id = moved_deal(portal, "EXECUTING")
    portal.access.hide(orders=[deal_id])
    assert bitrix24.deliver(deal_event(deal_id)).failed == []
    portal.access.show_all()

    assert bitrix24.deliver(deal_event(deal_id)).failed == []

    assert statuses(order_events()) == [(None, "new"), ("new", "ready_for_pickup")]


def test_a_deal_with_no_history_yet_and_a_deleted_one_are_ignored_not_hidden(
    bitrix24: DeployedConsumer,
    portal: Bitrix24PortalFake,
    order_events: Callable[[], list[dict[str, Any]]],
    output: Callable[[Any], Output],
) -> None:
    """A genuinely empty history (a deal the portal keeps no record of) is not an access problem."""
    deal_id = moved_deal(portal, "EXECUTING")
    portal.stage_history._records.clear()  # a deal older than the portal's stage history
    log = output(bitrix24.app.worker)

    assert bitrix24.deliver(deal_event(deal_id), deal_event(987654)).failed == []

    assert order_events() == [] and bitrix24.dead_letter_reasons() == []
    assert not log.logs(HIDDEN) and not log.emf("CrmOrdersHidden")
    reasons = sorted(line["reason"] for line in log.logs("CRM event ignored"))
    expected = [f"bitrix24 deal {deal_id} has no stage history", "bitrix24 deal 987654 not found"]
    assert reasons == sorted(expected)


def test_a_lead_the_token_user_may_not_see_is_counted_and_names_the_lead_and_the_right(
    amocrm: DeployedConsumer,
    account: AmoCrmFake,
    order_events: Callable[[], list[dict[str, Any]]],
    output: Callable[[Any], Output],
) -> None:
    lead_id = lead_in(account, 70012)
    account.change_statuses([(lead_id, 70013)])
    account.access.hide(pipelines=[LOCAL_AMOCRM_PIPELINE])
    log = output(amocrm.app.worker)

    assert amocrm.deliver(lead_event(lead_id, 70013, 70012)).failed == []

    assert order_events() == [] and amocrm.dead_letter_reasons() == []
    line = _hidden_line(log)
    assert line["lead_id"] == lead_id
    assert f"may not see lead {lead_id}" in line["missing_right"] and "View" in line["missing_right"]
    assert "HTTP 403" in line["crm_answer"]
    # Shown again: the lead's next event publishes what it missed.
    account.access.show_all()
    assert amocrm.deliver(lead_event(lead_id, 70013, 70012)).failed == []
    assert statuses(order_events()) == [("processing", "ready_for_pickup")]


def test_a_lead_deleted_since_is_ignored_not_hidden(
    amocrm: DeployedConsumer,
    order_events: Callable[[], list[dict[str, Any]]],
    output: Callable[[Any], Output],
) -> None:
    log = output(amocrm.app.worker)

    assert amocrm.deliver(lead_event(99999999, 70013, 70012)).failed == []

    assert order_events() == [] and not log.logs(HIDDEN)
    assert [line["reason"] for line in log.logs("CRM event ignored")] == ["amocrm lead 99999999 not found"]
