"""A notification's identity is the business transition, not the delivery (issue 9, section 1).

Each test replays a sequence a shop meets with a real CRM: the same change under new ids, a
second press, real trips back and forth between statuses, an id reused for another change, a
delayed event, and a crash between recording the order's new status and the gateway call.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from pipeline.sms.gateways import SimulatedCrash
from pipeline.sms.journal import State
from pipeline.sms.orders import Move, observe
from tests.unit.consumer_support import Output, crm_envelope
from tests.unit.sms.conftest import PHONE, SmsHarness, key_of, order_event, recent

READY = "Olga Ivanova, your order ORD-7 is ready for pickup."
SHIPPED = "Olga Ivanova, your order ORD-7 has been shipped."


def at(minute: int) -> str:
    return recent(minute)


def replay(sms: SmsHarness, *events: dict[str, Any]) -> None:
    """Each event through the webhook's publication and one worker invocation."""
    for event in events:
        sms.publish(event)
        sms.deliver()


def test_the_same_transition_under_new_delivery_ids_sends_one_sms(sms: SmsHarness) -> None:
    first = order_event("ready_for_pickup", "assembling", order_id="ORD-7", occurred_at=at(0))
    # The CRM lost our 200 and retried under a new id; SNS delivered one of them twice.
    retried = {**first, "event_id": "evt-retry-1"}
    retried_again = {**first, "event_id": "evt-retry-2"}
    replay(sms, first, retried, retried_again)
    sms.forget_idempotency()  # days later, with Powertools' records gone: the journal alone
    replay(sms, {**first, "event_id": "evt-retry-3"})

    assert sms.fake.texts_to(PHONE) == [READY]
    assert [record["state"] for record in sms.journal_records()] == ["accepted"]


def test_a_manager_pressing_ready_twice_sends_one_sms(sms: SmsHarness) -> None:
    press = order_event("ready_for_pickup", "assembling", order_id="ORD-7", occurred_at=at(0))
    second_press = order_event("ready_for_pickup", "assembling", order_id="ORD-7", occurred_at=at(1))
    replay(sms, press, second_press)

    assert sms.fake.texts_to(PHONE) == [READY]
    state = sms.service.runtime().journal.get_order("crm:ORD-7")
    assert (state.status, state.entry) == ("ready_for_pickup", 1)  # one entry, seen twice
    assert state.seen_at.minute == 1


def test_each_real_entry_into_a_status_with_a_rule_sends_exactly_one_sms(sms: SmsHarness) -> None:
    # assembling -> ready (SMS), ready -> assembling (no rule), assembling -> ready (SMS again).
    ready = order_event("ready_for_pickup", "assembling", order_id="ORD-7", occurred_at=at(0))
    back = order_event("assembling", "ready_for_pickup", order_id="ORD-7", occurred_at=at(5))
    ready_again = order_event("ready_for_pickup", "assembling", order_id="ORD-7", occurred_at=at(9))
    replay(sms, ready, back, ready_again)
    assert sms.fake.texts_to(PHONE) == [READY, READY]
    assert [call.key for call in sms.fake.calls] == [key_of(ready), key_of(ready_again)]

    # The CRM resends all three under new ids, in and out of order: nothing more.
    sms.forget_idempotency()
    replay(
        sms,
        {**ready_again, "event_id": "evt-r3"},
        {**ready, "event_id": "evt-r1"},
        {**back, "event_id": "evt-r2"},
    )
    assert sms.fake.texts_to(PHONE) == [READY, READY]
    assert sorted(record["state"] for record in sms.journal_records()) == ["accepted", "accepted"]


def test_an_event_id_reused_for_another_transition_never_silences_it(sms: SmsHarness) -> None:
    ready = order_event(
        "ready_for_pickup", "assembling", event_id="evt-1", order_id="ORD-7", occurred_at=at(0)
    )
    shipped = order_event(
        "shipped", "ready_for_pickup", event_id="evt-1", order_id="ORD-7", occurred_at=at(30)
    )
    replay(sms, ready, shipped)

    assert sms.fake.texts_to(PHONE) == [READY, SHIPPED]
    assert sms.worker.counts["duplicate"] == 0  # the second change was not taken for the first


def test_a_stale_event_sends_nothing_and_says_so(sms: SmsHarness, output: Callable[[Any], Output]) -> None:
    captured = output(sms.worker)
    shipped = order_event("shipped", "ready_for_pickup", order_id="ORD-7", occurred_at=at(30))
    # `ready_for_pickup` happened first, but its webhook was delayed past `shipped`.
    delayed_ready = order_event("ready_for_pickup", "assembling", order_id="ORD-7", occurred_at=at(0))
    replay(sms, shipped, delayed_ready)

    assert sms.fake.texts_to(PHONE) == [SHIPPED]
    assert sms.worker.last_outcome.status == "processed"  # acknowledged, not retried or dead-lettered
    [warning] = captured.logs("Stale order event: the order has moved on, no SMS")
    assert warning["order"] == "crm:ORD-7" and "status 'shipped'" in warning["reason"]
    [metric] = captured.emf("SmsStaleEvents")
    assert metric["SmsStaleEvents"] == [1.0]
    state = sms.service.runtime().journal.get_order("crm:ORD-7")
    assert (state.status, state.entry) == ("shipped", 1)  # the stale event changed nothing


def test_a_crm_transition_id_names_the_transition(sms: SmsHarness) -> None:
    ready = order_event(
        "ready_for_pickup", "assembling", order_id="ORD-7", occurred_at=at(0), transition_id="h-1"
    )
    # The same history entry sent again, even with another timestamp: the same transition.
    resent = {**ready, "event_id": "evt-resent", "occurred_at": at(2)}
    # A new history entry into the status the order is in: it left and came back, and the CRM
    # (which sends webhooks for some statuses only) did not report the exit.
    came_back = order_event(
        "ready_for_pickup", "assembling", order_id="ORD-7", occurred_at=at(20), transition_id="h-7"
    )
    replay(sms, ready, resent, came_back)

    assert sms.fake.texts_to(PHONE) == [READY, READY]
    assert [call.key for call in sms.fake.calls] == [key_of(ready), key_of(came_back)]


@pytest.mark.filterwarnings("ignore:No application metrics")  # the crashed invocation
def test_a_crash_after_the_order_state_is_saved_still_sends_exactly_once(
    sms: SmsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = sms.service.runtime().journal
    claim = journal.claim
    crashes = []

    def die_once(*args: Any, **kwargs: Any) -> Any:
        if not crashes:
            crashes.append(args)
            raise SimulatedCrash("the worker died between the journal write and the gateway call")
        return claim(*args, **kwargs)

    monkeypatch.setattr(journal, "claim", die_once)
    event = order_event("ready_for_pickup", "assembling", order_id="ORD-7", occurred_at=at(0))
    sms.publish(event)
    with pytest.raises(SimulatedCrash):
        sms.deliver()
    assert sms.record(event).state is State.PENDING and sms.fake.calls == []

    sms.forget_idempotency()  # Powertools' in-progress record expires with the Lambda's timeout
    sms.make_visible()
    sms.deliver()  # the redelivery finds the order already in the status: the same entry, the same key
    assert sms.fake.texts_to(PHONE) == [READY]
    assert sms.record(event).state is State.ACCEPTED


@pytest.mark.parametrize(
    ("events", "kinds"),
    [
        # (status, minute, transition_ref): what each event is, given the ones before it.
        (
            [("a", 0, None), ("a", 1, None), ("b", 2, None), ("a", 3, None)],
            ["entered", "repeat", "entered", "entered"],
        ),
        ([("b", 5, None), ("a", 1, None)], ["entered", "stale"]),
        ([("a", 5, None), ("a", 1, None)], ["entered", "repeat"]),  # a second press arriving late
        ([("a", 0, None), ("b", 0, None)], ["entered", "entered"]),  # one instant: arrival order
        (
            [("a", 0, "h1"), ("a", 9, "h1"), ("a", 10, "h2"), ("a", 4, "h3")],
            ["entered", "repeat", "entered", "stale"],
        ),
    ],
)
def test_an_events_place_in_the_orders_history(
    events: list[tuple[str, int, str | None]], kinds: list[str]
) -> None:
    state = None
    seen = []
    for status, minute, ref in events:
        moment = datetime(2026, 1, 15, 10, minute, tzinfo=UTC)
        observation = observe(state, Move("crm:O", status, None, moment, moment, ref))
        seen.append(observation.kind)
        state = observation.new_state or state
    assert seen == kinds


@pytest.mark.parametrize("with_notification", [False, True], ids=["state only", "state and notification"])
def test_of_two_writers_deciding_on_the_same_order_state_one_wins(
    sms: SmsHarness, with_notification: bool
) -> None:
    """Both read the order in `assembling`; each decides on a new entry; only the first write holds
    (a plain conditional put without a notification, one transaction with it), and the other
    re-reads and decides again."""
    journal = sms.service.runtime().journal
    replay(sms, order_event("assembling", "paid", order_id="ORD-7", occurred_at=at(0)))
    seen = journal.get_order("crm:ORD-7")
    payload = order_event("ready_for_pickup", "assembling", order_id="ORD-7", occurred_at=at(5))
    event = sms.service.CrmEvent.parse(payload)
    observation = sms.service.observe(seen, sms.service.move_of(crm_envelope(payload).envelope, event))
    assert observation.kind == "entered" and observation.new_state is not None
    draft = None
    if with_notification:
        envelope = crm_envelope(order_event("ready_for_pickup", "assembling", order_id="ORD-7")).envelope
        draft = sms.service.plan(envelope, observation, event, sms.service.runtime().rules)

    assert journal.record_entry(observation.new_state, seen.version, draft) is True
    assert journal.record_entry(observation.new_state, seen.version, draft) is False
    saved = journal.get_order("crm:ORD-7")
    assert (saved.status, saved.entry, saved.version) == ("ready_for_pickup", 2, seen.version + 1)


def test_history_records_of_one_second_are_ordered_by_the_crms_record_ids() -> None:
    """A→B→A→B within one second, read from Bitrix24's stage history: ids `bitrix24:stagehistory:N`
    order moves the stamps cannot (a clamped stamp: the CRM's ids alone decide)."""
    second = datetime(2026, 12, 2, 10, 0, 0, tzinfo=UTC)
    received = datetime(2026, 12, 2, 9, 0, 0, tzinfo=UTC)  # the stamp is from the future: clamped

    def move(status: str, previous: str, record: int) -> Move:
        return Move("bitrix24:42", status, previous, second, received, f"bitrix24:stagehistory:{record}")

    state = observe(None, move("ready_for_pickup", "processing", 12)).new_state
    assert state is not None
    late = observe(state, move("cancelled", "new", 9))  # an older record arriving late
    assert late.kind == "stale"
    later = observe(state, move("processing", "ready_for_pickup", 13))
    assert later.kind == "entered"
