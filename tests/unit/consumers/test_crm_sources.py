"""The bitrix24 and amocrm consumers' real handlers against the local CRM stand-ins (real HTTP).

Each reads the deal or lead the webhook's event names, maps its stage through the deployment's
status map, reads the contact's phone and publishes the order-status event the `sms` consumer
reads (to a moto topic here). What cannot become one is ignored (counted) or, where a person must
fix something, dead-lettered with the reason and counted for the alarm.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from local.fakes.amocrm import AmoCrmFake
from local.fakes.bitrix24 import Bitrix24PortalFake
from local.overlay import LOCAL_AMOCRM_PIPELINE, LOCAL_AMOCRM_STATUSES, LOCAL_BITRIX24_STAGES
from pipeline import aws
from pipeline.crm import CrmEvent
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


def test_a_deal_moved_to_a_mapped_stage_publishes_its_order_status(
    bitrix24: DeployedConsumer, portal: Bitrix24PortalFake, order_events: Callable[[], list[dict[str, Any]]]
) -> None:
    deal_id = moved_deal(portal, "EXECUTING")

    delivery = bitrix24.deliver(deal_event(deal_id))

    assert delivery.failed == []
    [published] = order_events()
    deal = portal.deal(deal_id)
    event = CrmEvent.model_validate(published["envelope"]["payload"])
    assert published["attributes"] == {
        "source": "crm",
        "type": "order.status_changed",
        "status": "ready_for_pickup",
    }
    assert published["envelope"]["source"] == "crm"
    assert (event.order.id, event.order.status, event.customer.phone, event.customer.name) == (
        str(deal_id),
        "ready_for_pickup",
        E164,
        "Ann Smith",
    )
    moved = datetime.fromisoformat(deal["MOVED_TIME"])
    assert event.occurred_at == moved
    assert event.order.transition_id == f"EXECUTING@{moved.isoformat()}"
    assert published["envelope"]["payload"]["source"] == {
        "crm": "bitrix24",
        "deal_id": deal_id,
        "category_id": "0",
        "stage_id": "EXECUTING",
    }


def test_the_same_deal_state_read_twice_publishes_the_same_event_id(
    bitrix24: DeployedConsumer, portal: Bitrix24PortalFake, order_events: Callable[[], list[dict[str, Any]]]
) -> None:
    """An edit soon after the move, and the move's event resent: the state is the same, so is the
    event id (the sms consumer's idempotency, and its order history, make them one)."""
    deal_id = moved_deal(portal, "EXECUTING")
    portal.edit_deal(deal_id, COMMENTS="call before delivery")

    assert bitrix24.deliver(deal_event(deal_id), deal_event(deal_id)).failed == []

    ids = {p["envelope"]["event_id"] for p in order_events()}
    assert len(ids) == 1


def test_an_edit_long_after_the_last_move_is_ignored_before_the_contact_is_read(
    bitrix24: DeployedConsumer,
    portal: Bitrix24PortalFake,
    order_events: Callable[[], list[dict[str, Any]]],
    output: Callable[[Any], Output],
) -> None:
    """The first edit of an old deal after the pipeline is connected must not text its customer."""
    deal_id = moved_deal(portal, "EXECUTING")
    log = output(bitrix24.app.worker)
    moved = datetime.fromisoformat(portal.deal(deal_id)["MOVED_TIME"]).timestamp()

    assert bitrix24.deliver(deal_event(deal_id, ts=moved + 16 * 60)).failed == []

    assert order_events() == []
    assert log.emf("CrmEventsIgnored")
    [line] = log.logs("CRM event ignored")
    assert line["reason"] == "an edit that did not move the stage"
    assert not [c for c in portal.calls() if "crm.contact.get" in c["path"]]


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


def test_a_deal_of_a_category_not_connected_is_ignored(
    bitrix24: DeployedConsumer,
    portal: Bitrix24PortalFake,
    order_events: Callable[[], list[dict[str, Any]]],
    output: Callable[[Any], Output],
) -> None:
    deal_id = moved_deal(portal, "C3:WON", category=3)
    log = output(bitrix24.app.worker)

    assert bitrix24.deliver(deal_event(deal_id)).failed == []

    assert order_events() == [] and bitrix24.dead_letter_reasons() == []
    [line] = log.logs("CRM event ignored")
    assert line["reason"] == "category '3' is not connected (bitrix24_stages)"


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


def test_a_revoked_inbound_webhook_is_dead_lettered_as_unauthorized_without_its_code(
    bitrix24: DeployedConsumer, portal: Bitrix24PortalFake, output: Callable[[Any], Output]
) -> None:
    deal_id = moved_deal(portal, "EXECUTING")
    portal.revoke_webhook()
    log = output(bitrix24.app.worker)

    assert bitrix24.deliver(deal_event(deal_id)).failed == []

    [reason] = bitrix24.dead_letter_reasons()
    assert "INVALID_CREDENTIALS" in reason and "revoked?" in reason
    assert WEBHOOK_CODE not in reason
    assert WEBHOOK_CODE not in json.dumps(log.read())
    assert log.emf("CrmSourceMisconfigured")


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
    assert [p["attributes"]["status"] for p in order_events()] == ["ready_for_pickup"]


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
    event = CrmEvent.model_validate(published["envelope"]["payload"])
    assert (event.order.id, event.order.status, event.order.previous_status) == (
        str(lead_id),
        "ready_for_pickup",
        "processing",
    )
    assert (event.customer.phone, event.customer.name) == (E164, "Ann")
    assert published["attributes"]["status"] == "ready_for_pickup"


def test_a_late_webhook_publishes_where_the_lead_is_now(
    amocrm: DeployedConsumer, account: AmoCrmFake, order_events: Callable[[], list[dict[str, Any]]]
) -> None:
    """The webhook for ready_for_pickup is read after the lead was shipped: what is published is
    the lead's status now, without the webhook's old status."""
    lead_id = lead_in(account, 70012)
    account.change_statuses([(lead_id, 70013)])
    account.change_statuses([(lead_id, 70014)])

    assert amocrm.deliver(lead_event(lead_id, 70013, 70012)).failed == []

    [published] = order_events()
    order = published["envelope"]["payload"]["order"]
    assert (order["status"], order.get("previous_status")) == ("shipped", None)


def test_a_revoked_amocrm_token_is_dead_lettered_as_unauthorized_without_the_token(
    amocrm: DeployedConsumer, account: AmoCrmFake, output: Callable[[Any], Output]
) -> None:
    lead_id = lead_in(account, 70013)
    account.revoke_token()
    log = output(amocrm.app.worker)

    assert amocrm.deliver(lead_event(lead_id, 70013, 70012)).failed == []

    [reason] = amocrm.dead_letter_reasons()
    assert "HTTP 401" in reason and "revoked or expired" in reason
    assert AMO_TOKEN not in reason and AMO_TOKEN not in json.dumps(log.read())
    assert log.emf("CrmSourceMisconfigured")


def test_an_amocrm_status_missing_from_the_map_is_dead_lettered_naming_it(
    amocrm: DeployedConsumer, account: AmoCrmFake
) -> None:
    lead_id = lead_in(account, 79999)

    assert amocrm.deliver(lead_event(lead_id, 79999, 70012)).failed == []

    [reason] = amocrm.dead_letter_reasons()
    assert (
        f"amocrm lead {lead_id}: stage '79999' of pipeline '{LOCAL_AMOCRM_PIPELINE}'"
        " is not in amocrm_statuses" in reason
    )


def test_an_amocrm_order_event_occurred_when_the_lead_was_last_updated(
    amocrm: DeployedConsumer, account: AmoCrmFake, order_events: Callable[[], list[dict[str, Any]]]
) -> None:
    """The webhook carries no reliable time of the change: the lead's `updated_at`, read with its
    status, orders its events (the sms consumer's stale check)."""
    lead_id = lead_in(account, 70012)
    account.change_statuses([(lead_id, 70013)])

    assert amocrm.deliver(lead_event(lead_id, 70013, 70012)).failed == []

    [published] = order_events()
    occurred = datetime.fromisoformat(published["envelope"]["payload"]["occurred_at"])
    assert occurred == datetime.fromtimestamp(account.lead(lead_id)["updated_at"], UTC)
