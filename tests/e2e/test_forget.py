"""Issue 43, personal data lifecycle: what the pipeline keeps about a person, how long, and
`ops forget` erasing them, through the local pipeline as an operator runs it.

A person talks to the bot (or the autoreply) and gets an order-status SMS; every item the pipeline
wrote for them carries a TTL within its kind's retention (`pipeline.personal`); `ops forget
--phone P --chat C --yes` then leaves no item in any table naming their phone or chat id (in any
attribute, nested JSON and binary answers included), another person's items stay, and the old
events redelivered are still recognised as done: no second reply, SMS or item.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from pipeline.formats import key_of
from pipeline.personal import kind_of
from pipeline.registry import by_name
from tests.e2e.support import (
    SENT_PHONES,
    Ids,
    Pipeline,
    contact_message,
    message,
    order_status_changed,
    other_pipeline,
    phone_number,
    plain,
    private_chat,
    user,
    wait_for,
)
from tests.e2e.test_bot_conversation import Conversation, bot_calls, leads_for
from tests.e2e.test_pipeline import END_USER_MESSAGING

FORGET_SCENARIO = 71
FORGET_BOT_SCENARIO = 72
_SEPARATORS = re.compile(r"[\s().-]")


@pytest.fixture(scope="module")
def bot_forget_pipeline(pipeline: Pipeline, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    """The example bot (`bot`, with its registry timeout) and the `crm` consumer, one worker each."""
    settings = dataclasses.replace(pipeline.settings, bot_consumer=True)
    with other_pipeline(tmp_path_factory, "bot-forget", settings, (by_name("bot"), by_name("crm"))) as other:
        yield other


def all_items(pipeline: Pipeline) -> Iterator[tuple[str, dict[str, Any]]]:
    """(logical table, plain item) of every item in every table of the runtime."""
    assert pipeline.runtime.resources is not None
    dynamodb = pipeline.runtime.client("dynamodb")
    for table, name in pipeline.runtime.resources.tables.items():
        request: dict[str, Any] = {"TableName": name, "ConsistentRead": True}
        while True:
            page = dynamodb.scan(**request)
            for item in page.get("Items", []):
                yield table, plain(item)
            if "LastEvaluatedKey" not in page:
                break
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def texts(value: Any) -> Iterator[str]:
    """Every text in a value: strings, numbers, bytes, and what JSON strings hold."""
    if hasattr(value, "value") and isinstance(value.value, bytes):  # boto3's Binary
        value = value.value
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if isinstance(value, str):
        yield value
        yield _SEPARATORS.sub("", value)
        try:
            decoded = json.loads(value)
        except ValueError:
            return
        if not isinstance(decoded, str):
            yield from texts(decoded)
    elif isinstance(value, dict):
        for name, inner in value.items():
            yield str(name)
            yield from texts(inner)
    elif isinstance(value, list | set | tuple):
        for inner in value:
            yield from texts(inner)
    elif value is not None and not isinstance(value, bool):
        yield str(value)


def naming(pipeline: Pipeline, phone: str, chat: int) -> list[str]:
    """'<table> <kind>' of every item that holds the phone (with or without +) or the chat id."""
    digits = phone.lstrip("+")
    wanted = re.compile(rf"(?<![\d]){digits}(?!\d)|(?<![\d-]){chat}(?!\d)")
    found = []
    for table, item in all_items(pipeline):
        if any(wanted.search(text) for text in texts(item)):
            kind = kind_of(table, key_of("journal" if table == "journal" else table, item))
            found.append(f"{table} {kind.name if kind else 'unclaimed'}")
    return found


def assert_every_personal_item_has_its_ttl(pipeline: Pipeline) -> set[str]:
    """Every item is claimed by a kind; each personal kind with a TTL has `expiration` within it."""
    now = time.time()
    seen = set()
    for table, item in all_items(pipeline):
        key = key_of("journal" if table == "journal" else table, item)
        kind = kind_of(table, key)
        assert kind is not None, f"an item of {table} no kind of pipeline.personal claims: {key[:20]}"
        seen.add(kind.name)
        ttl = kind.retention.ttl
        if not kind.personal or ttl is None:
            continue
        if kind.name == "sms_notification" and item.get("state") != "accepted":
            continue  # no TTL while still to send or decide (pipeline.sms.journal)
        assert "expiration" in item, f"{kind.name} item without a TTL"
        assert now < int(item["expiration"]) <= now + ttl.total_seconds() + 60, kind.name
    return seen


def forget(pipeline: Pipeline, phone: str, chat: int) -> str:
    done = pipeline.ops("forget", "--phone", phone, "--chat", str(chat), "--yes")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output.replace(phone, "<phone>")
    printed_in_full = phone in output or phone.lstrip("+") in output or str(chat) in output
    assert not printed_in_full, "ops forget printed an identifier unmasked"
    return done.stdout


def test_ops_forget_leaves_no_item_naming_the_person_and_keeps_exactly_once(pipeline: Pipeline) -> None:
    ids = Ids(FORGET_SCENARIO)
    person, other = user(ids.number(), "Forget"), user(ids.number(), "Keep")
    phone, other_phone = phone_number(FORGET_SCENARIO, 1), phone_number(FORGET_SCENARIO, 2)
    SENT_PHONES.update({phone, other_phone})
    chat = int(person["id"])
    start = {
        "update_id": ids.update_id(),
        "message": message(ids.number(), private_chat(person), person, "/start"),
    }
    written = {
        "update_id": ids.update_id(),
        "message": message(ids.number(), private_chat(person), person, f"call me at {phone[:6]} {phone[6:]}"),
    }
    contact = {
        "update_id": ids.update_id(),
        "message": contact_message(ids.number(), person, phone.lstrip("+")),
    }
    kept = {
        "update_id": ids.update_id(),
        "message": message(ids.number(), private_chat(other), other, "/start"),
    }
    order, other_order = f"E2E-{FORGET_SCENARIO}-1", f"E2E-{FORGET_SCENARIO}-2"
    event = order_status_changed(f"evt-e2e-{FORGET_SCENARIO}-1", order, "ready_for_pickup", "paid", phone)
    other_event = order_status_changed(
        f"evt-e2e-{FORGET_SCENARIO}-2", other_order, "ready_for_pickup", "paid", other_phone
    )
    for update in (start, written, contact, kept):
        assert pipeline.send_update(update) == 200
    assert pipeline.send_crm_event(event) == 200
    assert pipeline.send_crm_event(other_event) == 200
    wait_for(lambda: END_USER_MESSAGING.sends(pipeline, order), 30, "the order SMS")
    wait_for(lambda: END_USER_MESSAGING.sends(pipeline, other_order), 30, "the other order SMS")
    wait_for(lambda: pipeline.item("journal", {"id": f"contact#{chat}"}), 60, "the contact's claim")
    assert pipeline.runtime.wait_until_drained(timeout=60)
    kinds = assert_every_personal_item_has_its_ttl(pipeline)
    assert {"idempotency_record", "sms_notification", "crm_lead_contact", "conversation_update"} <= kinds
    assert naming(pipeline, phone, chat), "the scenario stored nothing about the person"
    replies = len(pipeline.fake("telegram").calls("/bot"))
    leads = len(leads_for(pipeline, chat))
    assert leads == 1

    output = forget(pipeline, phone, chat)

    assert "journal (by key; a scan of" in output
    left = naming(pipeline, phone, chat)
    assert left == [], left
    assert naming(pipeline, other_phone, int(other["id"])), "the other person's items went too"
    # The old events come back (a Telegram resend, a CRM retry): still known as done.
    for update in (start, written, contact):
        assert pipeline.send_update(update) == 200
    assert pipeline.send_crm_event(event) == 200
    assert pipeline.runtime.wait_until_drained(timeout=60)
    assert len(END_USER_MESSAGING.sends(pipeline, order)) == 1, "exactly one SMS"
    assert len(pipeline.fake("telegram").calls("/bot")) == replies, "a reply was sent again"
    assert len(leads_for(pipeline, chat)) == leads, "a second lead for the person"
    assert naming(pipeline, phone, chat) == []


def test_ops_forget_erases_the_bots_persistence_mid_conversation(bot_forget_pipeline: Pipeline) -> None:
    bot_pipeline = bot_forget_pipeline
    chat = Conversation(bot_pipeline, FORGET_BOT_SCENARIO)
    chat.start()
    chat.wait_for_state(0, timeout=30)
    chat.wait_for_the_crm_claim()
    chat.share_contact()
    chat.wait_for_state(1, timeout=30)
    assert bot_pipeline.runtime.wait_until_drained(timeout=60)
    kinds = assert_every_personal_item_has_its_ttl(bot_pipeline)
    assert {"bot_state", "bot_api_call", "idempotency_record"} <= kinds
    calls = len(bot_calls(bot_pipeline, chat.chat_id))

    forget(bot_pipeline, chat.phone, chat.chat_id)

    left = naming(bot_pipeline, chat.phone, chat.chat_id)
    assert left == [], left
    # /start once more under its old update id: done already, so no reply and no state again.
    first = {"update_id": int(chat.event_ids[0].rsplit(":", 1)[-1])}
    first["message"] = message(chat.ids.number(), private_chat(chat.sender), chat.sender, "/start")
    assert bot_pipeline.send_update(first) == 200
    assert bot_pipeline.runtime.wait_until_drained(timeout=60)
    assert len(bot_calls(bot_pipeline, chat.chat_id)) == calls
    assert naming(bot_pipeline, chat.phone, chat.chat_id) == []
