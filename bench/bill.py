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
    ]
