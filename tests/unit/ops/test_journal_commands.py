"""journal show / unknown / resolve on records written by the SMS journal code the workers use."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pipeline.observability import mask_phone
from pipeline.sms.journal import Draft, Finish, Journal, State, notification_key
from tests.unit.ops.support import Deployed

PHONE = "+375291234567"
ORDER_ID = "1000200030004"  # long enough to look like a phone number: must still print as is


def record(journal: Journal, order_id: str, final: State | None) -> str:
    """A notification taken through the journal's own transitions: pending -> sending -> `final`."""
    key = notification_key("order.status_changed", order_id, f"crm-event-{order_id}", "sms", PHONE)
    journal.create(
        Draft(
            key=key,
            event_type="order.status_changed",
            order_id=order_id,
            transition_id=f"crm-event-{order_id}",
            channel="sms",
            recipient=PHONE,
            body=f"Order {order_id} is ready. Questions: {PHONE}",
            rule="ready",
            order_status="ready",
            previous_status="packed",
            occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
            received_at=datetime(2026, 1, 1, tzinfo=UTC),
            correlation_id=f"corr-{order_id}",
        )
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
    assert f"order_id: {ORDER_ID}" in lines
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
    assert PHONE not in result.out


def test_resolve_accepted_closes_the_record(journal: Journal, run) -> None:
    key = record(journal, ORDER_ID, State.UNKNOWN)

    result = run("journal", "resolve", key, "--accepted")

    assert result.code == 0, result.err
    assert "unknown -> accepted" in result.out
    saved = journal.get(key)
    assert saved is not None and saved.state is State.ACCEPTED
    assert list(journal.keys_in_state(State.UNKNOWN)) == []
    # Nobody can take it for another send.
    assert journal.claim(key, "worker-2", from_states=(State.PENDING, State.UNKNOWN)) is None


def test_resolve_not_sent_lets_it_be_sent_once_more_with_the_same_key(journal: Journal, run) -> None:
    key = record(journal, ORDER_ID, State.UNKNOWN)

    result = run("journal", "resolve", key, "--not-sent")

    assert result.code == 0, result.err
    assert "unknown -> pending" in result.out
    assert [k for k, _ in journal.keys_in_state(State.PENDING)] == [key]
    assert list(journal.keys_in_state(State.UNKNOWN)) == []
    # A worker can claim it at once, exactly once.
    assert journal.claim(key, "worker-2", from_states=(State.PENDING,)) is not None
    assert journal.claim(key, "worker-3", from_states=(State.PENDING,)) is None


@pytest.mark.parametrize("state", [State.ACCEPTED, None], ids=["accepted", "pending"])
@pytest.mark.parametrize("flag", ["--accepted", "--not-sent"])
def test_resolve_refuses_a_record_that_is_not_unknown(
    journal: Journal, run, state: State | None, flag: str
) -> None:
    key = record(journal, ORDER_ID, state)
    before = journal.get(key)

    result = run("journal", "resolve", key, flag)

    expected = (state or State.PENDING).value
    assert result.code == 2
    assert result.err == (
        f"error: SMS record '{key}' is '{expected}', not 'unknown': only unknown records can be resolved\n"
    )
    assert journal.get(key) == before


def test_resolve_twice_is_refused_the_second_time(journal: Journal, run) -> None:
    key = record(journal, ORDER_ID, State.UNKNOWN)

    assert run("journal", "resolve", key, "--not-sent").code == 0
    second = run("journal", "resolve", key, "--accepted")

    assert second.code == 2
    assert "is 'pending', not 'unknown'" in second.err


def test_resolve_of_a_missing_record(journal: Journal, run) -> None:
    result = run("journal", "resolve", "no-such-key", "--accepted")

    assert result.code == 2
    assert result.err == "error: no SMS journal record for key 'no-such-key'\n"


def test_resolve_needs_exactly_one_decision(journal: Journal, run) -> None:
    for flags in ((), ("--accepted", "--not-sent")):
        with pytest.raises(SystemExit) as exit_info:
            run("journal", "resolve", "some-key", *flags)
        assert exit_info.value.code == 2
