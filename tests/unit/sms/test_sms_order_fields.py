"""SMS templates may name any field of the order: `{order.<field>}`, checked at load and render."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pipeline.crm.event_model import CrmEvent
from pipeline.errors import PermanentError
from pipeline.sms.rules import MissingOrderFieldError, SmsRule, load_rules
from pipeline.validation import Invalid
from tests.unit.sms.conftest import order_event


def rule(template: str) -> SmsRule:
    rules = load_rules(
        json.dumps({"version": 1, "rules": [{"name": "shipped", "status": "shipped", "template": template}]})
    )
    return rules.rules[0]


def event(**order: Any) -> CrmEvent:
    payload = order_event("shipped", "paid", order_id="ORD-7")
    payload["order"].update(order)
    return CrmEvent.parse(payload)


def test_an_extra_order_field_and_a_contract_field_fill_the_template() -> None:
    template = "{customer_name}: {order.id} ({order.status}) tracking {order.tracking_number}, {{literal}}"
    text = rule(template).render(event(tracking_number="1Z999", weight_kg=2))
    assert text == "Olga Ivanova: ORD-7 (shipped) tracking 1Z999, {literal}"
    assert rule("{order.weight_kg} kg").render(event(weight_kg=2.5)) == "2.5 kg"


@pytest.mark.parametrize(
    "template",
    [
        "{order}",
        "{order.}",
        "{order.a.b}",
        "{order.items[0]}",
        "{order.__class__}",
        "{order.id!r}",
        "{order.id:>9}",
    ],
)
def test_anything_but_one_order_field_by_name_is_refused_at_load(template: str) -> None:
    with pytest.raises(Invalid, match="unsupported placeholder"):
        rule(template)


@pytest.mark.parametrize(
    ("order", "suffix"),
    [
        ({}, ""),
        ({"tracking_number": None}, ""),
        ({"tracking_number": ""}, " as text or a number"),
        ({"tracking_number": {"code": "1Z"}}, " as text or a number"),
        ({"tracking_number": True}, " as text or a number"),
    ],
)
def test_an_order_without_the_field_fails_the_event_permanently_naming_rule_and_field(
    order: dict[str, Any], suffix: str
) -> None:
    with pytest.raises(MissingOrderFieldError) as raised:
        rule("Tracking {order.tracking_number}").render(event(**order))
    assert isinstance(raised.value, PermanentError)  # dead-lettered, not retried
    assert str(raised.value) == (
        "SMS rule 'shipped' uses {order.tracking_number}, which order ORD-7 does not have" + suffix
    )
