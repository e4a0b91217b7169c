"""The catch-up sweep against the CRM stand-ins over HTTP, on a simulated clock (`bench.sweep_stand`):
a long outage converges over runs with a cursor that never goes back, a row deleted mid-paging
skips nothing, a row visible late is read on the next run, and (Hypothesis) any interleaving of
those with small time budgets texts every move once. The stand-ins enforce the vendors'
documented rate limits; the consumer's real sync reads every look.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.sweep_stand import SimClock, Stand
from pipeline import aws
from pipeline.crm.sweep import SAFETY_MARGIN_SECONDS
from tests.unit.consumer_support import JOURNAL_TABLE

START = 1_790_000_000.0
WEEK = 7 * 86400
CRMS = ("bitrix24", "amocrm")
STAND_ENV = (
    "SMS_MAX_AGE_SECONDS",
    "CRM_SWEEP_OVERLAP_SECONDS",
    "CRM_SWEEP_PERIOD_SECONDS",
    "JOURNAL_TABLE",
    "PHONE_DEFAULT_REGION",
    "BITRIX24_STAGES",
    "AMOCRM_STATUSES",
    "EVENTS_TOPIC_ARN",
)


@pytest.fixture
def stand_env(moto_aws: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The stand sets its environment; each key is restored after the test."""
    for name in STAND_ENV:
        monkeypatch.setenv(name, "")
    yield


def new_stand(crm: str, *, timeout: float = 120.0, table: str = JOURNAL_TABLE) -> Stand:
    return Stand(crm, SimClock(START), timeout, table=table).start(max_age_seconds=WEEK + 86400)


def progress(crm: str, run: Any) -> tuple[float, float, float]:
    """How far a run's cursor got, in an order that only grows when it goes forward: history
    known read, then (Bitrix24) the last ID of a scan, or (amoCRM) how far down a pass went."""
    read_to = run.read_to.timestamp() if run.read_to else -math.inf
    position = run.position or {}
    if crm == "bitrix24":
        return read_to, float(position.get("since") or 0), float(position.get("after") or 0)
    if position.get("high") is None:
        return read_to, -math.inf, 0.0
    return read_to, -float(position["upper"]), float(position.get("page", 1))


def assert_every_move_texted_once(stand: Stand) -> None:
    texted = stand.texted()
    missing = [ref for ref in stand.moves if texted[ref] != 1]
    assert missing == [], f"{len(missing)} of {len(stand.moves)} moves not texted exactly once"


def outage(stand: Stand, orders: int, seconds: float = WEEK) -> None:
    """`orders` orders created and moved, evenly over `seconds`, no webhook arriving."""
    for _ in range(orders):
        stand.clock.sleep(seconds / orders)
        order = stand.new_order()
        stand.clock.sleep(1)
        stand.move(order)


@pytest.mark.parametrize("crm", CRMS)
def test_a_long_outage_that_one_run_cannot_read_converges_over_runs_with_a_monotone_cursor(
    stand_env: None, crm: str
) -> None:
    # Each run has 4 s beyond its safety margin: 8 Bitrix24 requests, 28 amoCRM ones.
    stand = new_stand(crm, timeout=SAFETY_MARGIN_SECONDS + 4)
    try:
        stand.run_sweep()
        outage(stand, 300 if crm == "bitrix24" else 900)
        stand.catch_up(period_seconds=300, max_runs=200)
        catch_up = stand.runs[1:]
        assert not catch_up[0].swept.caught_up  # one run could not read it all
        assert len(catch_up) > 2
        steps = [progress(crm, run) for run in stand.runs]
        assert steps == sorted(steps), "the cursor went back"
        assert all(run.swept.pages > 0 for run in catch_up)
        assert_every_move_texted_once(stand)
        assert stand.fake.rate_limit.refused == 0 or stand.consumer_calls_refused > 0
    finally:
        stand.stop()


def test_the_sweep_never_passes_the_vendor_rate_limit(stand_env: None) -> None:
    """The stand-in refuses past the documented limit (503 QUERY_LIMIT_EXCEEDED); the sweep's own
    reads are paced under it, so every refusal was the consumer's."""
    stand = new_stand("bitrix24")
    try:
        stand.run_sweep()
        outage(stand, 300, seconds=86400)
        refused_before = stand.consumer_calls_refused
        stand.catch_up(period_seconds=300, max_runs=50)
        calls = [call for call in stand.fake.calls() if "stagehistory" in call["path"]]
        sweep_calls = [call for call in calls if (call["body"] or {}).get("start") == -1]
        assert sweep_calls and all(call["fault"] is None for call in sweep_calls)
        assert stand.consumer_calls_refused >= refused_before
        assert_every_move_texted_once(stand)
    finally:
        stand.stop()


@pytest.mark.parametrize("crm", CRMS)
def test_a_row_deleted_while_the_sweep_pages_skips_no_other_row(stand_env: None, crm: str) -> None:
    """Offset paging (Bitrix24's `start`, amoCRM's `page`) would shift every row after the deleted
    one a place up, and the first row of the next page would never be read."""
    stand = new_stand(crm)
    try:
        stand.run_sweep()
        outage(stand, 160, seconds=3600)
        history = stand.history()
        rows = list(history.written)
        # Bitrix24 reads oldest first, amoCRM newest first: delete a row the first page read.
        victim = rows[0] if crm == "bitrix24" else rows[-1]

        def delete_once() -> None:
            history.after_query = None
            history.delete(victim)

        history.after_query = delete_once
        stand.forget(f"bitrix24:stagehistory:{victim}" if crm == "bitrix24" else f"amocrm:event:{victim}")
        stand.catch_up(period_seconds=300, max_runs=20)
        assert history.after_query is None  # it did delete
        assert_every_move_texted_once(stand)
    finally:
        stand.stop()


@pytest.mark.parametrize("crm", CRMS)
def test_a_row_that_becomes_visible_late_is_read_on_the_next_run(stand_env: None, crm: str) -> None:
    stand = new_stand(crm)
    try:
        stand.run_sweep()
        orders = [stand.new_order() for _ in range(3)]
        stand.clock.sleep(60)
        history = stand.history()
        history.hide_new = True  # its transaction commits late
        stand.move(orders[0])
        history.hide_new = False
        stand.move(orders[1])
        stand.move(orders[2])
        stand.clock.sleep(5)
        stand.run_sweep()
        late = next(ref for ref in stand.moves if stand.texted()[ref] == 0)
        assert history.reveal() == 1
        stand.clock.sleep(300)
        stand.catch_up(period_seconds=300, max_runs=5)
        assert stand.texted()[late] == 1
        assert_every_move_texted_once(stand)
    finally:
        stand.stop()


# -- any interleaving ----------------------------------------------------------------------------------
OPERATION = st.one_of(
    st.tuples(st.just("move"), st.integers(0, 5)),
    st.tuples(st.just("new"), st.just(0)),
    st.tuples(st.just("late"), st.integers(0, 5)),
    st.tuples(st.just("delete"), st.integers(0, 10**6)),
    st.tuples(st.just("wait"), st.integers(1, 20)),
    st.tuples(st.just("sweep"), st.integers(0, 4)),
)


@pytest.mark.parametrize("crm", CRMS)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=st.lists(OPERATION, min_size=5, max_size=40))
def test_any_interleaving_of_moves_deletions_late_rows_and_short_runs_texts_every_move_once(
    stand_env: None, crm: str, operations: list[tuple[str, int]]
) -> None:
    table = f"journal-{uuid.uuid4().hex[:8]}"
    aws.client("dynamodb").create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    stand = new_stand(crm, table=table)
    history = stand.history()
    prefix = "bitrix24:stagehistory:" if crm == "bitrix24" else "amocrm:event:"
    try:
        stand.run_sweep()
        orders = [stand.new_order()]
        steps = [0]
        for kind, value in operations:
            history.reveal()  # a late row commits by the next step (within the overlap)
            if kind == "new":
                orders.append(stand.new_order())
                steps.append(0)
            elif kind in ("move", "late"):
                index = value % len(orders)
                history.hide_new = kind == "late"
                stand.move(orders[index], steps[index])
                history.hide_new = False
                steps[index] += 1
            elif kind == "delete":
                visible = [row for row in history.written if f"{prefix}{row}" in stand.moves]
                if visible:
                    victim = visible[value % len(visible)]
                    history.delete(victim)
                    stand.forget(f"{prefix}{victim}")
            elif kind == "wait":
                stand.clock.sleep(value)
            else:
                stand.run_sweep(timeout_seconds=SAFETY_MARGIN_SECONDS + value)
        history.reveal()
        stand.clock.sleep(120)
        stand.catch_up(period_seconds=300, max_runs=30)
        steps_taken = [progress(crm, run) for run in stand.runs]
        assert steps_taken == sorted(steps_taken), "the cursor went back"
        # Every move was looked at (handled by the consumer: texted, or no transition once a
        # deletion left two records of one status side by side), none texted twice.
        assert stand.unhandled() == []
        assert all(count == 1 for count in stand.texted().values())
    finally:
        stand.stop()
