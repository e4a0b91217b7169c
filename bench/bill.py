"""The fixed monthly bill at rest of the default stack, and the per-update cost next to its floor.

The monthly figure is `infra.prices.idle_cost` of the default synthesized template (what README's
Deploy section quotes): what the account pays with not one event, from the template's KMS keys,
secrets, alarm metrics and dashboard. The per-update figures are `bench.cost`'s (its model and
the design's floor). Every figure is printed with its goal (issue 12) and whether it is met.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from bench import cost
from bench.common import load_results, table
from infra.prices import PRICES, PRICES_RECORDED, REGION, idle_cost

# Goal: the fixed monthly charges of the default template, USD, before any free tier.
IDLE_GOAL_USD = 4.00
# Never build Docker/bundled assets: the template is all this needs (as the infra tests do).
SYNTH_CONTEXT: dict[str, Any] = {"aws:cdk:bundling-stacks": []}


def default_resources() -> dict[str, Any]:
    """The default stack's synthesized Resources (environment-agnostic, without cdk-nag)."""
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    from aws_cdk.assertions import Template

    from infra.application import build_app

    with tempfile.TemporaryDirectory(prefix="bench-bill-") as outdir:
        _, stack = build_app(SYNTH_CONTEXT, outdir=outdir, nag=False)
        resources: dict[str, Any] = Template.from_stack(stack).to_json()["Resources"]
    return resources


# The CRM history sweep at rest (`infra.constructs.crm_sweep`, absent without a CRM): per run and
# connected CRM, one strongly consistent cursor read and one history call answered "nothing new";
# one `CrmSweepOrders` metric a run; one "CRM history swept" log line per CRM and Lambda's three.
SWEEP_RUN_SECONDS_PER_CRM = 0.4  # assumed: one HTTPS round trip to the CRM, its answer empty
SWEEP_LOG_BYTES_PER_CRM = 450
LAMBDA_REPORT_BYTES = 350
SWEEP_CUSTOM_METRICS = 1  # CrmSweepOrders; CrmSweepFailures only while a CRM fails
MONTH_MINUTES = 30 * 24 * 60


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
        "logs ingested": log_gb * TRAFFIC.logs_ingested_gb.usd,
        "custom metric (beyond the free 10)": SWEEP_CUSTOM_METRICS * CUSTOM_METRIC_USD,
    }
    return {
        "crm_sweep_minutes": minutes,
        "crms": crms,
        "runs_per_month": round(runs),
        "lines": {name: round(usd, 4) for name, usd in lines.items()},
        "total_usd": round(sum(lines.values()), 2),
    }


def run(quick: bool = False) -> dict[str, Any]:
    """`quick` changes nothing: one synth and arithmetic."""
    bill = idle_cost(default_resources())
    per_update = cost.run()
    return {
        "idle": {
            "total_usd": round(bill.total, 2),
            "free_tier_saving_usd": round(bill.free_tier_saving, 2),
            "goal_usd": IDLE_GOAL_USD,
            "goal_met": bill.total <= IDLE_GOAL_USD,
            "lines": [
                {"unit": price.unit, "count": count, "usd": price.usd, "source": price.source}
                for price, count in bill.lines
            ],
            "breakdown": bill.breakdown(),
        },
        "per_update": {
            "model_usd": per_update["scenarios"]["ai_off"]["total_usd"],
            "traced_usd": per_update["traced_ai_off_total_usd"],
            "ordered_usd": per_update["ordered"]["total_usd"],
            "ordered_consumers": per_update["ordered"]["consumers"],
            "floor": per_update["floor"],
        },
        "crm_sweep": sweep_at_rest(),
        "measured_inputs": bool(load_results()),
    }


def report(results: dict[str, Any]) -> list[str]:
    idle, per_update = results["idle"], results["per_update"]
    design = per_update["floor"]
    rows = [
        [line["unit"], line["count"], f"{line['usd']:.2f}", f"{line['count'] * line['usd']:.2f}"]
        for line in idle["lines"]
    ]
    met = {True: "met", False: "NOT met"}
    free = ", ".join(f"{p.free_units} {p.unit}s" for p in PRICES if p.free_units)
    return [
        f"bill of the default stack, USD ({REGION} list prices, the monthly ones as recorded on"
        f" {PRICES_RECORDED}; infra/prices.py)",
        f"  fixed monthly at rest: {idle['total_usd']:.2f}, goal <= {idle['goal_usd']:.2f}:"
        f" {met[idle['goal_met']]}",
        *("    " + line for line in table(["billed unit", "count", "USD each", "USD"], rows)),
        f"    the account's free tier ({free}; a dashboard only if it reads <= 50 metrics) takes up to"
        f" {idle['free_tier_saving_usd']:.2f} off if nothing else in the account uses it",
        f"  per 1 M updates (default: without ai, untraced): {per_update['model_usd']:.2f};"
        f" floor {design['total_usd']:.2f}; {design['model_ratio']:.2f}x, goal <= {design['goal_ratio']:g}x:"
        f" {met[design['goal_met']]}",
        f"    with tracing=true: {per_update['traced_usd']:.2f} (the floor's items: python -m bench cost)",
        f"    ordered path ({', '.join(per_update['ordered_consumers'])} on a FIFO queue):"
        f" {per_update['ordered_usd']:.2f}, unordered {per_update['model_usd']:.2f}",
        *sweep_report(results.get("crm_sweep")),
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
