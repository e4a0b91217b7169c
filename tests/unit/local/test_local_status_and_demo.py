"""Status lines and counters the local runtime shows, and the demo's real-shaped requests."""

from __future__ import annotations

import json

import pytest
from aiogram.types import Update

from local.demo import crm_events, summary_lines, telegram_updates
from local.status import MISSING, FunctionStatus, QueueDepth
from local.status_views import drained
from pipeline.crm.event_model import CrmEvent
from pipeline.telegram import TelegramUpdate, update_type


def test_counters_fold_the_worker_outcomes_across_invocations() -> None:
    status = FunctionStatus("crm", "consumer")
    status.apply({"event": "state", "state": "ready"})
    status.apply({"event": "busy", "records": 2})
    assert status.busy
    status.apply({"event": "invocation", "records": 2, "failed": 1, "outcomes": {"processed": 1, "retry": 1}})
    status.apply({"event": "invocation", "records": 1, "failed": 0, "outcomes": {"duplicate": 1}})

    assert not status.busy
    assert (status.processed, status.retried, status.duplicates, status.invocations) == (1, 1, 1, 2)


def test_without_worker_outcomes_failed_records_count_as_retried() -> None:
    status = FunctionStatus("plain", "consumer")
    status.apply({"event": "invocation", "records": 3, "failed": 1, "outcomes": None})

    assert (status.processed, status.retried) == (2, 1)


def test_a_dlq_that_is_not_empty_raises_the_alarm_in_line_and_json() -> None:
    status = FunctionStatus("autoreply", "consumer", state="ready")
    status.queue, status.dlq = QueueDepth(visible=2, in_flight=1), QueueDepth()
    assert not status.alarm and "ALARM" not in status.line()

    status.dlq = QueueDepth(visible=1)

    assert status.alarm
    assert status.line().endswith("ALARM")
    assert "queue 3" in status.line()
    assert status.as_dict()["dlq_depth"] == 1 and status.as_dict()["alarm"] is True


def test_a_missing_handler_is_shown_with_its_reason() -> None:
    status = FunctionStatus("sms", "consumer")
    status.apply({"event": "state", "state": MISSING, "detail": "no module sms.app (functions/sms/)"})

    assert MISSING in status.line() and "sms.app" in status.line()
    lines = summary_lines({"sms": {**status.as_dict(), "queue_depth": 4}}, {})
    assert any("missing handler" in line and "queue 4" in line for line in lines)


def test_drained_can_be_asked_of_some_consumers_while_others_hold_a_batching_window() -> None:
    reply, store = FunctionStatus("autoreply", "consumer", state="ready"), FunctionStatus("store", "consumer")
    reply.queue, store.queue = QueueDepth(), QueueDepth(in_flight=3)  # store gathering its window
    functions = {"autoreply": reply, "store": store}

    assert not drained(functions)
    assert drained(functions, only=["autoreply"])
    assert not drained(functions, only=["autoreply", "store"])
    reply.apply({"event": "busy", "records": 1})
    assert not drained(functions, only=["autoreply"])
    with pytest.raises(ValueError, match="autorepyl"):
        drained(functions, only=["autorepyl"])


def test_demo_updates_are_valid_telegram_updates_of_the_promised_kinds() -> None:
    updates = telegram_updates(now=1_700_000_000)

    kinds = []
    for _, update in updates:
        Update.model_validate(update)
        kinds.append(update_type(TelegramUpdate.parse(update)))
    chat_types = {update["message"]["chat"]["type"] for _, update in updates if "message" in update}
    ids = [update["update_id"] for _, update in updates]

    assert {"message", "callback_query", "edited_message", "my_chat_member"} <= set(kinds)
    assert {"private", "supergroup"} <= chat_types
    assert len(ids) - len(set(ids)) == 2  # two resends with the same update_id
    assert updates[0][1]["message"]["text"] == "/start"


def test_demo_crm_events_are_valid_and_include_a_resend() -> None:
    events = [event for _, event in crm_events()]

    for event in events:
        CrmEvent.parse(json.loads(json.dumps(event)))
    assert len({event["event_id"] for event in events}) == len(events) - 1
