"""The fixed monthly bill at rest of the default stack, and the per-update cost next to its floor.

The monthly figures are `infra.prices.idle_cost` of the default synthesized template under each
alarm profile (`alarms=full`, the default, and `alarms=essential`; what README's Deploy section
quotes): what the account pays with not one event, from the template's KMS keys, secrets, alarm
metrics and dashboards, at list price and within the account's always-free CloudWatch tier (if
this stack is its only user: what the goals of issue 23 are judged on). The per-update figures
are `bench.cost`'s (its model and the design's floor). Every figure is printed with its goal and
whether it is met.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from bench import cost
from bench.common import load_results, table
from infra.prices import (
    FREE_DASHBOARD_METRICS,
    MONTH_SECONDS,
    PRICES,
    PRICES_RECORDED,
    REGION,
    idle_cost,
    snapshot_mb,
)

# Goals (issue 23): the fixed monthly charges of the default template per alarm profile, USD,
# within the account's CloudWatch free tier (this stack its only user).
IDLE_GOALS_USD = {"full": 6.00, "essential": 2.50}
# Never build Docker/bundled assets: the template is all this needs (as the infra tests do).
SYNTH_CONTEXT: dict[str, Any] = {"aws:cdk:bundling-stacks": []}


def default_resources(alarms: str = "full") -> dict[str, Any]:
    """The default stack's synthesized Resources (environment-agnostic, without cdk-nag), with
    this alarm profile."""
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    from aws_cdk.assertions import Template

    from infra.application import build_app

    with tempfile.TemporaryDirectory(prefix="bench-bill-") as outdir:
        _, stack = build_app({**SYNTH_CONTEXT, "alarms": alarms}, outdir=outdir, nag=False)
        resources: dict[str, Any] = Template.from_stack(stack).to_json()["Resources"]
    return resources


# The CRM history sweep at rest (`infra.constructs.crm_sweep`, absent without a CRM): per run and
# connected CRM, one strongly consistent cursor read, one history call answered "nothing new" (or
# the overlap re-read) and one cursor write (its `read_to` moves); the `CrmSweepOrders` and
# `CrmSweepLagSeconds` metrics a run; one "CRM history swept" log line per CRM and Lambda's three.
SWEEP_RUN_SECONDS_PER_CRM = 0.4  # assumed: one HTTPS round trip to the CRM, its answer empty
SWEEP_LOG_BYTES_PER_CRM = 450
LAMBDA_REPORT_BYTES = 350
SWEEP_CUSTOM_METRICS = 2  # CrmSweepOrders, CrmSweepLagSeconds; CrmSweepFailures only while a CRM fails
MONTH_MINUTES = MONTH_SECONDS // 60


def sweep_at_rest(crms: int = 2) -> dict[str, Any]:
    """What the sweep costs a month with no order moving, at the default `crm_sweep_minutes`."""
    from infra.config import PipelineSettings
    from infra.environment import CRM_SWEEP
    from infra.prices import CUSTOM_METRIC_USD, TRAFFIC

    minutes = PipelineSettings().crm_sweep_minutes
    runs = MONTH_MINUTES / minutes
    gb_seconds = runs * crms * SWEEP_RUN_SECONDS_PER_CRM * CRM_SWEEP.memory_mb / 1024
    log_gb = runs * (crms * SWEEP_LOG_BYTES_PER_CRM + LAMBDA_REPORT_BYTES) / 1e9
    lines = {
        "lambda requests": runs * TRAFFIC.lambda_request.usd,
        "lambda GB-s": gb_seconds * TRAFFIC.lambda_arm_gb_second.usd,
        "cursor reads (RRU)": runs * crms * TRAFFIC.dynamodb_read_unit.usd,
        "cursor writes (WRU)": runs * crms * TRAFFIC.dynamodb_write_unit.usd,
        "logs ingested": log_gb * TRAFFIC.logs_ingested_gb.usd,
        "custom metrics (beyond the free 10)": SWEEP_CUSTOM_METRICS * CUSTOM_METRIC_USD,
    }
    return {
        "crm_sweep_minutes": minutes,
        "crms": crms,
        "runs_per_month": round(runs),
        "lines": {name: round(usd, 4) for name, usd in lines.items()},
        "total_usd": round(sum(lines.values()), 2),
    }


# SnapStart (issue 44) where it would shorten the first reply after idle: the two functions in
# series on that path. Off by default: the `snapstart` setting turns it on per function.
SNAPSTART_CANDIDATES = ("webhook", "autoreply")


def snapstart(idle_bills: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What SnapStart would add on the reply path: each function's snapshot cached all month (its
    memory, at the fixed bill's price per MB, `infra.prices`), and per 1 M updates a restore for
    each cold start (`cost.COLD_START_SHARE` of the invocations), against the fixed monthly goals.
    `default_on`: the functions the default template already has it on (their cache is in the
    fixed bill above)."""
    from infra.environment import WEBHOOK
    from infra.prices import TRAFFIC
    from pipeline.registry import by_name

    (snapshot,) = [price for price in PRICES if price.resource_type == "AWS::Lambda::Function"]
    default_on = idle_bills["full"]["snapstart_on"]
    memory = {WEBHOOK.service_name: WEBHOOK.memory_mb}
    memory.update({name: by_name(name).memory_mb for name in SNAPSTART_CANDIDATES if name != "webhook"})
    memory = {name: mb for name, mb in memory.items() if name not in default_on}
    cache = {name: round(mb * snapshot.usd, 2) for name, mb in memory.items()}
    restores = sum(
        cost.UPDATES * cost.COLD_START_SHARE * mb / 1024 * TRAFFIC.lambda_snapstart_restore_gb.usd
        for mb in memory.values()
    )
    monthly = round(sum(cache.values()), 2)
    with_it = {
        alarms: {
            "usd": round(idle["within_free_tier_usd"] + monthly, 2),
            "goal_usd": idle["goal_usd"],
            "met": round(idle["within_free_tier_usd"] + monthly, 2) <= idle["goal_usd"],
        }
        for alarms, idle in idle_bills.items()
    }
    return {
        "default_on": default_on,
        "cache_monthly_usd": cache,
        "monthly_usd": monthly,
        "restores_per_million_updates_usd": round(restores, 4),
        "bill_with_it": with_it,
        "pays": all(v["met"] for v in with_it.values()),
    }


def idle(alarms: str) -> dict[str, Any]:
    """The bill at rest of the default template with this alarm profile."""
    resources = default_resources(alarms)
    bill = idle_cost(resources)
    goal = IDLE_GOALS_USD[alarms]
    return {
        "snapstart_on": sorted(
            resource["Properties"]["Environment"]["Variables"]["POWERTOOLS_SERVICE_NAME"]
            for resource in resources.values()
            if resource["Type"] == "AWS::Lambda::Function" and snapshot_mb(resource)
        ),
        "total_usd": round(bill.total, 2),
        "free_tier_saving_usd": round(bill.free_tier_saving, 2),
        "within_free_tier_usd": round(bill.within_free_tier, 2),
        "goal_usd": goal,
        "goal_met": round(bill.within_free_tier, 2) <= goal,
        "lines": [
            {"unit": price.unit, "count": count, "usd": price.usd, "source": price.source}
            for price, count in bill.lines
        ],
        "breakdown": bill.breakdown(),
    }


def run(quick: bool = False) -> dict[str, Any]:
    """`quick` changes nothing: a synth per alarm profile and arithmetic."""
    per_update = cost.run()
    idle_bills = {alarms: idle(alarms) for alarms in IDLE_GOALS_USD}
    return {
        "idle": idle_bills,
        "snapstart": snapstart(idle_bills),
        "per_update": {
            "model_usd": per_update["scenarios"]["ai_off"]["total_usd"],
            "traced_usd": per_update["traced_ai_off_total_usd"],
            "ordered_usd": per_update["ordered"]["total_usd"],
            "ordered_consumers": per_update["ordered"]["consumers"],
            "floor": per_update["floor"],
            "above_floor": per_update["above_floor"],
            "unwindowed": per_update["unwindowed"],
        },
        "crm_sweep": sweep_at_rest(),
        "measured_inputs": bool(load_results()),
    }


MET = {True: "met", False: "NOT met"}


def summary(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 44's goals of this benchmark: the fixed monthly bill per alarm profile and the cost
    per 1 M updates against the floor, each with what was measured."""
    goals = [
        {
            "goal": f"fixed monthly bill, alarms={alarms}, <= ${idle['goal_usd']:.2f}",
            "met": idle["goal_met"],
            "measured": f"${idle['within_free_tier_usd']:.2f} within the free tier ("
            + ", ".join(f"{line['count']} {line['unit']}" for line in idle["lines"])
            + f"; ${idle['total_usd']:.2f} at list price)",
        }
        for alarms, idle in results["idle"].items()
    ]
    per_update = results["per_update"]
    return [
        *goals,
        cost.floor_goal(per_update["floor"], per_update["above_floor"], per_update.get("unwindowed")),
    ]


def idle_report(alarms: str, idle: dict[str, Any]) -> list[str]:
    rows = [
        [line["unit"], line["count"], f"{line['usd']:.2f}", f"{line['count'] * line['usd']:.2f}"]
        for line in idle["lines"]
    ]
    return [
        f"  fixed monthly at rest, alarms={alarms}: {idle['within_free_tier_usd']:.2f} within the account's"
        f" free tier, goal <= {idle['goal_usd']:.2f}: {MET[idle['goal_met']]}; {idle['total_usd']:.2f} at"
        " list price",
        *("    " + line for line in table(["billed unit", "count", "USD each", "USD"], rows)),
        f"    the free tier takes up to {idle['free_tier_saving_usd']:.2f} off if nothing else in the"
        " account uses it",
    ]


def report(results: dict[str, Any]) -> list[str]:
    per_update = results["per_update"]
    design = per_update["floor"]
    free = ", ".join(f"{p.free_units} {p.unit}s" for p in PRICES if p.free_units)
    return [
        f"bill of the default stack, USD ({REGION} list prices, the monthly ones as recorded on"
        f" {PRICES_RECORDED}; infra/prices.py; the account's always-free CloudWatch tier: {free},"
        f" a dashboard only if it reads <= {FREE_DASHBOARD_METRICS} metrics)",
        *(line for alarms, idle in results["idle"].items() for line in idle_report(alarms, idle)),
        f"  per 1 M updates (default: without ai, untraced): {per_update['model_usd']:.2f};"
        f" floor {design['total_usd']:.2f}; {design['model_ratio']:.2f}x, goal <= {design['goal_ratio']:g}x:"
        f" {MET[design['goal_met']]}",
        f"    with tracing=true: {per_update['traced_usd']:.2f} (the floor's items: python -m bench cost)",
        f"    ordered path ({', '.join(per_update['ordered_consumers'])} on a FIFO queue):"
        f" {per_update['ordered_usd']:.2f}, unordered {per_update['model_usd']:.2f}",
        *snapstart_report(results.get("snapstart")),
        *sweep_report(results.get("crm_sweep")),
    ]


def snapstart_report(snap: dict[str, Any] | None) -> list[str]:
    if not snap:
        return []
    cache = ", ".join(f"{name} {usd:.2f}" for name, usd in snap["cache_monthly_usd"].items())
    bills = "; ".join(
        f"alarms={alarms} {v['usd']:.2f} (goal <= {v['goal_usd']:.2f}: {MET[v['met']]})"
        for alarms, v in snap["bill_with_it"].items()
    )
    return [
        f"  SnapStart: on for {', '.join(snap['default_on']) or 'no function'} by default (the fixed bill"
        " above includes its cache); on the reply path it would cache a snapshot of each all month:"
        f" {cache} = {snap['monthly_usd']:.2f} a month, plus restores"
        f" {snap['restores_per_million_updates_usd']:.2f} per 1 M updates",
        f"    the fixed bill with it: {bills}; "
        + ("it fits" if snap["pays"] else "it does not fit the goals, so it stays off"),
    ]


def sweep_report(sweep: dict[str, Any] | None) -> list[str]:
    if not sweep:
        return []
    parts = ", ".join(f"{name} {usd:.4f}" for name, usd in sweep["lines"].items())
    return [
        f"  CRM history sweep at rest (only with a CRM connected; {sweep['crms']} CRMs, every"
        f" {sweep['crm_sweep_minutes']} min, {sweep['runs_per_month']} runs a month, no order moving):"
        f" {sweep['total_usd']:.2f} a month",
        f"    {parts} (a run's duration assumed {SWEEP_RUN_SECONDS_PER_CRM} s per CRM)",
    ]
