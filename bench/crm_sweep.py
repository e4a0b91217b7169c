"""`crm_sweep`: a 7-day outage of each CRM replayed on a simulated clock, and how the sweep catches up.

For each CRM (`bench.sweep_stand`: the stand-in over HTTP, enforcing the vendor's documented
rate limit; the sweep as its handler runs it, with the function's real timeout from
infra.environment and the `crm_sweep_minutes` period; the consumer's real sync reading every
look): MOVES orders (500 with `--quick`) are created and moved once each, evenly over 7 days,
with no webhook arriving and no sweep run. Then the scheduled runs resume until one catches up.

Checks: every move (and, on Bitrix24, each deal's creation record, a transition too) gets
exactly one order event (the SMS consumer's input), none twice, with an SMS age limit covering
the outage; and, replayed again with the default `sms_max_age_minutes`, every transition is
either texted or counted too old (`CrmTransitionsTooOld`), none texted older than the limit.
Figures: the sweep runs and the simulated minutes the catch-up took, the days of history read
per hour, the looks published (repeats included) and the consumer's reads the CRM refused.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from moto import mock_aws

from bench.common import FAKE_AWS_ENV, environment, powertools_environment, require
from bench.sweep_stand import SimClock, Stand
from infra.config import PipelineSettings
from infra.environment import CRM_SWEEP
from pipeline import aws

MOVES = 5000
QUICK_MOVES = 500
OUTAGE_SECONDS = 7 * 86400
START = 1_790_000_000.0
CRMS = ("amocrm", "bitrix24")


def _journal() -> None:
    aws.client("dynamodb").create_table(
        TableName="journal",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )


def replay(crm: str, moves: int, max_age_seconds: int) -> dict[str, Any]:
    """One outage and its catch-up; the figures, checked."""
    settings = PipelineSettings()
    period = settings.crm_sweep_minutes * 60
    env = {**FAKE_AWS_ENV, **powertools_environment("crm_sweep"), "POWERTOOLS_LOG_LEVEL": "WARNING"}
    with environment(env, remove=("AWS_ENDPOINT_URL", "AWS_PROFILE")), mock_aws():
        aws.reset_clients()
        _journal()
        clock = SimClock(START)
        stand = Stand(crm, clock, CRM_SWEEP.timeout_seconds).start(
            max_age_seconds=max_age_seconds,
            overlap_seconds=settings.crm_sweep_overlap_seconds,
            period_seconds=period,
        )
        began = time.monotonic()
        logging.disable(logging.WARNING)  # a week of "too late to text" warnings, one per move
        try:
            stand.run_sweep()  # the last run before the outage
            for _ in range(moves):
                clock.sleep(OUTAGE_SECONDS / moves)
                order = stand.new_order()
                clock.sleep(1)
                stand.move(order)
            outage_end = clock.time()
            seconds = stand.catch_up(period_seconds=period, max_runs=2000)
            runs = stand.runs[1:]
            texted = stand.texted()
            result = {
                "crm": crm,
                "moves": moves,
                "transitions": len(stand.moves),
                "max_age_seconds": max_age_seconds,
                "runs": len(runs),
                "minutes": round(seconds / 60, 1),
                "days_per_hour": round(OUTAGE_SECONDS / 86400 / (seconds / 3600), 1),
                "pages": sum(run.swept.pages for run in runs),
                "looks": len(stand.looks),
                "look_repeats": sum(stand.look_copies.values()) - len(stand.looks),
                "order_events": len(stand.order_events),
                "too_old": stand.too_old,
                "consumer_reads_refused": stand.consumer_calls_refused,
                "sweep_runs_failed": sum(run.failed for run in runs),
                "timeout_seconds": CRM_SWEEP.timeout_seconds,
                "period_seconds": period,
                "real_seconds": round(time.monotonic() - began, 1),
            }
            require(all(count == 1 for count in texted.values()), f"{crm}: a transition was texted twice")
            require(stand.unhandled() == [], f"{crm}: a move was never looked at")
            if max_age_seconds >= OUTAGE_SECONDS + seconds:
                missing = [ref for ref in stand.moves if texted[ref] != 1]
                require(not missing, f"{crm}: {len(missing)} transitions not texted exactly once")
            else:
                require(
                    len(texted) + stand.too_old == len(stand.moves),
                    f"{crm}: {len(texted)} texted + {stand.too_old} too old != {len(stand.moves)}",
                )
                last = runs[-1].started
                late = [ref for ref in texted if stand.moves[ref] < last - max_age_seconds - seconds]
                require(not late, f"{crm}: {len(late)} transitions texted after the age limit")
                require(stand.too_old > 0, f"{crm}: a week-old outage counted nothing too old")
            result["outage_end"] = outage_end
            return result
        finally:
            logging.disable(logging.NOTSET)
            stand.stop()
            aws.reset_clients()


def run(quick: bool = False) -> dict[str, Any]:
    moves = QUICK_MOVES if quick else MOVES
    default_age = PipelineSettings().sms_max_age_minutes * 60
    return {
        "covering": {crm: replay(crm, moves, OUTAGE_SECONDS + 86400) for crm in CRMS},
        "default_age": {crm: replay(crm, QUICK_MOVES, default_age) for crm in CRMS},
    }


def report(results: dict[str, Any]) -> list[str]:
    lines = ["crm_sweep: a 7-day outage, then the scheduled runs (simulated clock, vendor rate limits)"]
    for crm, figures in results["covering"].items():
        lines.append(
            f"  {crm:9} {figures['moves']} moves ({figures['transitions']} transitions):"
            f" {figures['runs']} runs, {figures['minutes']} min"
            f" ({figures['days_per_hour']} days of history an hour), {figures['pages']} pages,"
            f" {figures['looks']} looks (+{figures['look_repeats']} repeats dropped),"
            f" {figures['order_events']} order events, {figures['consumer_reads_refused']} consumer"
            f" reads refused for the rate; timeout {figures['timeout_seconds']} s, every"
            f" {figures['period_seconds'] // 60} min ({figures['real_seconds']} s real)"
        )
    for crm, figures in results["default_age"].items():
        lines.append(
            f"  {crm:9} default age limit ({figures['max_age_seconds'] // 60} min), {figures['moves']}"
            f" moves: {figures['order_events']} texted, {figures['too_old']} counted too old,"
            f" {figures['runs']} runs, {figures['minutes']} min"
        )
    return lines
