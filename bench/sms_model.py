"""`python -m bench sms-model [--steps N] [--seed S] [--steps-per-sequence K]`: a long campaign of
the SMS rules' state machine (`tests/support/sms_machine.py`) against the real journal code on moto.

Hypothesis generates sequences of CRM moves, re-saves, deliveries (late, repeated, reordered),
crashes and lost answers between AWS calls, gateway outcomes, receipts, reconciler runs, operator
decisions and TTL expiry, until about N steps have run; every sequence is checked after each step
and after it drains. It prints sequences, steps, faults injected by kind and violations, and, on
a violation, the shortest sequence Hypothesis finds that still breaks a rule (exit 1). The same
seed replays the same sequences. Not a figure of speed: nothing is saved to results.json.
"""

from __future__ import annotations

import argparse
import math
import time

import hypothesis.core
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench sms-model", description=__doc__)
    parser.add_argument("--steps", type=int, default=100_000, help="steps in all (default 100000)")
    parser.add_argument(
        "--steps-per-sequence", type=int, default=50, help="steps of one sequence (default 50)"
    )
    parser.add_argument("--seed", type=int, default=20, help="the campaign's seed (default 20)")
    parser.add_argument("--no-shrink", action="store_true", help="report a failing sequence as found")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.steps_per_sequence < 1:
        parser.error("--steps and --steps-per-sequence must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Imported here: the machine brings moto and the test support, which the other benches never need.
    from tests.support.sms_machine import TOTALS, ShopMachine

    sequences = math.ceil(args.steps / args.steps_per_sequence)
    print(
        f"sms-model: seed {args.seed}, about {args.steps} steps in {sequences} sequences"
        f" of up to {args.steps_per_sequence} steps",
        flush=True,
    )
    hypothesis.core.global_force_seed = args.seed  # type: ignore[attr-defined]
    started = time.monotonic()
    failure: BaseException | None = None
    try:
        run_state_machine_as_test(
            ShopMachine,
            settings=settings(
                max_examples=sequences,
                stateful_step_count=args.steps_per_sequence,
                database=None,
                deadline=None,
                phases=[Phase.generate] if args.no_shrink else [Phase.generate, Phase.shrink],
                suppress_health_check=list(HealthCheck),
                print_blob=True,
            ),
        )
    except Exception as error:  # the violation, with the shrunk sequence in its message
        failure = error
    elapsed = time.monotonic() - started
    faults = {
        name.removeprefix("fault:"): count for name, count in TOTALS.items() if name.startswith("fault:")
    }
    print(f"  sequences {TOTALS['sequences']}, steps {TOTALS['steps']} in {elapsed:.0f} s")
    print(f"  SMS sent {TOTALS['sms_sent']}, dead letters {TOTALS['dead_letters']}")
    print(
        f"  faults injected {sum(faults.values())}: "
        + ", ".join(f"{k} {v}" for k, v in sorted(faults.items()))
    )
    print(f"  violations {TOTALS['violations']}")
    if failure is not None:
        failures = list(failure.exceptions) if isinstance(failure, BaseExceptionGroup) else [failure]
        steps = "\n\n".join(f"{one}\n" + "\n".join(getattr(one, "__notes__", [])) for one in failures)
        print(f"sms-model: FAILED: a rule broke (seed {args.seed}); the shortest sequence found:\n{steps}")
        return 1
    return 0
