"""A phone corrected in the CRM after its SMS was refused as invalid gets the SMS, exactly once.

The whole way, as deployed: the CRM stand-in (Bitrix24, amoCRM) holds the deal and its contact,
its consumer reads the history and publishes the order events, the `sms` consumer sends them
through the gateway stand-in, which refuses the first number for good (an invalid number) and
dead-letters the message. A manager fixes the phone in the CRM; the order's next event (a re-save,
a move) and the operator's redrive of the sms DLQ must text the corrected number once, and the
refused number never again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from local.fakes.amocrm import AmoCrmFake
from local.fakes.bitrix24 import Bitrix24PortalFake
from pipeline.envelope import Envelope
from pipeline.sms.gateways import FakeBehaviour
from tests.unit.consumer_support import Output, Published
from tests.unit.consumers import test_crm_sources as crm
from tests.unit.consumers.conftest import DeployedConsumer
from tests.unit.sms import conftest as sms_support
from tests.unit.sms.conftest import SmsHarness

# The fixtures of the two consumers, side by side in one test.
order_events = crm.order_events
portal = crm.portal
bitrix24 = crm.bitrix24
account = crm.account
amocrm = crm.amocrm
sms = sms_support.sms
sms_reset = sms_support.sms_reset

REFUSED = "+375 29 123-45-67"  # as the manager first typed it: the gateway refuses it as invalid
REFUSED_E164 = "+375291234567"
FIXED = "+375 29 765-43-21"
FIXED_E164 = "+375297654321"


def to_sms(sms: SmsHarness, order_events: Callable[[], list[dict[str, Any]]]) -> int:
    """What the CRM consumer published, through SNS to the sms queue, each delivered once."""
    published = order_events()
    for item in published:
        sms.queues.send(Published(Envelope.parse(item["envelope"]), item["attributes"]))
        sms.deliver()
    return len(published)


def published(item: dict[str, Any]) -> Published:
    """What reached the events topic, as its SNS subscription delivers it to a consumer's queue."""
    return Published(Envelope.parse(item["envelope"]), item["attributes"])


def texts(sms: SmsHarness) -> list[tuple[str, str]]:
    return [(message.phone, message.body) for _, message in sms.fake.delivered]


@pytest.mark.parametrize("next_event", ["re-save", "another stage of the status"])
def test_a_bitrix24_phone_fixed_after_an_invalid_number_texts_the_fixed_number_once(
    bitrix24: DeployedConsumer,
    portal: Bitrix24PortalFake,
    order_events: Callable[[], list[dict[str, Any]]],
    sms: SmsHarness,
    output: Callable[[Any], Output],
    next_event: str,
) -> None:
    contact = portal.create_contact("Ann", REFUSED, last_name="Smith")
    deal_id = portal.create_deal("Order 1042", contact_id=contact).deal_id
    portal.move_deal(deal_id, "EXECUTING")  # ready_for_pickup: an SMS rule
    sms.fake.then(FakeBehaviour.REFUSE_PERMANENTLY)
    assert bitrix24.deliver(crm.deal_event(deal_id)).failed == []
    assert to_sms(sms, order_events) == 2  # new (no rule) and ready_for_pickup, refused
    assert texts(sms) == [] and len(sms.queues.dead_letters()) == 1
    log = output(bitrix24.app.worker)

    portal.set_contact_phone(contact, FIXED)
    if next_event == "re-save":
        portal.edit_deal(deal_id, TITLE="Order 1042 (phone fixed)")
    else:
        portal.move_deal(deal_id, "UC_PICKUP")  # ready_for_pickup too: no new move
    assert bitrix24.deliver(crm.deal_event(deal_id)).failed == []
    assert to_sms(sms, order_events) == 1  # the entry again, with the fixed phone
    assert sms.queues.redrive() == 1  # `ops dlq redrive sms`: the refused copy
    sms.deliver()
    # Later events of the deal change nothing: the phone published is the phone it has.
    assert bitrix24.deliver(crm.deal_event(deal_id)).failed == []
    assert to_sms(sms, order_events) == 0

    [(phone, body)] = texts(sms)
    assert phone == FIXED_E164 and f"order {deal_id} is ready for pickup" in body
    assert [message.phone for message in sms.fake.calls] == [REFUSED_E164, FIXED_E164]
    assert sms.queues.dead_letters() == [] and bitrix24.dead_letter_reasons() == []
    [record] = [item for item in sms.journal_records() if item["order_status"] == "ready_for_pickup"]
    assert record["state"] == "accepted"
    assert [attempt["to"] for attempt in record["attempts"]] == ["+37529*****67", "+37529*****21"]
    [metrics] = log.emf("CrmPhoneRechecked")
    assert metrics["CrmPhoneRechecked"] == [1.0]
    lines = "\n".join(str(line) for line in log.read())
    assert REFUSED_E164 not in lines and FIXED_E164 not in lines and "765-43-21" not in lines


def test_an_amocrm_phone_fixed_after_an_invalid_number_texts_the_next_move_to_it_once(
    amocrm: DeployedConsumer,
    account: AmoCrmFake,
    order_events: Callable[[], list[dict[str, Any]]],
    sms: SmsHarness,
) -> None:
    """amoCRM sends no webhook for a contact's edit: the lead's next move reads the fixed phone.
    The refused entry is over by then (its SMS would be news of the past): it stays for a person,
    never sent to either number; the new one goes to the fixed number, once."""
    contact = account.create_contact("Ann", REFUSED)
    lead_id = account.create_lead("Order 1042", crm.LOCAL_AMOCRM_PIPELINE, 70012, contact_id=contact)
    account.change_statuses([(lead_id, 70013)])
    sms.fake.then(FakeBehaviour.REFUSE_PERMANENTLY)
    assert amocrm.deliver(crm.lead_event(lead_id, 70013, 70012)).failed == []
    assert to_sms(sms, order_events) == 1 and len(sms.queues.dead_letters()) == 1

    account.set_contact_phone(contact, FIXED)
    account.change_statuses([(lead_id, 70014)])  # shipped: an SMS rule
    assert amocrm.deliver(crm.lead_event(lead_id, 70014, 70013)).failed == []
    assert to_sms(sms, order_events) == 1

    [(phone, body)] = texts(sms)
    assert phone == FIXED_E164 and "has been shipped" in body
    assert [message.phone for message in sms.fake.calls] == [REFUSED_E164, FIXED_E164]


def test_a_bitrix24_phone_fixed_then_the_sms_dlq_redriven_alone_texts_the_fixed_number_once(
    bitrix24: DeployedConsumer,
    portal: Bitrix24PortalFake,
    order_events: Callable[[], list[dict[str, Any]]],
    sms: SmsHarness,
    output: Callable[[Any], Output],
) -> None:
    """No new event of the deal: the manager fixes the phone (Bitrix24 sends no deal webhook for a
    contact's edit) and the operator runs `ops dlq redrive sms`. The redriven copy carries the
    refused number: the sms consumer asks the bitrix24 consumer to look at the deal again, which
    reads the fixed phone and publishes the entry again; that one is texted, once."""
    contact = portal.create_contact("Ann", REFUSED, last_name="Smith")
    deal_id = portal.create_deal("Order 1042", contact_id=contact).deal_id
    portal.move_deal(deal_id, "EXECUTING")
    sms.fake.then(FakeBehaviour.REFUSE_PERMANENTLY)
    assert bitrix24.deliver(crm.deal_event(deal_id)).failed == []
    assert to_sms(sms, order_events) == 2 and len(sms.queues.dead_letters()) == 1
    log = output(sms.worker)

    portal.set_contact_phone(contact, FIXED)
    assert sms.queues.redrive() == 1  # `ops dlq redrive sms`
    sms.deliver()
    [look] = order_events()  # what the sms consumer asked for: the deal, looked at again
    assert (look["envelope"]["source"], look["envelope"]["type"]) == ("bitrix24", "history.sweep")
    assert sms.queues.dead_letters() == [] and texts(sms) == []
    assert bitrix24.deliver(published(look)).failed == []
    assert to_sms(sms, order_events) == 1  # the entry again, with the fixed phone

    [(phone, body)] = texts(sms)
    assert phone == FIXED_E164 and f"order {deal_id} is ready for pickup" in body
    assert [message.phone for message in sms.fake.calls] == [REFUSED_E164, FIXED_E164]
    assert sms.queues.dead_letters() == [] and bitrix24.dead_letter_reasons() == []
    [record] = [item for item in sms.journal_records() if item["order_status"] == "ready_for_pickup"]
    assert record["state"] == "accepted"
    [metrics] = log.emf("SmsPhoneRecheckRequested")
    assert metrics["SmsPhoneRecheckRequested"] == [1.0]
    # A second redrive, or the look asked again, changes nothing: the SMS went, once.
    assert sms.queues.redrive() == 0 and to_sms(sms, order_events) == 0
    lines = "\n".join(str(line) for line in log.read())
    assert REFUSED_E164 not in lines and FIXED_E164 not in lines


def test_an_sms_dlq_redriven_before_the_phone_is_fixed_texts_nobody_and_keeps_the_record_for_a_person(
    bitrix24: DeployedConsumer,
    portal: Bitrix24PortalFake,
    order_events: Callable[[], list[dict[str, Any]]],
    sms: SmsHarness,
) -> None:
    contact = portal.create_contact("Ann", REFUSED, last_name="Smith")
    deal_id = portal.create_deal("Order 1042", contact_id=contact).deal_id
    portal.move_deal(deal_id, "EXECUTING")
    sms.fake.then(FakeBehaviour.REFUSE_PERMANENTLY)
    assert bitrix24.deliver(crm.deal_event(deal_id)).failed == []
    assert to_sms(sms, order_events) == 2

    assert sms.queues.redrive() == 1
    sms.deliver()
    [look] = order_events()
    assert bitrix24.deliver(published(look)).failed == []

    assert order_events() == [] and texts(sms) == []  # the phone is the refused one: nothing to send
    [record] = [item for item in sms.journal_records() if item["order_status"] == "ready_for_pickup"]
    assert record["state"] == "failed" and len(sms.fake.calls) == 1
