"""Every AWS price the repository uses, in one dated table with the page each comes from.

Two kinds, both read from here:
- fixed monthly charges of the resources billed whether or not a single event arrives (KMS keys,
  secrets, alarms, dashboards), and the bill of a synthesized template built from them (README's
  Deploy section quotes it, a test checks the quote against the default template, and `make
  bench` prints it: bench/bill.py);
- unit prices of traffic (requests, GB-seconds, write units, log GB, traces), which the cost
  model per 1 M updates multiplies by its volumes (bench/cost.py).

USD list prices, on-demand, free tiers kept apart (`free_units`), for eu-central-1 (the fixed
monthly prices are the same in us-east-1); each row says when it was recorded from its page.
They change and vary by region: re-check them there.

No CDK import: it reads a template's "Resources" as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

REGION = "eu-central-1"
# When the fixed monthly prices (the ones README quotes) were last checked on their pages.
PRICES_RECORDED = "2026-12-01"
# When the traffic prices were recorded (bench/cost.py's table, moved here unchanged).
TRAFFIC_PRICES_RECORDED = "2025-06"
# The FIFO rows (SNS FIFO topic, SQS FIFO queue), added 2026-12-02 for the ordered path; not
# re-read on their pages from this machine (no internet): re-check them there.
FIFO_PRICES_RECORDED = "2026-12-02"

KMS_PRICING = "https://aws.amazon.com/kms/pricing/"
SECRETS_MANAGER_PRICING = "https://aws.amazon.com/secrets-manager/pricing/"
CLOUDWATCH_PRICING = "https://aws.amazon.com/cloudwatch/pricing/"
LAMBDA_PRICING = "https://aws.amazon.com/lambda/pricing/"
# A month as the fixed monthly charges count it: 30 days.
MONTH_SECONDS = 30 * 24 * 3600
API_GATEWAY_PRICING = "https://aws.amazon.com/api-gateway/pricing/"
SNS_PRICING = "https://aws.amazon.com/sns/pricing/"
SQS_PRICING = "https://aws.amazon.com/sqs/pricing/"
DYNAMODB_PRICING = "https://aws.amazon.com/dynamodb/pricing/on-demand/"
XRAY_PRICING = "https://aws.amazon.com/xray/pricing/"

# CloudWatch alarms of a period below this are high resolution, priced higher (not modelled).
STANDARD_RESOLUTION_SECONDS = 60
# The CloudWatch free tier's dashboards (3 a month) are those "referencing up to 50 metrics
# each" (CLOUDWATCH_PRICING, free tier table, checked 2026-12-02): a bigger one is never free.
FREE_DASHBOARD_METRICS = 50
# A SEARCH expression on a dashboard references every metric it finds, a number known only in
# the account: the webhook's (one per source and event type, or per source and reason) are
# counted at this many each, a reserve for a few sources times their types.
SEARCH_METRICS_RESERVE = 10

# Charged while idle but not by a resource of the template: a custom metric the scheduled
# reconciler publishes on every run (first 10 of the account free), per metric-month.
CUSTOM_METRIC_USD = 0.30


# -- traffic ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class UnitPrice:
    """The price of one billed unit of traffic."""

    usd: float
    unit: str  # singular: "request", "GB-s"
    source: str
    note: str = ""
    # When it was recorded from `source`, if not TRAFFIC_PRICES_RECORDED.
    recorded: str = ""


@dataclass(frozen=True)
class TrafficPrices:
    lambda_arm_gb_second: UnitPrice = UnitPrice(
        0.0000133334, "GB-s", LAMBDA_PRICING, "arm64, first 7.5 billion GB-s a month"
    )
    lambda_request: UnitPrice = UnitPrice(0.20 / 1e6, "request", LAMBDA_PRICING)
    http_api_request: UnitPrice = UnitPrice(
        1.20 / 1e6, "request", API_GATEWAY_PRICING, "HTTP API, first 300 M a month, per 512 KB"
    )
    sns_publish: UnitPrice = UnitPrice(
        0.50 / 1e6, "request", SNS_PRICING, "standard topic, per 64 KB chunk; delivery to SQS free"
    )
    # The events topic is FIFO (issue 14): publishes, plus their payload, plus each delivery to
    # an SQS subscription (of a FIFO topic, unlike a standard one, delivery to SQS is billed).
    sns_fifo_publish: UnitPrice = UnitPrice(
        0.30 / 1e6, "request", SNS_PRICING, "FIFO topic, per 64 KB chunk", FIFO_PRICES_RECORDED
    )
    sns_fifo_publish_payload_gb: UnitPrice = UnitPrice(
        0.017, "GB", SNS_PRICING, "FIFO topic, payload data published", FIFO_PRICES_RECORDED
    )
    sns_fifo_sqs_delivery: UnitPrice = UnitPrice(
        0.01 / 1e6, "delivery", SNS_PRICING, "FIFO topic to an SQS subscription", FIFO_PRICES_RECORDED
    )
    sns_fifo_sqs_delivery_payload_gb: UnitPrice = UnitPrice(
        0.001, "GB", SNS_PRICING, "FIFO topic, payload data delivered to SQS", FIFO_PRICES_RECORDED
    )
    sqs_request: UnitPrice = UnitPrice(0.40 / 1e6, "request", SQS_PRICING, "standard queue, per 64 KB chunk")
    sqs_fifo_request: UnitPrice = UnitPrice(
        0.50 / 1e6, "request", SQS_PRICING, "FIFO queue, per 64 KB chunk", FIFO_PRICES_RECORDED
    )
    dynamodb_write_unit: UnitPrice = UnitPrice(
        0.7625 / 1e6, "WRU", DYNAMODB_PRICING, "on-demand, after the November 2024 price cut"
    )
    dynamodb_read_unit: UnitPrice = UnitPrice(0.1525 / 1e6, "RRU", DYNAMODB_PRICING)
    logs_ingested_gb: UnitPrice = UnitPrice(0.63, "GB", CLOUDWATCH_PRICING, "CloudWatch Logs, standard class")
    xray_trace: UnitPrice = UnitPrice(5.00 / 1e6, "trace", XRAY_PRICING, "traces recorded")
    # SnapStart for Python (issue 44): a published version's snapshot is billed for as long as the
    # version is active (at least 3 hours), and each environment restored from it per GB.
    # us-east-1's figures, recorded offline from a secondary source: check LAMBDA_PRICING for
    # eu-central-1's before relying on them.
    lambda_snapstart_cache_gb_second: UnitPrice = UnitPrice(
        0.0000015046, "GB-s", LAMBDA_PRICING, "SnapStart cache, per GB of memory, us-east-1", "2026-12-06"
    )
    lambda_snapstart_restore_gb: UnitPrice = UnitPrice(
        0.0001397998, "GB", LAMBDA_PRICING, "SnapStart restore, per GB of memory, us-east-1", "2026-12-06"
    )

    def all(self) -> dict[str, UnitPrice]:
        return {field.name: getattr(self, field.name) for field in fields(self)}


TRAFFIC = TrafficPrices()


# -- fixed monthly charges --------------------------------------------------------------------------------
@dataclass(frozen=True)
class MonthlyPrice:
    """A fixed monthly charge per billed unit of one CloudFormation resource type."""

    resource_type: str
    unit: str  # what is counted, singular
    usd: float
    source: str
    # Units the account's always-free tier covers (shared with everything else in the account).
    free_units: int = 0
    # Charged only where a setting turns it on: left out of a bill that has none of it.
    optional: bool = False
    # The unit counted more than once, where it is not the unit with an "s".
    plural: str = ""

    def counted(self, count: int) -> str:
        """`3 secrets x $0.40`: a line of `IdleCost.breakdown`, a price under a cent to the
        hundredth of one."""
        unit = self.unit if count == 1 else (self.plural or f"{self.unit}s")
        return f"{count} {unit} x ${self.usd:.{4 if self.usd < 0.01 else 2}f}"


PRICES: tuple[MonthlyPrice, ...] = (
    # Customer managed key, first year; automatic rotation (on for every key of this stack) adds
    # $1/month per new backing key for the first two rotations, so up to $3/month from year three.
    MonthlyPrice("AWS::KMS::Key", "KMS key", 1.00, KMS_PRICING),
    MonthlyPrice("AWS::SecretsManager::Secret", "secret", 0.40, SECRETS_MANAGER_PRICING),
    # Standard resolution, per alarm metric: a metric-math alarm pays for each metric it reads.
    MonthlyPrice("AWS::CloudWatch::Alarm", "alarm metric", 0.10, CLOUDWATCH_PRICING, free_units=10),
    # Free only for a dashboard of at most FREE_DASHBOARD_METRICS metrics (`free_eligible`).
    MonthlyPrice("AWS::CloudWatch::Dashboard", "dashboard", 3.00, CLOUDWATCH_PRICING, free_units=3),
    # SnapStart (the `snapstart` setting): a function's snapshot is cached, and billed by its
    # memory, while its version is active: all month for a function that is called every few days.
    MonthlyPrice(
        "AWS::Lambda::Function",
        "MB of SnapStart snapshot",
        TRAFFIC.lambda_snapstart_cache_gb_second.usd * MONTH_SECONDS / 1024,
        LAMBDA_PRICING,
        optional=True,
        plural="MB of SnapStart snapshot",
    ),
)


def alarm_metrics(alarm: Mapping[str, Any]) -> int:
    """The metrics an alarm is billed for; refuses a high-resolution alarm (priced otherwise)."""
    properties = alarm["Properties"]
    stats = [query["MetricStat"] for query in properties.get("Metrics", []) if "MetricStat" in query]
    periods = [stat["Period"] for stat in stats] if stats else [properties["Period"]]
    if min(periods) < STANDARD_RESOLUTION_SECONDS:
        raise ValueError("a high-resolution alarm: PRICES models standard resolution only")
    return len(stats) or 1


def _line_metrics(line: list[Any]) -> int:
    """A graphed line: a metric (shown or read by an expression) counts 1, a math expression 0
    (its metrics are lines of their own), a SEARCH its reserve."""
    expressions = [part["expression"] for part in line if isinstance(part, Mapping) and "expression" in part]
    if not expressions:
        return 1
    return SEARCH_METRICS_RESERVE if "SEARCH(" in expressions[0] else 0


def dashboard_metrics(dashboard: Mapping[str, Any]) -> int:
    """The metrics a dashboard's widgets reference, a SEARCH counted at SEARCH_METRICS_RESERVE."""
    body = dashboard["Properties"]["DashboardBody"]
    if isinstance(body, Mapping):  # {"Fn::Join": ["", [text, {"Ref": ...}, ...]]}
        body = "".join(part if isinstance(part, str) else "ref" for part in body["Fn::Join"][1])
    widgets = json.loads(body)["widgets"]
    return sum(
        _line_metrics(line) for widget in widgets for line in widget.get("properties", {}).get("metrics", [])
    )


def snapshot_mb(function: Mapping[str, Any]) -> int:
    """The memory of a function whose published versions have SnapStart (what its snapshot is
    billed by), 0 for any other (Lambda's default memory is 128 MB)."""
    properties = function["Properties"]
    if properties.get("SnapStart", {}).get("ApplyOn") != "PublishedVersions":
        return 0
    return int(properties.get("MemorySize", 128))


def billed_units(resources: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Billed units per priced resource type in a template's Resources."""
    units = {price.resource_type: 0 for price in PRICES}
    for resource in resources.values():
        kind = resource["Type"]
        if kind == "AWS::CloudWatch::Alarm":
            units[kind] += alarm_metrics(resource)
        elif kind == "AWS::Lambda::Function":
            units[kind] += snapshot_mb(resource)
        elif kind in units:
            units[kind] += 1
    return units


def free_eligible_units(resources: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Of the billed units, those the free tier may cover: every standard alarm metric (alarms
    here list their metrics, no Metrics Insights query), dashboards of up to 50 metrics."""
    units = billed_units(resources)
    units["AWS::CloudWatch::Dashboard"] = sum(
        1
        for resource in resources.values()
        if resource["Type"] == "AWS::CloudWatch::Dashboard"
        and dashboard_metrics(resource) <= FREE_DASHBOARD_METRICS
    )
    return units


@dataclass(frozen=True)
class IdleCost:
    units: dict[str, int]
    free_eligible: dict[str, int]

    @property
    def lines(self) -> list[tuple[MonthlyPrice, int]]:
        return [
            (price, self.units[price.resource_type])
            for price in PRICES
            if self.units[price.resource_type] or not price.optional
        ]

    @property
    def total(self) -> float:
        return sum(price.usd * count for price, count in self.lines)

    @property
    def free_tier_saving(self) -> float:
        """The most the account's CloudWatch free tier can take off (if nothing else uses it)."""
        return sum(
            price.usd * min(self.free_eligible[price.resource_type], price.free_units) for price in PRICES
        )

    @property
    def within_free_tier(self) -> float:
        """What the account pays if this stack is the only user of its CloudWatch free tier."""
        return self.total - self.free_tier_saving

    def breakdown(self) -> str:
        """`1 KMS key x $1.00 + ...`, as README states it."""
        return " + ".join(price.counted(count) for price, count in self.lines)


def idle_cost(resources: Mapping[str, Mapping[str, Any]]) -> IdleCost:
    return IdleCost(billed_units(resources), free_eligible_units(resources))
