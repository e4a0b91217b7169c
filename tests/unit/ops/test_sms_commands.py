"""`ops sms opt-out PHONE` / `opt-in PHONE`: the suppression list item, the number masked."""

from __future__ import annotations

from pipeline.observability import mask_phone
from pipeline.sms import endstates
from pipeline.sms.journal import Journal
from tests.unit.ops.support import Deployed

PHONE = "+375291234567"


def test_opt_out_puts_the_number_on_the_list_and_opt_in_takes_it_off(deployed: Deployed, run) -> None:
    journal = Journal(deployed.journal_table)

    result = run("sms", "opt-out", PHONE)

    assert result.code == 0, result.err
    assert mask_phone(PHONE) in result.out and PHONE not in result.out + result.err
    assert endstates.opted_out(journal, PHONE)
    item = journal.table.get_item(Key={"id": endstates.suppression_id(PHONE)})["Item"]
    assert item["schema_version"] == 1 and PHONE not in str(item)  # the number is not stored
    assert "already" in run("sms", "opt-out", PHONE).out

    result = run("sms", "opt-in", PHONE)

    assert result.code == 0 and not endstates.opted_out(journal, PHONE)
    assert "was not opted out" in run("sms", "opt-in", PHONE).out


def test_opt_out_refuses_what_is_not_a_number(deployed: Deployed, run) -> None:
    result = run("sms", "opt-out", "375-29-123")
    assert result.code != 0 and "E.164" in result.err
