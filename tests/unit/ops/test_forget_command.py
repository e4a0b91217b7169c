"""`ops forget` on records written by the journal code the workers use (moto): an SMS still to
send is abandoned and anonymised, a dry run changes nothing, bad input is a clear error."""

from __future__ import annotations

import boto3

from pipeline.personal import FORGOTTEN
from pipeline.sms.journal import KEY_PREFIX, Journal, State
from tests.unit.ops.support import Deployed
from tests.unit.ops.test_journal_commands import PHONE, record

CHAT = 987654321


def test_forget_anonymises_a_pending_sms_and_abandons_it(deployed: Deployed, run) -> None:
    journal = Journal(deployed.journal_table)
    pending, other = record(journal, "A-1", None), record(journal, "B-2", State.ACCEPTED)
    table = boto3.resource("dynamodb").Table(deployed.journal_table)
    table.update_item(
        Key={"id": KEY_PREFIX + other},
        UpdateExpression="SET recipient = :r, body = :b",
        ExpressionAttributeValues={":r": "+4915770000001", ":b": "Order B-2 is ready."},
    )
    table.put_item(Item={"id": f"contact#{CHAT}", "status": "pushed", "lead_id": "7"})
    table.put_item(Item={"id": f"blocked#{CHAT}", "chat_id": CHAT})

    result = run("forget", "--phone", PHONE, "--chat", str(CHAT), "--yes")

    assert result.code == 0, result.err
    assert PHONE not in result.out and str(CHAT) not in result.out
    assert "+37529*****67" in result.out
    assert "sms_notification: 1 anonymised" in result.out
    assert "crm_lead_contact: 1 deleted" in result.out and "chat_blocked: 1 deleted" in result.out
    assert "conversations: not in this stack" in result.out
    item = table.get_item(Key={"id": KEY_PREFIX + pending})["Item"]
    assert (item["recipient"], item["body"], item["state"]) == (FORGOTTEN, "", "failed")
    assert item["abandoned_by"] == "forget" and "sms_state" not in item and "expiration" in item
    assert journal.get(pending) is not None  # still readable by the workers: exactly-once kept
    assert table.get_item(Key={"id": KEY_PREFIX + other})["Item"]["recipient"] == "+4915770000001"
    assert "Item" not in table.get_item(Key={"id": f"contact#{CHAT}"})


def test_a_dry_run_changes_nothing(deployed: Deployed, run) -> None:
    journal = Journal(deployed.journal_table)
    key = record(journal, "A-1", State.ACCEPTED)

    result = run("forget", "--phone", PHONE, "--dry-run")

    assert result.code == 0, result.err
    assert "dry run: would forget phone +37529*****67" in result.out
    assert "sms_notification: 1 anonymised" in result.out
    assert journal.get(key).recipient == PHONE


def test_forget_needs_a_person_and_refuses_a_bad_phone_without_echoing_it(deployed: Deployed, run) -> None:
    assert run("forget", "--yes").code == 2
    result = run("forget", "--phone", "+99912", "--yes")
    assert result.code == 2 and "--phone" in result.err and "99912" not in result.err
