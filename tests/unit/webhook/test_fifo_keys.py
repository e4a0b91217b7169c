"""`pipeline.envelope.fifo_keys`: the message group and deduplication id of every publish.

The group says what stays in order (a Telegram chat; without one, its user; else a group that
says so), checked against aiogram's own reading of each real-shaped fixture; the deduplication id
says what SNS drops a repeat of (a Telegram update by its id; a CRM change by its content).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from jmespath import search

from pipeline.envelope import FIFO_ID_MAX, Envelope, fifo_id, fifo_keys, publish_request, utc_now
from pipeline.registry import by_name
from tests.unit.consumer_support import (
    BOT_ID,
    TELEGRAM_FIXTURE_NAMES,
    aiogram_context,
    amocrm_envelope,
    bitrix24_envelope,
    crm_envelope,
    crm_event,
    telegram_envelope,
    telegram_update,
)

# SNS: 1-128 characters of a-z, A-Z, 0-9 and punctuation.
ALLOWED = re.compile(r"^[a-zA-Z0-9!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]{1,128}$")


def expected_group(update: dict[str, Any]) -> str:
    """aiogram's chat, else its user, else none: the oracle for the group."""
    context = aiogram_context(update)
    if context.chat is not None:
        return f"telegram:{BOT_ID}:chat:{context.chat.id}"
    if context.user is not None:
        return f"telegram:{BOT_ID}:user:{context.user.id}"
    return f"telegram:{BOT_ID}:no-chat"


@pytest.mark.parametrize("name", TELEGRAM_FIXTURE_NAMES)
def test_a_telegram_update_is_grouped_by_its_chat_else_its_user(name: str) -> None:
    update = telegram_update(name)
    keys = fifo_keys(telegram_envelope(update).envelope)
    assert keys.group_id == expected_group(update)
    assert keys.deduplication_id == f"telegram:{BOT_ID}:{update['update_id']}"
    assert ALLOWED.match(keys.group_id) and ALLOWED.match(keys.deduplication_id)


def test_the_fixtures_cover_a_chat_a_user_and_no_chat_group() -> None:
    groups = {
        name: fifo_keys(telegram_envelope(telegram_update(name)).envelope).group_id
        for name in ("private_start", "inline_query", "poll", "group_message")
    }
    assert groups["private_start"] == "telegram:default:chat:123456789"
    assert groups["inline_query"] == "telegram:default:user:123456789"
    assert groups["poll"] == "telegram:default:no-chat"
    assert groups["group_message"] == "telegram:default:chat:-4012345678"


def test_a_callback_on_an_inline_mode_message_is_grouped_by_its_user() -> None:
    update = telegram_update("callback_query")
    update["callback_query"].pop("message")
    update["callback_query"]["inline_message_id"] = "AAAAAA"
    user = update["callback_query"]["from"]["id"]
    assert fifo_keys(telegram_envelope(update).envelope).group_id == f"telegram:{BOT_ID}:user:{user}"


def test_the_same_update_resent_has_the_same_keys_and_another_update_of_the_chat_the_same_group() -> None:
    first = telegram_envelope({**telegram_update("private_start"), "update_id": 5}).envelope
    resent = telegram_envelope({**telegram_update("private_start"), "update_id": 5}).envelope
    later = telegram_envelope({**telegram_update("private_start"), "update_id": 6}).envelope
    assert first.correlation_id != resent.correlation_id  # another request, same update
    assert fifo_keys(first) == fifo_keys(resent)
    assert fifo_keys(later).group_id == fifo_keys(first).group_id
    assert fifo_keys(later).deduplication_id != fifo_keys(first).deduplication_id


def crm_change(**order: Any) -> Envelope:
    event = crm_event()
    event["order"] = {**event["order"], **order}
    return crm_envelope(event).envelope


def test_a_crm_event_is_deduplicated_on_the_change_not_on_its_reusable_event_id() -> None:
    shipped, paid = crm_change(status="shipped"), crm_change(status="paid")
    assert shipped.event_id == paid.event_id  # the CRM reused its id for another change
    assert fifo_keys(shipped).deduplication_id != fifo_keys(paid).deduplication_id
    # The same change posted again (another request: another received_at, correlation id).
    again = crm_change(status="shipped")
    assert again.received_at != shipped.received_at or again.correlation_id != shipped.correlation_id
    assert fifo_keys(again).deduplication_id == fifo_keys(shipped).deduplication_id


def test_the_crm_dedup_id_changes_exactly_when_the_sms_consumers_idempotency_key_does() -> None:
    """Both read the same change: a repeat SNS drops is one the sms consumer would skip."""
    key = by_name("sms").idempotency_key
    base = crm_change(status="shipped")
    variants = [
        crm_change(status="shipped"),
        crm_change(status="shipped", transition_id="t-2"),
        crm_change(status="shipped", id="another-order"),
        crm_change(status="delivered"),
    ]
    for variant in variants:
        same_key = search(key, variant.to_document()) == search(key, base.to_document())
        assert (fifo_keys(variant).deduplication_id == fifo_keys(base).deduplication_id) == same_key


def test_a_crm_event_is_grouped_by_its_order() -> None:
    first, second = crm_change(status="paid"), crm_change(status="shipped")
    other = crm_change(status="paid", id="B-2")
    assert (
        fifo_keys(first).group_id
        == fifo_keys(second).group_id
        == f"crm:order:crm:{first.payload['order']['id']}"
    )
    assert fifo_keys(other).group_id == "crm:order:crm:B-2"


def test_an_order_is_qualified_by_the_crm_it_comes_from() -> None:
    """Bitrix24 deal 42 and amoCRM lead 42, published by their consumers as `crm` events, and a
    templated sender's order 42 are three orders: three groups (and three histories, see
    tests/unit/sms/test_sms_model_sequences.py)."""
    groups = set()
    for source in ({"crm": "bitrix24", "deal_id": "42"}, {"crm": "amocrm"}, None, {"crm": "elsewhere"}):
        event = crm_event()
        event["order"]["id"] = "42"
        if source is not None:
            event["source"] = source
        groups.add(fifo_keys(crm_envelope(event).envelope).group_id)
    assert groups == {"crm:order:bitrix24:42", "crm:order:amocrm:42", "crm:order:crm:42"}


def test_crm_sources_are_grouped_by_deal_or_lead_and_deduplicated_by_their_delivery_id() -> None:
    deal = bitrix24_envelope(4711).envelope
    assert fifo_keys(deal) == type(fifo_keys(deal))("bitrix24:deal:4711", deal.event_id)
    lead = amocrm_envelope(31, status_id=2, old_status_id=1, pipeline_id=9).envelope
    assert fifo_keys(lead).group_id == "amocrm:lead:31"
    assert fifo_keys(lead).deduplication_id == lead.event_id


def test_an_id_sns_would_refuse_is_hashed_into_one_it_accepts() -> None:
    long_order = "x" * 200
    spaced = "order with spaces"
    for value in (long_order, spaced, "ünïcode"):
        hashed = fifo_id(f"crm:order:{value}", prefix="crm:")
        assert ALLOWED.match(hashed) and len(hashed) <= FIFO_ID_MAX
        assert hashed == fifo_id(f"crm:order:{value}", prefix="crm:")  # stable
    assert fifo_id("crm:order:A-1") == "crm:order:A-1"
    keys = fifo_keys(crm_change(id=spaced))
    assert ALLOWED.match(keys.group_id) and keys.group_id.startswith("crm:sha256:")


def test_a_chat_less_update_with_a_bot_id_sns_refuses_is_still_publishable() -> None:
    envelope = Envelope(
        event_id="telegram:bot id with spaces:1",
        source="telegram",
        type="poll",
        correlation_id="c",
        received_at=utc_now(),
        payload={"update_id": 1, "poll": {"id": "1"}},
    )
    keys = fifo_keys(envelope)
    assert ALLOWED.match(keys.group_id) and ALLOWED.match(keys.deduplication_id)


def test_the_publish_request_carries_both_keys() -> None:
    envelope = telegram_envelope(telegram_update("private_start")).envelope
    request = publish_request("arn:aws:sns:eu-central-1:123456789012:x-events.fifo", envelope, {})
    keys = fifo_keys(envelope)
    assert request["MessageGroupId"] == keys.group_id
    assert request["MessageDeduplicationId"] == keys.deduplication_id
    assert Envelope.from_json(request["Message"]) == envelope


def test_every_source_has_a_grouping() -> None:
    """A new envelope source must say what its events stay in order with."""
    from typing import get_args

    from pipeline.envelope import ORDER_GROUPS, Source

    # Telegram: its chat; a broadcast page: itself (pages are independent, `message_group`).
    assert {*ORDER_GROUPS, "telegram", "broadcast"} == set(get_args(Source))
