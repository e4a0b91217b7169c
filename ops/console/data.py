"""What the console's pages show, read through the ops CLI's own functions where it has them.

`Where` says where the pipeline is (the running `make local`'s state file, or a deployed stack
with the user's credentials) and makes the `Context` every CLI command gets, so an action from
the page runs the very command function the CLI runs (`ops.dlq.redrive`, `ops.journal.resolve`):
the same checks, the same confirmation text (its dry run is the question the page asks), the
same lines printed (the page shows them, and the console prints them as its audit trail).
"""

from __future__ import annotations

import argparse
import io
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from infra.outputs import OutputKey
from ops import dlq, journal
from ops.console import events
from ops.context import Context
from ops.errors import OpsError
from ops.stack import StackOutputs
from pipeline import aws
from pipeline.observability import mask_phones
from pipeline.registry import CONSUMERS, Consumer
from pipeline.telegram_bot.state import BY_CHAT_INDEX, CHAT_ATTRIBUTE, conversation_chat

# How many of a chat's latest bot steps the conversation view lists, with their Bot API calls.
BOT_STEPS = 5
BOT_CALLS_PER_STEP = 20


@dataclass
class Where:
    """The pipeline the console reads: `local` (with its state file) or the stack `stack_name`."""

    local: bool
    local_file: Path
    stack_name: str
    _stack: StackOutputs | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        return f"make local ({self.local_file})" if self.local else f"stack {self.stack_name}"

    def context(self, **options: Any) -> Context:
        """A CLI command's Context, its output captured (`output`)."""
        namespace = argparse.Namespace(
            stack=self.stack_name, region=None, local=self.local, local_file=str(self.local_file), **options
        )
        ctx = Context(namespace, out=io.StringIO())
        if self._stack is None or self.local:  # a restarted `make local` writes a new file
            self._stack = ctx.stack()
        ctx._stack = self._stack
        return ctx

    def stack(self) -> StackOutputs:
        return self.context().stack()

    def local_state(self) -> dict[str, Any]:
        try:
            data = json.loads(self.local_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise OpsError(f"cannot read {self.local_file}: {error}") from error
        return data if isinstance(data, dict) else {}

    def consumers(self) -> list[Consumer]:
        deployed = {queues.consumer for queues in self.stack().consumer_queues()}
        return [c for c in CONSUMERS if c.name in deployed]

    def log_records(self) -> list[dict[str, Any]]:
        if self.local:
            logs = self.local_state().get("logs")
            return events.local_records(Path(str(logs))) if logs else []
        return events.cloudwatch_records(events.stack_log_groups(self.stack_name))


def output(ctx: Context) -> list[str]:
    out = ctx.out
    return out.getvalue().splitlines() if isinstance(out, io.StringIO) else []


def masked(value: Any) -> str:
    """Free text (a reason, an error, state data) for the page: every phone-looking number masked."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return mask_phones(text)


def masked_id(value: Any) -> str:
    """An id, a key, a time or a CLI line for the page: +international numbers masked, as
    `ops journal` prints them (long digit runs of ids stay readable)."""
    return journal.mask_international(value if isinstance(value, str) else str(value))


# -- events ----------------------------------------------------------------------------------------
def dead_letters(where: Where, consumers: Iterable[Consumer]) -> dict[tuple[str, str], dict[str, Any]]:
    """(consumer, event id) -> the DLQ message holding it, from the DLQs that hold any (peek)."""
    held: dict[tuple[str, str], dict[str, Any]] = {}
    stack = where.stack()
    for row in dlq.dlq_rows(stack):
        if not (row["dlq_depth"] or row["in_flight"]):
            continue
        _, shown = dlq.peek_messages(stack, row["consumer"], limit=dlq.SQS_BATCH * 5)
        for message in shown:
            if message["event_id"]:
                held[(row["consumer"], message["event_id"])] = message
    return held


def event_paths(where: Where, filters: events.Filters) -> list[events.EventPath]:
    consumers = where.consumers()
    return events.event_paths(where.log_records(), consumers, dead_letters(where, consumers), filters)


# -- consumers -------------------------------------------------------------------------------------
def consumer_rows(where: Where) -> list[dict[str, Any]]:
    """Per consumer: queue depth, in flight, oldest age, DLQ depth, failing, last error."""
    stack, now = where.stack(), datetime.now(UTC)
    functions = where.local_state().get("functions") or {} if where.local else {}
    latest = _latest_outcomes(where.log_records())
    rows = []
    dlqs = {row["consumer"]: row for row in dlq.dlq_rows(stack)}
    for queues in stack.consumer_queues():
        attributes = aws.client("sqs").get_queue_attributes(
            QueueUrl=queues.queue_url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        )["Attributes"]
        visible = int(attributes.get("ApproximateNumberOfMessages", 0))
        in_flight = int(attributes.get("ApproximateNumberOfMessagesNotVisible", 0))
        delayed = int(attributes.get("ApproximateNumberOfMessagesDelayed", 0))
        age = dlq._age_from_metric(queues.queue_url, now) if visible else None
        status = functions.get(queues.consumer) or {}
        outcome = latest.get(queues.consumer)
        failing = bool(status.get("failing")) or (outcome is not None and outcome[0] != events.PROCESSED)
        last_error = status.get("last_error") or (outcome[1] if outcome else None)
        row = dlqs.get(queues.consumer) or {}
        rows.append(
            {
                "consumer": queues.consumer,
                "queue_depth": visible + delayed,
                "in_flight": in_flight,
                "oldest_age_seconds": None if age is None else int(age),
                "dlq_depth": int(row.get("dlq_depth", 0)) + int(row.get("in_flight", 0)),
                "failing": failing,
                "last_error": masked(last_error) if last_error else None,
            }
        )
    return rows


def _latest_outcomes(records: Iterable[dict[str, Any]]) -> dict[str, tuple[str, str | None]]:
    """Per service: its latest record outcome (processed counts duplicates) and reason."""
    latest: dict[str, tuple[str, str | None]] = {}
    for record in sorted(records, key=lambda r: str(r.get("timestamp", ""))):
        state = events._STATES.get(str(record.get("message", "")))
        if state is None:
            continue
        state = events.PROCESSED if state == events.DUPLICATE else state
        reason = record.get("reason")
        latest[str(record.get("service", ""))] = (state, reason if isinstance(reason, str) else None)
    return latest


# -- alarms ----------------------------------------------------------------------------------------
def alarm_rows(where: Where) -> list[dict[str, Any]]:
    """Deployed: the stack's CloudWatch alarms and their states. Locally: what would fire (a DLQ
    holding messages, a consumer failing), as the stack's alarms would."""
    if where.local:
        rows = []
        for row in consumer_rows(where):
            rows.append(
                {
                    "name": f"DlqNotEmpty-{row['consumer']}-dlq",
                    "state": "ALARM" if row["dlq_depth"] else "OK",
                    "reason": f"{row['dlq_depth']} message(s) in the DLQ"
                    if row["dlq_depth"]
                    else "DLQ empty",
                }
            )
            rows.append(
                {
                    "name": f"Errors-{row['consumer']}",
                    "state": "ALARM" if row["failing"] else "OK",
                    "reason": row["last_error"] or "no failure since its last success",
                }
            )
        return rows
    names = events.stack_resources(where.stack_name, "AWS::CloudWatch::Alarm")
    rows = []
    for start in range(0, len(names), 100):
        answer = aws.client("cloudwatch").describe_alarms(AlarmNames=names[start : start + 100])
        for alarm in answer.get("MetricAlarms", []) + answer.get("CompositeAlarms", []):
            rows.append(
                {
                    "name": alarm["AlarmName"],
                    "state": alarm.get("StateValue"),
                    "reason": masked(alarm.get("StateReason", "")),
                }
            )
    return sorted(rows, key=lambda row: (row["state"] != "ALARM", row["name"]))


# -- SMS journal -----------------------------------------------------------------------------------
def unknown_sms(where: Where) -> list[dict[str, Any]]:
    return journal.unknown_rows(where.context(show_phone=False))


def find_sms(where: Where, order: str, phone: str) -> list[dict[str, Any]]:
    return journal.find_records(where.context(show_phone=False), order=order, phone=phone)


# -- bot conversations -----------------------------------------------------------------------------
def bot_state_keys(where: Where, chat_id: int) -> list[str]:
    """The `bot_state` keys of a chat: its chat and user items by their keys, and its
    conversations' keys by a Query of the `by_chat` index on the chat id (pipeline.telegram_bot.
    state): only that chat's keys are read, never another chat's item, and no item's data."""
    table = aws.resource("dynamodb").Table(where.stack().require(OutputKey.table_name("bot_state")))
    keys = [f"chat#{chat_id}", f"user#{chat_id}"]
    query: dict[str, Any] = {
        "IndexName": BY_CHAT_INDEX,
        "KeyConditionExpression": "#chat = :chat",
        "ExpressionAttributeNames": {"#chat": CHAT_ATTRIBUTE},
        "ExpressionAttributeValues": {":chat": str(chat_id)},
        "ProjectionExpression": "pk",
    }
    while True:
        page = table.query(**query)
        # The key itself names the chat: an item the index holds under a wrong chat stays out.
        keys.extend(
            str(item["pk"]) for item in page.get("Items", []) if conversation_chat(str(item["pk"])) == chat_id
        )
        if "LastEvaluatedKey" not in page:
            break
        query["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    return keys


def bot_conversation(where: Where, chat: str) -> dict[str, Any]:
    """A chat's state items in `bot_state` (the chat's, its conversations', and its user's: in a
    private chat the chat id is the user's, whose data the bot keeps apart), each read by its key,
    and its latest steps' Bot API calls (method, status)."""
    try:
        chat_id = int(chat.strip())
    except ValueError as error:
        raise OpsError(f"a chat id is a number, not {chat!r}") from error
    stack = where.stack()
    table = aws.resource("dynamodb").Table(stack.require(OutputKey.table_name("bot_state")))
    items = []
    for key in bot_state_keys(where, chat_id):
        item = table.get_item(Key={"pk": key}, ConsistentRead=True).get("Item")
        if item is not None:
            items.append(item)
    state = [{"key": str(item["pk"]), "data": masked(item.get("data"))} for item in items]
    steps = [
        path
        for path in events.event_paths(where.log_records(), where.consumers(), {}, limit=10_000)
        if events.group_chat(path.group) == str(chat_id) and any(s.consumer == "bot" for s in path.steps)
    ][:BOT_STEPS]
    journal_table = aws.resource("dynamodb").Table(stack.require(OutputKey.JOURNAL_TABLE))
    shown_steps = []
    for path in steps:
        calls = []
        for index in range(BOT_CALLS_PER_STEP):
            item = journal_table.get_item(Key={"id": f"botcall#{path.event_id}#{index}"}).get("Item")
            if item is None:
                break
            calls.append({"method": str(item.get("method")), "status": int(item.get("status", 0))})
        bot = next(s for s in path.steps if s.consumer == "bot")
        shown_steps.append({"event_id": path.event_id, "type": path.type, "state": bot.state, "calls": calls})
    return {"chat": chat_id, "state": state, "steps": shown_steps}
