"""`python -m bench sms-model [--steps N] [--seed S] [--steps-per-sequence K]`: a long campaign of
the SMS rules' state machine (`tests/support/sms_machine.py`) against the real journal code on moto.

Hypothesis generates sequences of CRM moves, re-saves, deliveries (late, repeated, reordered),
crashes and lost answers between AWS calls, gateway outcomes, receipts, reconciler runs, operator
decisions and TTL expiry, until at least N steps have run; every sequence is checked after each
step and after it drains. A sequence may end before its K steps, so the campaign runs in rounds:
the first of N/K sequences under the seed, each further one (seed * 1000 + round) for what is
still missing. It prints sequences, steps, faults injected by kind and violations, and, on
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


def round_seed(seed: int, round_number: int) -> int:
    """The first round runs under the campaign's seed (the same sequences as ever); later rounds
    under seeds derived from it, so they add sequences instead of replaying them."""
    return seed if round_number == 0 else seed * 1_000 + round_number


def run_round(seed: int, sequences: int, args: argparse.Namespace) -> BaseException | None:
    """`sequences` generated sequences under `seed`; the violation, if one broke a rule."""
    # Imported here: the machine brings moto and the test support, which the other benches never need.
    from tests.support.sms_machine import ShopMachine

    hypothesis.core.global_force_seed = seed  # type: ignore[attr-defined,assignment]
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
        return error
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from tests.support.sms_machine import TOTALS

    print(
        f"sms-model: seed {args.seed}, at least {args.steps} steps in sequences"
        f" of up to {args.steps_per_sequence} steps",
        flush=True,
    )
    started = time.monotonic()
    failure: BaseException | None = None
    rounds = 0
    while failure is None and TOTALS["steps"] < args.steps:
        sequences = math.ceil((args.steps - TOTALS["steps"]) / args.steps_per_sequence)
        failure = run_round(round_seed(args.seed, rounds), sequences, args)
        rounds += 1
    elapsed = time.monotonic() - started
    faults = {
        name.removeprefix("fault:"): count for name, count in TOTALS.items() if name.startswith("fault:")
    }
    print(f"  sequences {TOTALS['sequences']}, steps {TOTALS['steps']} in {rounds} round(s), {elapsed:.0f} s")
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
