"""Rules, notification keys, settings and the registry entry: the configuration the journal relies on."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from pipeline.crm.event_model import CrmEvent
from pipeline.observability import mask_phone, mask_phones
from pipeline.registry import by_name, matches
from pipeline.retention import CRM_RESEND_WINDOW, REDELIVERY_BOUND, SMS_RETENTION_MIN_DAYS
from pipeline.sms.journal import notification_key, parse_iso
from pipeline.sms.rules import RULES_ENV, load_rules
from pipeline.sms.settings import SmsSettings
from pipeline.validation import Invalid
from tests.unit.sms.conftest import MASKED_PHONE, PHONE, SmsHarness, order_event


def _rules(*rules: dict[str, Any]) -> str:
    return json.dumps({"version": 1, "rules": list(rules)})


def test_default_rules_cover_ready_for_pickup_and_shipped_and_fill_placeholders() -> None:
    rules = load_rules("")
    assert [rule.status for rule in rules.rules] == ["ready_for_pickup", "shipped"]
    event = CrmEvent.parse(order_event("ready_for_pickup", "paid", order_id="ORD-7"))
    rule = rules.rule_for("ready_for_pickup", "paid")
    assert rule is not None
    assert rule.render(event) == "Olga Ivanova, your order ORD-7 is ready for pickup."
    assert rules.rule_for("ready_for_pickup", "ready_for_pickup") is None  # a re-save
    assert rules.rule_for("cancelled", "paid") is None


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        ("Hi {customer_phone}", "unsupported placeholder"),
        ("{order_id.__class__}", "unsupported placeholder"),
        ("{order_id!r}", "unsupported placeholder"),
        ("{order_id:>40}", "unsupported placeholder"),
    ],
)
def test_a_template_may_use_only_the_event_placeholders(template: str, problem: str) -> None:
    with pytest.raises(Invalid, match=problem):
        load_rules(_rules({"name": "bad", "status": "shipped", "template": template}))


def test_rules_that_claim_the_same_transition_are_refused() -> None:
    with pytest.raises(Invalid, match="match the same transition"):
        load_rules(
            _rules(
                {"name": "a", "status": "shipped", "template": "A"},
                {"name": "b", "status": "shipped", "from_statuses": ["paid"], "template": "B"},
            )
        )
    with pytest.raises(Invalid, match="never sends"):
        load_rules(_rules({"name": "c", "status": "shipped", "from_statuses": ["shipped"], "template": "C"}))


def test_from_statuses_limit_a_rule_to_some_transitions() -> None:
    rules = load_rules(
        _rules(
            {"name": "back", "status": "ready_for_pickup", "from_statuses": ["returned"], "template": "Back"},
            {"name": "first", "status": "ready_for_pickup", "from_statuses": ["paid"], "template": "First"},
        )
    )
    assert [rules.rule_for("ready_for_pickup", p).name for p in ("returned", "paid")] == ["back", "first"]  # type: ignore[union-attr]
    assert rules.rule_for("ready_for_pickup", "new") is None


def test_sms_rules_json_overrides_the_shipped_file_inline_or_as_a_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    inline = _rules({"name": "delivered", "status": "delivered", "template": "Order {order_id} delivered"})
    monkeypatch.setenv(RULES_ENV, inline)
    assert [rule.status for rule in load_rules().rules] == ["delivered"]
    path = tmp_path / "rules.json"
    path.write_text(_rules({"name": "paid", "status": "paid", "template": "Paid {order_id}"}))
    monkeypatch.setenv(RULES_ENV, str(path))
    assert [rule.status for rule in load_rules().rules] == ["paid"]


def test_the_notification_key_changes_with_each_part_and_never_names_the_recipient() -> None:
    parts = ("order.status_changed", "crm:ORD-1", "at:2026-01-15T10:00:00.000000Z|ready|paid", "sms")
    key = notification_key(*parts)
    assert key == notification_key(*parts)  # permanent: the same notification, the same key
    assert len(key) == 64
    for index in range(len(parts)):
        changed = list(parts)
        changed[index] += "x"
        assert notification_key(*changed) != key, f"part {index} does not change the key"
    # Not the order id alone: two moves of one order into a status are two notifications; and
    # not the CRM's order number alone: Bitrix24 deal 1 is not amoCRM lead 1.
    assert notification_key("order.status_changed", "crm:ORD-1", "ref:h-2", "sms") != key
    assert notification_key(parts[0], "bitrix24:1", parts[2], "sms") != notification_key(
        parts[0], "amocrm:1", parts[2], "sms"
    )


def test_phone_masking_keeps_the_prefix_and_the_last_two_digits() -> None:
    assert mask_phone(PHONE) == MASKED_PHONE
    assert mask_phones(f"cannot deliver to {PHONE} (id 42)") == f"cannot deliver to {MASKED_PHONE} (id 42)"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("+49 170 123-45-67", "+49 170 ***-**-67"),
        ("call 8 (999) 123-45-67 now", "call 8 (999) 12*-**-67 now"),
        ("short +12345678 number", "short *******78 number"),
        ("at 2026-01-15T10:00:00Z, id 42, 5pm", "at 2026-01-15T10:00:00Z, id 42, 5pm"),
        ("order 1234567", "order 1234567"),
    ],
    ids=["separators", "national-format", "short", "date-and-small-numbers", "seven-digits"],
)
def test_phones_in_free_text_are_masked_whatever_their_separators(text: str, expected: str) -> None:
    assert mask_phones(text) == expected


def test_keys_outlive_every_redelivery_and_the_crms_resends() -> None:
    """An SMS key forgotten while its event can still come back would text the customer twice."""
    settings = SmsSettings(journal_table="journal")
    assert settings.retention >= REDELIVERY_BOUND + CRM_RESEND_WINDOW
    shortest = SmsSettings(journal_table="journal", retention_days=SMS_RETENTION_MIN_DAYS)
    assert shortest.retention >= REDELIVERY_BOUND
    shorter_than_the_bound = math.ceil(REDELIVERY_BOUND / timedelta(days=1)) - 1
    assert timedelta(days=shorter_than_the_bound) < REDELIVERY_BOUND
    with pytest.raises(Invalid, match="retention_days"):
        SmsSettings(journal_table="journal", retention_days=shorter_than_the_bound)
    with pytest.raises(Invalid, match="SMS_HTTP_BASE_URL"):
        SmsSettings(journal_table="journal", gateway="http")


def test_a_journal_record_expires_no_sooner_than_the_redelivery_bound(sms: SmsHarness) -> None:
    """The table's TTL deletes a record at its `expiration`; until then a redriven or resent
    event finds its key and sends nothing."""
    sms.publish(order_event())
    sms.deliver()
    [record] = sms.journal_records()
    created = parse_iso(record["created_at"]).replace(microsecond=0)  # `expiration` is whole seconds
    kept = datetime.fromtimestamp(int(record["expiration"]), UTC) - created
    assert kept >= REDELIVERY_BOUND + CRM_RESEND_WINDOW


def test_the_registry_entry_routes_every_status_change_and_fits_the_journal() -> None:
    sms = by_name("sms")
    attributes = {"source": "crm", "type": "order.status_changed"}
    # Statuses without a rule too: the order's history needs every exit to count a re-entry.
    for status in ("ready_for_pickup", "shipped", "cancelled", "assembling"):
        assert matches(sms.filter_policy, {**attributes, "status": status})
    assert not matches(sms.filter_policy, {"source": "telegram", "type": "message"})
    assert not matches(sms.filter_policy, {"source": "crm", "type": "order.created"})
    settings = SmsSettings.parse(
        {"journal_table": "journal", "max_attempts": sms.environment["SMS_MAX_ATTEMPTS"]}
        | {"lease_seconds": sms.environment["SMS_LEASE_SECONDS"]}
    )
    # The journal gives up (failed + DLQ with its reason) before SQS's redrive would.
    assert settings.max_attempts < sms.retry.max_receive_count
    # A live worker never loses its lease; a dead one's has expired when SQS redelivers.
    assert sms.timeout_seconds < settings.lease_seconds < sms.visibility_timeout_seconds
