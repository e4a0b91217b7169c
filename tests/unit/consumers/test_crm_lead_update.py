"""Issue 22: a known contact's phone goes onto the lead the `crm` consumer made (webhook PATCH,
Bitrix24 crm.lead.get + crm.lead.update), once per event, never an earlier number over a later one,
whichever consumer (crm, or the example bot through `crm.logic.create_lead`) sees the contact first.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from aiogram.types import Update

from pipeline.errors import TransientError
from pipeline.observability import mask_phone
from tests.unit.consumer_support import Output, Published, telegram_envelope, telegram_update
from tests.unit.consumers.conftest import AUTH_HEADER, BITRIX_CODE, DeployedConsumer, FakeHttpServer, Scripted
from tests.unit.consumers.test_crm import ANNA_ID, contact_record

PHONE = "+491701234567"  # the `contact` fixture's number
NEW_PHONE = "+491709876543"
BITRIX_LEAD = 3465


def shared_contact(update_id: int, phone: str = PHONE) -> Published:
    """Anna shares her own number (the `contact` fixture), as update `update_id`."""
    update = telegram_update("contact")
    update["update_id"] = update_id
    update["message"]["message_id"] = update_id % 1000
    update["message"]["contact"]["phone_number"] = phone
    Update.model_validate(update)
    return telegram_envelope(update)


def start() -> Published:
    return telegram_envelope(telegram_update("private_start"))  # update 810000001, before the contact


def bot_lead(update_id: int, phone: str = PHONE) -> Any:
    """The lead the example bot makes when Anna presses [Yes] (update `update_id`)."""
    from crm.leads import Lead

    return Lead(
        event_id=f"telegram:default:{update_id}",
        trigger="contact",
        telegram_user_id=ANNA_ID,
        chat_id=ANNA_ID,
        username="anna_s",
        first_name="Anna",
        last_name="Schmidt",
        phone=phone,
        language_code="de",
    )


def create_lead(lead: Any) -> dict[str, Any]:
    from crm.logic import create_lead as create

    result: dict[str, Any] = create(lead)
    return result


@contextmanager
def crash_after_the_crm_call() -> Iterator[None]:
    """The function dies after the CRM answered the update, before the journal records it."""
    from crm.contacts import ContactBook

    def crash(self: ContactBook, lead: Any) -> None:
        raise RuntimeError("the function died after the CRM answered")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ContactBook, "confirm_update", crash)
        yield


def methods(http_fake: FakeHttpServer) -> list[tuple[str, str]]:
    return [(request.method, request.path) for request in http_fake.requests]


def test_a_phone_shared_after_start_patches_the_lead_once_with_its_own_idempotency_key(
    webhook_crm: DeployedConsumer, http_fake: FakeHttpServer, output: Callable[[Any], Output]
) -> None:
    out = output(webhook_crm.app.worker)
    contact = shared_contact(810_000_014)

    assert webhook_crm.deliver(start()).failed == []
    assert webhook_crm.deliver(contact).failed == []

    assert methods(http_fake) == [("POST", "/leads"), ("PATCH", "/leads/lead-1")]
    update = http_fake.requests[1]
    assert update.headers["authorization"] == AUTH_HEADER
    assert update.headers["idempotency-key"] == f"update:{contact.envelope.event_id}"
    assert update.body == {"event_id": contact.envelope.event_id, "telegram_user_id": ANNA_ID, "phone": PHONE}
    record = contact_record(ANNA_ID)
    assert record is not None and "update_event_id" not in record
    assert (record["status"], record["lead_id"], record["phone_order"]) == ("pushed", "lead-1", 810_000_014)
    assert [line["phone"] for line in out.logs("lead updated")] == [mask_phone(PHONE)]
    assert PHONE not in json.dumps(out.lines)


def test_a_replay_of_the_same_event_updates_once_and_the_same_phone_again_not_at_all(
    webhook_crm: DeployedConsumer, http_fake: FakeHttpServer
) -> None:
    assert webhook_crm.deliver(start()).failed == []
    lead = bot_lead(810_000_020)

    # The bot's step may run again for the same update (a crash before its state was written).
    outcomes = [create_lead(lead), create_lead(lead)]
    # A later event with the number the lead already has changes nothing either.
    later = create_lead(bot_lead(810_000_021))

    assert [o["lead"] for o in [*outcomes, later]] == ["updated", "unchanged", "unchanged"]
    assert methods(http_fake) == [("POST", "/leads"), ("PATCH", "/leads/lead-1")]


def test_a_crash_between_the_crm_call_and_the_journal_write_repeats_the_call_with_the_same_key(
    webhook_crm: DeployedConsumer, http_fake: FakeHttpServer
) -> None:
    contact = shared_contact(810_000_014)
    assert webhook_crm.deliver(start()).failed == []

    with crash_after_the_crm_call():
        crashed = webhook_crm.deliver(contact)
    assert crashed.failed == crashed.message_ids
    pending = contact_record(ANNA_ID)
    assert pending is not None and pending["update_event_id"] == contact.envelope.event_id

    # Meanwhile the bot brings a later number: it waits behind the pending update (retried).
    with pytest.raises(TransientError, match="being written by another event"):
        create_lead(bot_lead(810_000_020, NEW_PHONE))

    assert webhook_crm.deliver(contact).failed == []  # SQS redelivers the shared contact

    patches = [r for r in http_fake.requests if r.method == "PATCH"]
    assert len(patches) == 2  # the receiver drops the second one by its key
    assert {r.headers["idempotency-key"] for r in patches} == {f"update:{contact.envelope.event_id}"}
    record = contact_record(ANNA_ID)
    assert record is not None and "update_event_id" not in record and record["phone_order"] == 810_000_014
    # The bot's retry now puts its later number on the lead.
    assert create_lead(bot_lead(810_000_020, NEW_PHONE))["lead"] == "updated"
    assert [r.body["phone"] for r in http_fake.requests if r.method == "PATCH"] == [PHONE, PHONE, NEW_PHONE]


def test_an_earlier_phone_never_replaces_a_later_one(
    webhook_crm: DeployedConsumer, http_fake: FakeHttpServer
) -> None:
    assert webhook_crm.deliver(start()).failed == []
    assert webhook_crm.deliver(shared_contact(810_000_030, NEW_PHONE)).failed == []
    # The crm consumer's queue is not ordered: an earlier shared contact arrives after it.
    assert webhook_crm.deliver(shared_contact(810_000_014, PHONE)).failed == []

    patches = [r.body for r in http_fake.requests if r.method == "PATCH"]
    assert [p["phone"] for p in patches] == [NEW_PHONE]


def test_the_bots_phone_waits_for_the_crm_consumers_lead_then_lands_on_it(
    webhook_crm: DeployedConsumer, http_fake: FakeHttpServer
) -> None:
    """The race of two consumers of one stream: the crm consumer's lead for /start is not made yet
    (the CRM answered 500: its claim is pending) when the bot's confirmed phone arrives."""
    http_fake.respond(Scripted(500, {"error": "maintenance"}))
    assert webhook_crm.deliver(start()).failed != []

    with pytest.raises(TransientError, match="being written by another event"):
        create_lead(bot_lead(810_000_020))  # the bot's step is retried
    assert methods(http_fake) == [("POST", "/leads")]

    assert webhook_crm.deliver(start()).failed == []  # redelivered: the lead is made
    assert create_lead(bot_lead(810_000_020))["lead"] == "updated"  # the bot's retry

    assert methods(http_fake) == [("POST", "/leads"), ("POST", "/leads"), ("PATCH", "/leads/lead-1")]
    assert http_fake.requests[-1].body["phone"] == PHONE


def test_when_the_bot_is_first_its_lead_has_the_phone_and_the_crm_consumer_adds_nothing(
    webhook_crm: DeployedConsumer, http_fake: FakeHttpServer
) -> None:
    assert create_lead(bot_lead(810_000_020))["lead"] == "created"
    assert webhook_crm.deliver(start()).failed == []  # known: no second lead
    assert webhook_crm.deliver(shared_contact(810_000_014)).failed == []  # the same number: nothing

    assert methods(http_fake) == [("POST", "/leads")]
    assert http_fake.requests[0].body["phone"] == PHONE


def test_a_refused_update_is_dead_lettered_and_frees_the_contact_for_the_next_event(
    webhook_crm: DeployedConsumer, http_fake: FakeHttpServer
) -> None:
    assert webhook_crm.deliver(start()).failed == []
    http_fake.respond(Scripted(422, {"error": f"phone {PHONE} is not valid"}))

    assert webhook_crm.deliver(shared_contact(810_000_014)).failed == []

    assert webhook_crm.dead_letter_reasons() == [
        f"crm webhook: HTTP 422 phone {mask_phone(PHONE)} is not valid"
    ]
    record = contact_record(ANNA_ID)
    assert record is not None and "update_event_id" not in record and "phone_order" not in record
    assert create_lead(bot_lead(810_000_020, NEW_PHONE))["lead"] == "updated"


def test_bitrix24_adds_the_phone_with_crm_lead_update_once(
    bitrix_crm: DeployedConsumer, http_fake: FakeHttpServer
) -> None:
    assert bitrix_crm.deliver(start()).failed == []
    lead_without_phone = {
        "ID": str(BITRIX_LEAD),
        "TITLE": "Telegram: Anna Schmidt (@anna_s)",
        "HAS_PHONE": "N",
    }
    http_fake.respond(Scripted(200, {"result": lead_without_phone}), Scripted(200, {"result": True}))
    contact = shared_contact(810_000_014)

    with crash_after_the_crm_call():
        assert bitrix_crm.deliver(contact).failed != []  # died after crm.lead.update answered

    base = f"/rest/1/{BITRIX_CODE}"
    assert methods(http_fake)[1:] == [
        ("POST", f"{base}/crm.lead.get.json"),
        ("POST", f"{base}/crm.lead.update.json"),
    ]
    assert http_fake.requests[1].body == {"id": str(BITRIX_LEAD)}
    assert http_fake.requests[2].body == {
        "id": str(BITRIX_LEAD),
        "fields": {"PHONE": [{"VALUE": PHONE, "VALUE_TYPE": "WORK"}]},
        "params": {"REGISTER_SONET_EVENT": "Y"},
    }

    # Redelivered: the lead has the number now (as Bitrix24 lists it), so it is not added twice.
    phone_on_lead = [{"ID": "12", "VALUE_TYPE": "WORK", "VALUE": "+49 170 1234567", "TYPE_ID": "PHONE"}]
    http_fake.respond(
        Scripted(200, {"result": {**lead_without_phone, "HAS_PHONE": "Y", "PHONE": phone_on_lead}})
    )
    assert bitrix_crm.deliver(contact).failed == []
    assert methods(http_fake)[3:] == [("POST", f"{base}/crm.lead.get.json")]
    record = contact_record(ANNA_ID)
    assert record is not None and "update_event_id" not in record and record["lead_id"] == str(BITRIX_LEAD)
