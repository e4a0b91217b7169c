"""journal show / unknown / resolve on records written by the SMS journal code the workers use."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import pytest
from aws_lambda_powertools import Metrics

from pipeline.observability import mask_phone
from pipeline.sms.gateways import FakeGateway
from pipeline.sms.journal import KEY_PREFIX, Draft, Finish, Journal, State, notification_key
from pipeline.sms.orders import Move, OrderState
from pipeline.sms.rules import load_rules
from pipeline.sms.settings import SmsSettings
from tests.unit.ops.support import Deployed

PHONE = "+375291234567"
ORDER_ID = "1000200030004"  # long enough to look like a phone number: must still print as is


def record(journal: Journal, order_id: str, final: State | None) -> str:
    """A notification taken through the journal's own transitions: pending -> sending -> `final`."""
    # Now: a notification older than its maximum age ends `expired` instead of being sent.
    moment = journal.clock.now()
    move = Move(f"crm:{order_id}", "ready", "packed", moment, moment)
    key = notification_key("order.status_changed", move.order_key, move.identity, "sms")
    first_entry = OrderState.first(move)
    journal.record_entry(
        first_entry,
        None,
        Draft(
            key=key,
            event_type="order.status_changed",
            order_id=move.order_key,
            transition=move.identity,
            crm_event_id=f"crm-event-{order_id}",
            channel="sms",
            recipient=PHONE,
            body=f"Order {order_id} is ready. Questions: {PHONE}",
            rule="ready",
            order_status="ready",
            previous_status="packed",
            occurred_at=moment,
            received_at=moment,
            correlation_id=f"corr-{order_id}",
        ),
    )
    if final is not None:
        assert journal.claim(key, "worker-1", from_states=(State.PENDING,)) is not None
        outcome = {
            "at": "2026-01-01T00:00:01.000000Z",
            "outcome": "timeout" if final is State.UNKNOWN else "ok",
        }
        assert journal.finish(key, "worker-1", Finish(state=final, attempt=outcome)) is not None
    return key


@pytest.fixture
def journal(deployed: Deployed) -> Journal:
    return Journal(deployed.journal_table)


def test_show_prints_the_record_with_the_phone_masked(journal: Journal, run) -> None:
    key = record(journal, ORDER_ID, State.UNKNOWN)

    result = run("journal", "show", key)

    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert f"key: {key}" in lines
    assert "state: unknown" in lines
    assert f"recipient: {mask_phone(PHONE)}" in lines
    assert f"order_id: crm:{ORDER_ID}" in lines
    assert PHONE not in result.out


def test_show_phone_prints_it_unmasked(journal: Journal, run) -> None:
    key = record(journal, ORDER_ID, State.UNKNOWN)

    result = run("journal", "show", key, "--show-phone")

    assert f"recipient: {PHONE}" in result.out.splitlines()


def test_show_unknown_key_is_a_clear_error(journal: Journal, run) -> None:
    result = run("journal", "show", "no-such-key")

    assert result.code == 2
    assert result.err == "error: no SMS journal record for key 'no-such-key'\n"


def test_unknown_lists_only_unknown_records(journal: Journal, run) -> None:
    unknown = {record(journal, order, State.UNKNOWN) for order in ("11", "12")}
    record(journal, "13", State.ACCEPTED)
    record(journal, "14", None)  # pending

    result = run("journal", "unknown")

    assert result.code == 0, result.err
    listed = {line.split()[0] for line in result.out.splitlines()[:-1]}
    assert listed == unknown
    assert result.out.splitlines()[-1] == "2 SMS record(s) in state unknown"
    assert f"recipient={mask_phone(PHONE)}" in result.out
    assert "last=timeout" in result.out
    assert "order=crm:11" in result.out and "order=crm:12" in result.out  # qualified by its CRM
    assert PHONE not in result.out


def test_resolve_accepted_closes_the_record(journal: Journal, run) -> None:
    key = record(journal, ORDER_ID, State.UNKNOWN)

    result = run("journal", "resolve", "--yes", key, "--accepted")

    assert result.code == 0, result.err
    assert "unknown -> accepted" in result.out
    saved = journal.get(key)
    assert saved is not None and saved.state is State.ACCEPTED
    assert list(journal.keys_in_state(State.UNKNOWN)) == []
    # Nobody can take it for another send.
    assert journal.claim(key, "worker-2", from_states=(State.PENDING, State.UNKNOWN)) is None


@dataclass
class Reconciler:
    """The scheduled reconciler on the deployed journal, sending through a fake gateway."""

    runtime: Any
    gateway: FakeGateway

    def run(self) -> Any:
        reconcile = importlib.import_module("pipeline.sms.reconcile")
        try:
            return reconcile.reconcile(self.runtime)
        finally:
            Metrics().clear_metrics()  # nobody flushes them here, as Lambda would


@pytest.fixture
def reconciler(journal: Journal, monkeypatch: pytest.MonkeyPatch) -> Reconciler:
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "TelegramCrmPipeline")
    service = importlib.import_module("pipeline.sms.service")
    gateway = FakeGateway(lookup_unknown=True)  # like End User Messaging: no lookup API
    settings = SmsSettings(journal_table=journal.table_name, gateway="fake")
    runtime = service.SmsRuntime(settings, load_rules(""), journal, gateway, journal.clock)
    return Reconciler(runtime, gateway)


def test_resolve_not_sent_has_the_next_reconciler_run_send_it_once_with_the_same_key(
    journal: Journal, run, reconciler: Reconciler
) -> None:
    key = record(journal, ORDER_ID, State.UNKNOWN)
    undecided = record(journal, "15", State.UNKNOWN)

    result = run("journal", "resolve", "--yes", key, "--not-sent")

    assert result.code == 0, result.err
    assert result.out == (
        f"SMS record {key!r}: unknown -> pending (resend requested: "
        "the reconciler's next scheduled run sends it once, with the same key)\n"
    )
    item = journal.table.get_item(Key={"id": KEY_PREFIX + key})["Item"]
    assert (item["state"], item["resend_requested_by"]) == ("pending", "operator")
    assert [k for k, _ in journal.keys_in_state(State.PENDING)] == [key]
    assert reconciler.gateway.calls == []  # the decision itself sends nothing

    first = reconciler.run()
    assert (first.requested, first.orphaned) == (1, 0)
    assert [sms.key for sms in reconciler.gateway.calls] == [key]
    sent = journal.get(key)
    assert sent is not None and sent.state is State.ACCEPTED
    assert sent.attempts[-1]["by"] == "reconciler"

    second = reconciler.run()
    assert second.requested == 0 and len(reconciler.gateway.calls) == 1
    undecided_record = journal.get(undecided)
    assert undecided_record is not None and undecided_record.state is State.UNKNOWN


def test_resolve_not_sent_then_a_live_redelivery_claims_first_and_the_reconciler_sends_nothing(
    journal: Journal, run, reconciler: Reconciler
) -> None:
    key = record(journal, ORDER_ID, State.UNKNOWN)
    assert run("journal", "resolve", "--yes", key, "--not-sent").code == 0

    # A CRM retry reached a worker first: one claim wins, exactly once.
    assert journal.claim(key, "worker-2", from_states=(State.PENDING,)) is not None
    assert journal.claim(key, "worker-3", from_states=(State.PENDING,)) is None

    report = reconciler.run()
    assert report.requested == 0 and reconciler.gateway.calls == []


REFUSALS = {
    "--accepted": "only unknown records can be marked accepted",
    "--not-sent": "only unknown or failed records can be sent again",
    "--abandon": "only unknown or failed records can be abandoned",
}


@pytest.mark.parametrize("mode", ["--yes", "--dry-run"])
@pytest.mark.parametrize("state", [State.ACCEPTED, None], ids=["accepted", "pending"])
@pytest.mark.parametrize("flag", sorted(REFUSALS))
def test_resolve_refuses_a_record_it_cannot_decide_and_a_dry_run_says_so_too(
    journal: Journal, run, state: State | None, flag: str, mode: str
) -> None:
    key = record(journal, ORDER_ID, state)
    before = journal.get(key)

    result = run("journal", "resolve", mode, key, flag)

    expected = (state or State.PENDING).value
    assert result.code == 2
    assert result.err == f"error: SMS record '{key}' is '{expected}': {REFUSALS[flag]}\n"
    assert journal.get(key) == before


def test_a_dry_run_of_a_decision_that_applies_changes_nothing(journal: Journal, run) -> None:
    key = record(journal, ORDER_ID, State.UNKNOWN)
    before = journal.get(key)

    result = run("journal", "resolve", "--dry-run", key, "--accepted")

    assert result.code == 0
    assert "would resolve SMS record" in result.out
    assert journal.get(key) == before


def test_resolve_twice_is_refused_the_second_time(journal: Journal, run) -> None:
    key = record(journal, ORDER_ID, State.UNKNOWN)

    assert run("journal", "resolve", "--yes", key, "--not-sent").code == 0
    second = run("journal", "resolve", "--yes", key, "--accepted")

    assert second.code == 2
    assert "is 'pending': only unknown records can be marked accepted" in second.err


def test_resolve_not_sent_of_a_failed_record_sends_it_once_with_a_fresh_attempt_budget(
    journal: Journal, run, reconciler: Reconciler
) -> None:
    key = record(journal, ORDER_ID, State.FAILED)

    result = run("journal", "resolve", "--yes", key, "--not-sent")

    assert result.code == 0, result.err
    assert f"SMS record {key!r}: failed -> pending (resend requested" in result.out
    assert reconciler.run().requested == 1
    assert [sms.key for sms in reconciler.gateway.calls] == [key]
    sent = journal.get(key)
    assert sent is not None and sent.state is State.ACCEPTED and sent.attempts_this_round == 1
    assert reconciler.run().requested == 0 and len(reconciler.gateway.calls) == 1


@pytest.mark.parametrize("state", [State.UNKNOWN, State.FAILED])
def test_resolve_abandon_closes_the_record_unsent_and_out_of_the_alarms(
    journal: Journal, run, reconciler: Reconciler, state: State
) -> None:
    key = record(journal, ORDER_ID, state)

    result = run("journal", "resolve", "--yes", key, "--abandon")

    assert result.code == 0, result.err
    assert f"SMS record {key!r}: {state.value} -> failed (abandoned" in result.out
    abandoned = journal.get(key)
    assert abandoned is not None and abandoned.state is State.FAILED and abandoned.abandoned_at is not None
    assert list(journal.keys_in_state(State.UNKNOWN)) == list(journal.keys_in_state(State.FAILED)) == []
    # Nobody sends it: not the reconciler, not an operator changing their mind.
    assert reconciler.run().requested == 0 and reconciler.gateway.calls == []
    again = run("journal", "resolve", "--yes", key, "--not-sent")
    assert again.code == 2 and "is 'abandoned'" in again.err


def test_resolve_of_a_missing_record(journal: Journal, run) -> None:
    result = run("journal", "resolve", "--yes", "no-such-key", "--accepted")

    assert result.code == 2
    assert result.err == "error: no SMS journal record for key 'no-such-key'\n"


def test_resolve_needs_exactly_one_decision(journal: Journal, run) -> None:
    for flags in ((), ("--accepted", "--not-sent")):
        with pytest.raises(SystemExit) as exit_info:
            run("journal", "resolve", "--yes", "some-key", *flags)
        assert exit_info.value.code == 2
