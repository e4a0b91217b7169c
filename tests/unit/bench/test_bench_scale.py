"""The scale model (bench/scale.py) and its limits table (infra/limits.py): every limit it meets is
recorded with its page and date, capacities follow the registry, and docs/at-scale.md quotes its table."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from bench import scale
from infra.limits import LIMITS
from pipeline import pacing
from pipeline.registry import by_name
from pipeline.sms.rules import SmsRules, load_rules, rules_file

AT_SCALE = (Path(__file__).resolve().parents[3] / "docs" / "at-scale.md").read_text()


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    """The model at its four rates, both deployments (arithmetic: the same every call)."""
    return scale.run()


def test_every_limit_names_its_page_and_how_and_when_it_was_recorded() -> None:
    for name, limit in LIMITS.all().items():
        assert limit.source.startswith("https://"), name
        assert limit.how in ("checked", "memory"), name
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", limit.recorded), name
        assert limit.value > 0, name


def test_every_limit_the_model_meets_is_in_the_table_or_a_setting(results: dict[str, Any]) -> None:
    met = {hop["limit"] for rates in results["deployments"].values() for at in rates for hop in at["hops"]}
    assert met <= set(LIMITS.all()) | {"max_concurrency", "api_rate_limit (setting)"}


def test_a_consumers_capacity_follows_its_max_concurrency_in_the_registry() -> None:
    crm = by_name("crm")
    base = scale.consumer_hop(crm, 1.0, scale.MEASURED)
    doubled = scale.consumer_hop(
        dataclasses.replace(crm, max_concurrency=2 * crm.max_concurrency), 1.0, scale.MEASURED
    )
    assert base.limit == "max_concurrency"
    assert doubled.capacity == pytest.approx(2 * base.capacity)


def test_a_sending_consumer_is_held_to_telegrams_budget_however_many_environments_it_has() -> None:
    wide = dataclasses.replace(
        by_name("autoreply"), max_concurrency=200, environment=pacing.paced_environment(200)
    )
    hop = scale.consumer_hop(wide, 1_000.0, scale.MEASURED)
    assert hop.limit == "telegram_messages_per_second"
    routed = sum(scale.CAMPAIGN_MIX[kind] for kind in scale.kinds_routed(wide))
    messages_per_second = hop.capacity * scale.CAMPAIGN_MIX["start"] / routed
    assert messages_per_second == pytest.approx(pacing.HEADROOM * pacing.TELEGRAM_MESSAGES_PER_SECOND)


def test_a_hop_past_its_capacity_grows_its_queue_and_the_wait_after_an_hour() -> None:
    hop = scale.Hop("store", load=30.0, capacity=20.0, limit="max_concurrency")
    assert hop.growth == 10.0
    assert hop.delay_after == pytest.approx(scale.HOUR / 2)
    assert scale.Hop("store", load=10.0, capacity=20.0, limit="max_concurrency").delay_after == 0


def test_the_first_limit_is_the_one_reached_at_the_lowest_rate() -> None:
    at = scale.model(10_000, scale.MEASURED)
    reached = {
        hop["name"]: scale.reached_at(hop["name"], 10_000, scale.MEASURED)
        for hop in at["hops"]
        if hop["use"] >= 1
    }
    assert at["first_limit"] == min(reached, key=lambda name: reached[name] or float("inf"))
    first = next(
        hop
        for hop in scale.hops_at(at["first_limit_at"] * 1.01, scale.MEASURED)
        if hop.name == at["first_limit"]
    )
    assert first.use >= 1


@pytest.mark.parametrize("deployment", [scale.DEFAULT, scale.CAMPAIGN], ids=lambda d: d.label)
def test_readmes_at_scale_tables_are_the_models(
    deployment: scale.Deployment, results: dict[str, Any]
) -> None:
    rows = scale.summary_rows(results, deployment)
    quoted = re.findall(r"^\| (.+) \|$", AT_SCALE, flags=re.M)
    for row in rows:
        assert " | ".join(row) in quoted, f"docs/at-scale.md's tables lack the model's row {row}"


def test_raising_a_sending_consumers_concurrency_keeps_its_telegram_budget() -> None:
    for consumer in scale.CAMPAIGN.consumers():
        if pacing.SEND_RATE_ENV in consumer.environment:
            rate = float(consumer.environment[pacing.SEND_RATE_ENV])
            # A broadcast sends within its share of the bot's rate; replies keep the rest.
            share = pacing.BROADCAST_SHARE if consumer.broadcasts else 1.0
            assert rate * consumer.max_concurrency == pytest.approx(
                share * pacing.HEADROOM * pacing.TELEGRAM_MESSAGES_PER_SECOND, rel=1e-3
            )


def _rules(texts: dict[str, str]) -> SmsRules:
    return SmsRules.parse(
        {
            "schema_version": 2,
            "fallback_language": "en",
            "languages": sorted(texts),
            "rules": [{"name": "ready", "status": "ready_for_pickup", "template": texts}],
            "max_parts": 10,
        }
    )


def test_an_sms_costs_the_parts_its_rules_text_makes_by_language_and_the_sms_hop_is_held_to_them() -> None:
    """Issue 43: End User Messaging's MPS counts parts. A 200-character GSM text is 2 parts (153
    a part), a 150-character Cyrillic one 3 (UCS-2, 67 a part); the model weighs the languages
    (alike by default, a language without a text is its fallback's), and the sms hop's capacity
    is the MPS over the SMS share and those parts."""
    rules = _rules({"en": "A" * 200, "ru": "Ж" * 150})
    assert scale.sms_parts(rules) == pytest.approx(2.5)
    assert scale.sms_parts(rules, {"ru": 1.0}) == pytest.approx(3.0)
    assert scale.sms_parts(rules, {"fr": 3.0, "ru": 1.0}) == pytest.approx((3 * 2 + 3) / 4)
    hop = scale.consumer_hop(by_name("sms"), 10.0, scale.MEASURED, parts=2.5)
    assert hop.limit == "sms_mps_long_code"
    assert hop.capacity == pytest.approx(LIMITS.sms_mps_long_code.value / (scale.SMS_RULE_SHARE * 2.5))


def test_the_model_uses_the_shipped_rules_parts_as_ops_sms_preview_counts_them(
    results: dict[str, Any],
) -> None:
    """The shipped texts at their longest (a name in any script: UCS-2) are 2 parts each; the
    model's SMS are those, and the parts it sends an hour are the origination identity's MPS at
    most."""
    shipped = load_rules(str(rules_file())).sizes()
    assert {sized.size.parts for sized in shipped} == {2}
    assert results["sms_parts"] == 2.0
    sms = next(hop for hop in scale.hops_at(100, scale.MEASURED) if hop.name == "sms")
    assert sms.capacity == pytest.approx(LIMITS.sms_mps_long_code.value / (scale.SMS_RULE_SHARE * 2))
    for at in results["deployments"][scale.DEFAULT.label]:
        assert at["sms_parts_per_hour"] <= LIMITS.sms_mps_long_code.value * scale.HOUR
