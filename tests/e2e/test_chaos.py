"""A short seeded chaos campaign through the whole local pipeline (`local.chaos`, `make chaos`).

Its own runtime (several workers per consumer, short retry delays), a seeded workload of
Telegram updates (resends, concurrent deliveries, edits, button presses), CRM order moves and
deals moved in the Bitrix24 and amoCRM stand-ins, with faults at every hop the stand-ins and the
runtime have hooks for, and the operator's and customers' actions among them (`local.chaos.actions`:
a broadcast created with `bin/ops broadcast create` over the chats the campaign made, two of whose
users blocked the bot, a worker killed mid-page; a customer's STOP; a notification dead-lettered
days ago, redriven); once the faults stop and the queues drain, no invariant may be broken.
The long campaign's figures are in docs/reliability.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from local.chaos.actions import with_actions
from local.chaos.campaign import Campaign, Options
from local.chaos.edges import KINDS as EDGE_FAULTS
from local.chaos.workload import plan

pytestmark = pytest.mark.minutes(3)  # started first (tests/conftest.py)

# A seed whose plan has every fault at the edges (`local.chaos.edges`) beside the others: an account
# blocked (End User Messaging), the bot token revoked and replaced twice, Bitrix24's webhook code
# rotated, a deal hidden, Bitrix24 down for 2.8 sweep periods. Nothing dead-lettered for them
# (`account`), hidden orders counted and named (`hidden`), every catch-up complete (`catch-up`).
SEED = 2095
EVENTS = 100
# Enough faults in a short run that each kind the plan knows is likely to occur.
FAULT_RATE = 0.15


def test_a_short_seeded_campaign_breaks_no_invariant_and_leaks_no_phone_number(tmp_path: Path) -> None:
    lines: list[str] = []
    campaign = Campaign(
        Options(seed=SEED, events=EVENTS, workers=2, state_dir=tmp_path, fault_rate=FAULT_RATE),
        say=lines.append,
    )
    document = campaign.run()

    assert document["violations"] == [], "\n".join(lines + [str(v) for v in document["violations"]])
    assert document["events_total"] == EVENTS and document["faults_total"] >= 10
    assert {kind for kind in EDGE_FAULTS if document["faults"].get(kind)} == EDGE_FAULTS
    assert document["sender_errors"] == []
    # The checks had something to check: effects of most events were seen.
    assert document["accepted_events"] >= EVENTS * 0.8
    assert document["latency_ms"]["samples"] >= EVENTS * 0.3
    assert (tmp_path / "chaos-report.json").is_file()
    # The broadcast reached every chat but those that blocked the bot (the campaign's checks hold
    # each chat to exactly one, or none); the old redrive expired.
    actions = document["actions"]
    broadcast = actions["broadcasts"][-1]  # a create an SNS fault interrupted is cancelled, made again
    assert broadcast["state"] == "done" and actions["blocked_chats"] == 2
    assert broadcast["sent"] + broadcast["unknown"] + broadcast["blocked"] == broadcast["recipients"] >= 10
    assert broadcast["blocked"] <= 2 and broadcast["sent"] >= 10
    assert (
        actions["opted_out"] == actions["old_redrives"] == 1 and actions["sms_ended_unsent"]["expired"] == 1
    )
    assert actions["action_errors"] == []
    # No full phone number of the campaign's orders, deals, opt-outs and old redrives in any log.
    steps = with_actions(SEED, plan(SEED, EVENTS, FAULT_RATE))
    kinds = ("crm_move", "portal_move", "sms_opt_out", "old_redrive")
    phones = {step.args["phone"] for step in steps if step.kind in kinds}
    assert any(step.kind == "portal_move" for step in steps)
    logs = "".join(path.read_text(errors="replace") for path in (tmp_path / "logs").glob("*.log"))
    assert phones and not [phone for phone in phones if phone in logs]
