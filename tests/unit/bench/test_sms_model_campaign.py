"""`python -m bench sms-model --steps N` runs at least N steps, though sequences may end early."""

from __future__ import annotations

import argparse

import pytest

from bench import sms_model
from tests.support.sms_machine import TOTALS


def test_the_campaign_runs_rounds_until_it_has_its_steps(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Sequences that end early (the 100,000-step campaign of seed 20 ran 93,801 steps in one
    round) leave steps missing: further rounds, under derived seeds, make them up."""
    rounds: list[tuple[int, int]] = []

    def short_round(seed: int, sequences: int, args: argparse.Namespace) -> None:
        rounds.append((seed, sequences))
        TOTALS["steps"] += sequences * 40  # sequences of 40 steps, where up to 50 were allowed
        TOTALS["sequences"] += sequences

    monkeypatch.setattr(sms_model, "run_round", short_round)
    TOTALS.clear()
    try:
        code = sms_model.main(["--steps", "1000", "--seed", "20"])
    finally:
        counted = dict(TOTALS)
        TOTALS.clear()

    assert code == 0
    assert rounds == [(20, 20), (20_001, 4), (20_002, 1)]  # 800 steps, then 960, then 1000
    assert counted["steps"] >= 1000
    assert "steps 1000 in 3 round(s)" in capsys.readouterr().out


def test_later_rounds_add_sequences_instead_of_replaying_the_first() -> None:
    seeds = [sms_model.round_seed(20, number) for number in range(4)]

    assert seeds[0] == 20  # the campaign's seed: the same first round as ever
    assert len(set(seeds)) == 4
