"""The campaign's operator decides each SMS record that waits on a person as a person would, from
the gateway's own record (`local.chaos.operator`), and the checks then let none wait or excuse."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from local.chaos import operator
from local.chaos.checks import Observed, check, customer_name
from local.fakes.end_user_messaging import EndUserMessagingFake
from pipeline.sms.gateways import CONTEXT_KEY
from pipeline.sms.journal import KEY_PREFIX
from tests.unit.local.test_chaos_checks import RULES, SEED, healthy, move, sent_of


def test_each_waiting_record_is_resolved_by_what_the_gateway_took(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway = EndUserMessagingFake()
    gateway._messages.append({"message_id": "m-1", "text": "…", "context": {CONTEXT_KEY: "taken"}})
    runtime: Any = SimpleNamespace(fakes={"end_user_messaging": gateway}, state_dir=tmp_path)
    commands: list[tuple[str, ...]] = []

    def ops(*arguments: str, stack_file: Path) -> str:
        assert stack_file == tmp_path / "stack.json"
        commands.append(arguments)
        return ""

    monkeypatch.setattr(operator, "ops", ops)
    records = [
        (f"{KEY_PREFIX}taken", "unknown", "run-1"),  # the gateway took it: only its answer was lost
        (f"{KEY_PREFIX}lost", "unknown", "run-2"),  # the gateway never saw it
        (f"{KEY_PREFIX}refused", "failed", "run-3"),
        (f"{KEY_PREFIX}done", "accepted", "run-4"),
    ]

    decisions = operator.decide_sms_records(runtime, records)

    assert commands == [
        ("journal", "resolve", "taken", "--accepted", "--yes"),
        ("journal", "resolve", "lost", "--not-sent", "--yes"),
        ("journal", "resolve", "refused", "--not-sent", "--yes"),
    ]
    assert decisions == {"accepted": 1, "not-sent": 2}


def test_a_failing_operator_command_says_which_and_why(tmp_path: Path) -> None:
    with pytest.raises(
        operator.OperatorError, match=r"^bin/ops journal resolve nokey: error: .*stack.json not found"
    ):
        operator.ops("journal", "resolve", "nokey", "--not-sent", "--yes", stack_file=tmp_path / "stack.json")


def test_once_the_operator_decided_a_waiting_record_is_a_violation_and_excuses_nothing() -> None:
    sent, observed = healthy()
    last_move = move(4, 3, "shipped", "ready_for_pickup")
    sent = sent_of(*sent.steps.values(), last_move)
    waiting = Observed(**{**observed.__dict__, "sms_records": [("sms#r", "failed", customer_name("O-1", 3))]})

    assert check(SEED, sent, waiting, RULES) == []  # before: the record is the visible outcome

    waiting.decided_by_operator = True
    found = {(v.invariant, v.detail.split(" (")[0]) for v in check(SEED, sent, waiting, RULES)}

    assert found == {
        ("journal", "SMS record sms#r still failed after the operator decided"),
        ("sms", "no SMS for the move into ready_for_pickup, nor a record to decide on"),
    }
