"""What an idle stack costs by the month: list prices of the resources billed whether or not a
single event arrives, and the bill of a synthesized template (README's Deploy section quotes it,
and a test checks the quote against the default template).

Prices are AWS's published list prices (USD, us-east-1) on the pages in `source`, as recorded on
PRICES_RECORDED; they change and vary by region: re-check them there. Traffic (requests,
invocations, messages, SMS) is priced apart, by the cost model of `make bench` (bench/cost.py).

No CDK import: it reads a template's "Resources" as JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PRICES_RECORDED = "2026-12-01"
KMS_PRICING = "https://aws.amazon.com/kms/pricing/"
SECRETS_MANAGER_PRICING = "https://aws.amazon.com/secrets-manager/pricing/"
CLOUDWATCH_PRICING = "https://aws.amazon.com/cloudwatch/pricing/"
# CloudWatch alarms of a period below this are high resolution, priced higher (not modelled).
STANDARD_RESOLUTION_SECONDS = 60

# Charged while idle but not by a resource of the template: a custom metric the scheduled
# reconciler publishes on every run (first 10 of the account free), per metric-month.
CUSTOM_METRIC_USD = 0.30


@dataclass(frozen=True)
class MonthlyPrice:
    """A fixed monthly charge per billed unit of one CloudFormation resource type."""

    resource_type: str
    unit: str  # what is counted, singular
    usd: float
    source: str
    # Units the account's always-free tier covers (shared with everything else in the account).
    free_units: int = 0


PRICES: tuple[MonthlyPrice, ...] = (
    # Customer managed key, first year; automatic rotation (on for every key of this stack) adds
    # $1/month per new backing key for the first two rotations, so up to $3/month from year three.
    MonthlyPrice("AWS::KMS::Key", "KMS key", 1.00, KMS_PRICING),
    MonthlyPrice("AWS::SecretsManager::Secret", "secret", 0.40, SECRETS_MANAGER_PRICING),
    # Standard resolution, per alarm metric: a metric-math alarm pays for each metric it reads.
    MonthlyPrice("AWS::CloudWatch::Alarm", "alarm metric", 0.10, CLOUDWATCH_PRICING, free_units=10),
    MonthlyPrice("AWS::CloudWatch::Dashboard", "dashboard", 3.00, CLOUDWATCH_PRICING, free_units=3),
)


def alarm_metrics(alarm: Mapping[str, Any]) -> int:
    """The metrics an alarm is billed for; refuses a high-resolution alarm (priced otherwise)."""
    properties = alarm["Properties"]
    stats = [query["MetricStat"] for query in properties.get("Metrics", []) if "MetricStat" in query]
    periods = [stat["Period"] for stat in stats] if stats else [properties["Period"]]
    if min(periods) < STANDARD_RESOLUTION_SECONDS:
        raise ValueError("a high-resolution alarm: PRICES models standard resolution only")
    return len(stats) or 1


def billed_units(resources: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Billed units per priced resource type in a template's Resources."""
    units = {price.resource_type: 0 for price in PRICES}
    for resource in resources.values():
        kind = resource["Type"]
        if kind in units:
            units[kind] += alarm_metrics(resource) if kind == "AWS::CloudWatch::Alarm" else 1
    return units


@dataclass(frozen=True)
class IdleCost:
    units: dict[str, int]

    @property
    def lines(self) -> list[tuple[MonthlyPrice, int]]:
        return [(price, self.units[price.resource_type]) for price in PRICES]

    @property
    def total(self) -> float:
        return sum(price.usd * count for price, count in self.lines)

    @property
    def free_tier_saving(self) -> float:
        """The most the account's CloudWatch free tier can take off (if nothing else uses it)."""
        return sum(price.usd * min(count, price.free_units) for price, count in self.lines)

    def breakdown(self) -> str:
        """`3 KMS keys x $1.00 + ...`, as README states it."""
        return " + ".join(
            f"{count} {price.unit}{'' if count == 1 else 's'} x ${price.usd:.2f}"
            for price, count in self.lines
        )


def idle_cost(resources: Mapping[str, Mapping[str, Any]]) -> IdleCost:
    return IdleCost(billed_units(resources))
