"""The campaign's faults at the edges (`local.chaos.edges`): planned from the seed, and the
invariants they are checked by (`hidden`, `catch-up`), on what the pipeline's logs and journal say."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from local.chaos.checks import Observed, Sent, check
from local.chaos.edges import CREDENTIALS, KINDS
from local.chaos.observe import HIDDEN_MESSAGE, hidden_orders
from local.chaos.workload import FAULT_WEIGHTS, ROTATED_VENDORS, plan
from pipeline.crm.sources import HIDDEN_METRIC

SEED = 2095
RULES = frozenset({"shipped"})


def test_each_edge_fault_is_planned_from_the_seed_with_what_replays_it() -> None:
    steps = plan(SEED, 3000)
    assert steps == plan(SEED, 3000)
    edges = [step for step in steps if step.kind in KINDS]
    assert {step.kind for step in edges} == KINDS and set(FAULT_WEIGHTS) >= KINDS
    assert set(ROTATED_VENDORS) == set(CREDENTIALS)
    for step in edges:
        if step.kind == "token_rotated":
            assert step.args["vendor"] in ROTATED_VENDORS and 0 <= step.args["gap"] <= 3
        if step.kind in ("token_rotated", "bot_token_revoked"):
            assert len(step.args["value"]) >= 20 and step.args["value"].replace("_", "").isalnum()
        if step.kind == "portal_outage":
            assert step.args["periods"] > 1  # longer than one sweep's window
    # Each rotation issues its own credential.
    values = [step.args["value"] for step in edges if "value" in step.args]
    assert len(values) == len(set(values))


def edge_check(sent: Sent, observed: Observed) -> list[tuple[str, str]]:
    return [(v.invariant, v.detail) for v in check(SEED, sent, observed, RULES)]


def test_an_order_skipped_as_hidden_must_be_one_the_campaign_hid_and_be_counted() -> None:
    sent = Sent(hidden={"bitrix24 deal 7"})
    assert edge_check(sent, Observed(hidden_named=["bitrix24 deal 7"], hidden_counted=1)) == []

    assert edge_check(sent, Observed(hidden_named=["bitrix24 deal 8"], hidden_counted=1)) == [
        ("hidden", "bitrix24 deal 8 skipped as hidden, but the campaign never hid it")
    ]
    assert edge_check(sent, Observed(hidden_named=["bitrix24 deal 7"] * 2, hidden_counted=1)) == [
        ("hidden", "2 orders skipped as hidden, 1 counted")
    ]


def test_a_portal_whose_sweep_never_read_past_its_last_move_breaks_catch_up() -> None:
    sent = Sent(portal_moved_at={"amocrm": 1000.4, "bitrix24": 2000.0})
    caught_up = Observed(sweep_read_to={"amocrm": 1000.0, "bitrix24": 2005.0})
    assert edge_check(sent, caught_up) == []

    behind = edge_check(sent, Observed(sweep_read_to={"amocrm": 990.0}))
    assert [invariant for invariant, _ in behind] == ["catch-up", "catch-up"]
    assert "amocrm's sweep read its history to 990.0" in behind[0][1]
    assert "bitrix24's sweep read its history to None" in behind[1][1]


def test_the_observer_reads_the_hidden_orders_the_crm_consumers_logged_and_counted(tmp_path: Path) -> None:
    """The warning names the order; the metric is Powertools' EMF line beside it (`pipeline.crm.sources`)."""
    lines = [
        {"level": "WARNING", "message": HIDDEN_MESSAGE, "what": "bitrix24 deal 7", "missing_right": "Read"},
        {"_aws": {"CloudWatchMetrics": []}, HIDDEN_METRIC: [1.0]},
        {"level": "INFO", "message": "Order status published", "order_id": "7"},
    ]
    (tmp_path / "bitrix24#2.log").write_text(
        "".join(json.dumps(line) + "\n" for line in lines) + "not json\n"
    )
    amo = [{"level": "WARNING", "message": HIDDEN_MESSAGE, "what": "amocrm lead 3"}, {HIDDEN_METRIC: 1.0}]
    (tmp_path / "amocrm.log").write_text("".join(json.dumps(line) + "\n" for line in amo))
    (tmp_path / "sms.log").write_text(json.dumps({"message": HIDDEN_MESSAGE, "what": "not a CRM's"}) + "\n")

    named, counted = hidden_orders(SimpleNamespace(log_dir=tmp_path))  # type: ignore[arg-type]

    assert sorted(named) == ["amocrm lead 3", "bitrix24 deal 7"] and counted == 2
