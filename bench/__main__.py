"""`python -m bench [NAME ...] [--quick]` (make bench): run benchmarks, save their figures, print a report.

Without names every benchmark runs, in order: webhook, worker, pipeline, cost (the cost model
uses the figures the others measured, from this run or an earlier one), bill (the fixed monthly
bill of the default template, and the per-update cost against its floor), phones, sms, latency,
imports, scale (where the pipeline stops keeping up at 10 to 10,000 events a second: a model on
the limits of infra/limits.py and the pipeline load run's CPU figures), crm_sweep (a 7-day
outage of each CRM replayed on a simulated clock: how many runs and minutes the catch-up takes),
broadcast (the time and AWS cost of 100,000 recipients at the default rate: a model).
Figures are saved to .local/bench/results.json. `python -m bench sms-model --steps N` is a campaign
of the SMS rules' state machine instead (bench/sms_model.py); `python -m bench scale --rate N`
(repeatable; `--measured`: the latest load run's CPU figures) prints the scale model at those rates.

A benchmark whose own checks fail (`BenchError`) or that crashes is reported `FAILED` and the
others still run; the exit status is then 1, so `make bench-smoke` (every benchmark with
`--quick`, in CI) fails when one does.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable
from types import ModuleType
from typing import Any

from bench import (
    bill,
    broadcast,
    cost,
    crm_sweep,
    imports,
    latency,
    phones,
    pipeline,
    scale,
    sms,
    webhook,
    worker,
)
from bench.common import RESULTS_PATH, BenchError, goal_line, machine, save_results

BENCHMARKS: dict[str, ModuleType] = {
    "webhook": webhook,
    "worker": worker,
    "pipeline": pipeline,
    "cost": cost,
    "bill": bill,
    "phones": phones,
    "sms": sms,
    "latency": latency,
    "imports": imports,
    "scale": scale,
    "crm_sweep": crm_sweep,
    "broadcast": broadcast,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="NAME", help="any of: " + ", ".join(BENCHMARKS))
    parser.add_argument(
        "--quick", action="store_true", help="fewer requests: a smoke run, not figures to quote"
    )
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    return args


def run_one(name: str, quick: bool) -> tuple[list[str], dict[str, Any]]:
    module = BENCHMARKS[name]
    run: Callable[..., dict[str, Any]] = module.run
    report: Callable[[dict[str, Any]], list[str]] = module.report
    started = time.monotonic()
    results = run(quick=quick)
    if not quick:
        save_results(name, results)
    load = machine()["load_average_1min"]
    lines = [*report(results), f"  ({name}: {time.monotonic() - started:.1f} s, load average after {load})"]
    return lines, results


def goals_report(results: dict[str, dict[str, Any]]) -> list[str]:
    """Every goal of the benchmarks that ran (their `summary`), OK or NOT MET with what was measured:
    issue 44's goals, judged against the baselines measured in this same run."""
    goals = []
    for name, result in results.items():
        summary: Callable[[dict[str, Any]], list[dict[str, Any]]] | None = getattr(
            BENCHMARKS[name], "summary", None
        )
        if summary is not None and not (name == "cost" and "bill" in results):  # bill repeats it
            goals += summary(result)
    if not goals:
        return []
    return ["goals (issue 44), measured in this run:", *(goal_line(goal) for goal in goals), ""]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["sms-model"]:  # a campaign with options of its own, not a figure
        from bench import sms_model

        return sms_model.main(argv[1:])
    if argv[:1] == ["scale"] and set(argv[1:]) - {"--quick"}:  # the model at rates of one's own
        return scale.main(argv[1:])
    args = parse_args(argv)
    names = args.names or list(BENCHMARKS)
    info = machine()
    print(
        f"bench on {info['cpus']} CPUs (load average {info['load_average_1min']}), Python {info['python']},"
        f" {info['platform']}"
        + (" (quick: smoke run, figures not saved)" if args.quick else f"; figures saved to {RESULTS_PATH}"),
        flush=True,
    )
    failed = []
    measured: dict[str, dict[str, Any]] = {}
    for name in names:
        print(flush=True)
        try:
            lines, measured[name] = run_one(name, args.quick)
        except BenchError as error:
            failed.append(name)
            print(f"{name}: FAILED: {error}", file=sys.stderr, flush=True)
            continue
        except Exception as error:  # a crash is a failure too, and must not hide the others' results
            failed.append(name)
            traceback.print_exc()
            print(f"{name}: FAILED: crashed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
            continue
        print("\n".join(lines), flush=True)
    print(flush=True)
    print("\n".join(goals_report(measured)), flush=True)
    if failed:
        print(f"bench: FAILED: {', '.join(failed)} (of {len(names)} benchmarks)", file=sys.stderr, flush=True)
        return 1
    print(f"bench: all {len(names)} benchmarks passed their checks", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
