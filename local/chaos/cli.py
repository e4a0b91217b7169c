"""`python -m local chaos --seed N --events N [--minutes M] [--workers W]` (make chaos).

Starts the local pipeline on free ports (state under `.local/chaos/`), runs the seeded campaign
(`local.chaos.campaign`), prints a progress line every few seconds, then the figures and each
violation with its seed and path; the JSON report is `.local/chaos/chaos-report.json`. Exit 1
when an invariant was violated, 2 when the pipeline could not start or lost its moto server.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from local.chaos.campaign import Campaign, CampaignStopped, Options
from local.chaos.summary import summary
from local.stack import DEFAULT_STATE_DIR, LocalRuntimeError


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m local chaos", description=__doc__)
    parser.add_argument("--seed", type=int, default=24, help="the campaign's seed (default 24)")
    parser.add_argument("--events", type=int, default=2000, help="events of the world to send (default 2000)")
    parser.add_argument(
        "--minutes", type=float, help="spread the events over this long (default: as fast as it takes them)"
    )
    parser.add_argument("--workers", type=int, default=3, help="worker processes per consumer (default 3)")
    parser.add_argument("--fault-rate", type=float, help="faults per event (default 0.06)")
    parser.add_argument(
        "--state-dir", type=Path, default=DEFAULT_STATE_DIR / "chaos", help="logs and report (.local/chaos)"
    )
    args = parser.parse_args(argv)
    if args.events < 1 or args.workers < 1 or (args.minutes is not None and args.minutes <= 0):
        parser.error("--events, --workers and --minutes must be positive")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    options = Options(
        seed=args.seed,
        events=args.events,
        minutes=args.minutes,
        workers=args.workers,
        state_dir=args.state_dir,
        fault_rate=args.fault_rate,
    )
    try:
        document = Campaign(options, say=lambda line: print(line, flush=True)).run()
    except LocalRuntimeError as error:
        print(f"the local pipeline did not start: {error}", file=sys.stderr)
        return 2
    except CampaignStopped as error:
        print(error, file=sys.stderr)
        return 2
    for line in summary(document):
        print(line)
    return 1 if document["violations_total"] else 0
