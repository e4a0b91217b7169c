"""What the pipeline did, read from the running local stack once it drained: the stand-ins'
records (Bot API calls, leads, SMS), the tables (conversations, journal) and the DLQs."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from local.chaos.actions import BROADCAST_TEXT
from local.chaos.checks import Observed, run_of
from local.runtime import Runtime
from ops.dlq import read_and_release, summarize_body
from pipeline.bot_api import TIMEOUT_SECONDS
from pipeline.crm.sources import HIDDEN_METRIC
from pipeline.crm.sweep import CURSOR_PREFIX
from pipeline.registry import JOURNAL
from pipeline.sms.journal import KEY_PREFIX

# Bot API faults after which the call took effect: none, a slow answer, an answer lost.
TOOK_EFFECT = (None, "hang", "drop_answer")
# The CRM consumers' warning for an order hidden from the integration's user (`pipeline.crm.sources`).
HIDDEN_MESSAGE = "CRM order hidden from the integration's user"
PORTALS = ("bitrix24", "amocrm")
# More than a campaign's DLQ ever holds: read them all.
EVERY_DEAD_LETTER = 1_000_000


def took_effect(call: dict[str, Any]) -> bool:
    """Whether a recorded Bot API call did what it asked: no fault but a slow or lost answer, and
    not refused (a revoked token's 401, a 429, a 400 did nothing; seed 36 counted a 401 as a
    reply sent)."""
    answered = call.get("status")
    return call["fault"] in TOOK_EFFECT and (answered is None or 200 <= answered < 300)


def observe(runtime: Runtime, undecided: dict[str, list[str]] | None = None) -> Observed:
    """`undecided`: per consumer, the events killed workers held (`local.chaos.inflight`)."""
    resources = runtime.resources
    if resources is None:
        raise RuntimeError("the runtime has not created its resources")
    observed = Observed(undecided=dict(undecided or {}))
    for call in runtime.fakes["telegram"].calls():
        body = call.get("body")
        if not isinstance(body, dict) or str(body.get("text")).startswith(BROADCAST_TEXT):
            continue  # a broadcast's messages are no replies (`local.chaos.steering` reads them)
        if call.get("status") == 403 and call["path"].endswith("/sendMessage"):
            observed.refused_replies.add((int(body["chat_id"]), str(body.get("text"))))
        if not took_effect(call):
            continue
        unanswered = call["fault"] == "drop_answer" or (call.get("fault_seconds") or 0) >= TIMEOUT_SECONDS
        if call["path"].endswith("/sendMessage"):
            chat, text = int(body["chat_id"]), str(body.get("text"))
            observed.replies.append((chat, text, float(call["time"])))
            if unanswered:
                observed.unanswered_replies.append((chat, text))
        elif call["path"].endswith("/editMessageText") and "chat_id" in body:
            chat, text = int(body["chat_id"]), str(body.get("text"))
            observed.edits.append((chat, text))
            if unanswered:
                observed.unanswered_replies.append((chat, text))
        elif call["path"].endswith("/answerCallbackQuery"):
            observed.callback_answers.append(str(body.get("callback_query_id")))
            if unanswered:
                observed.unanswered_callbacks.append(str(body.get("callback_query_id")))
    crm = runtime.fakes["crm"]
    leads = crm.leads() if hasattr(crm, "leads") else {}
    observed.leads = [int(lead["telegram_user_id"]) for lead in leads.values() if "telegram_user_id" in lead]
    eum = runtime.fakes["end_user_messaging"]
    observed.sms = [str(message["text"]) for message in getattr(eum, "messages", list)()]
    dynamodb = runtime.client("dynamodb")
    if "conversations" in resources.tables:
        for item in _scan(dynamodb, resources.tables["conversations"], "sk"):
            sort_key = item["sk"]["S"]
            if sort_key.startswith("update#"):
                observed.stored.add(int(sort_key.split("#", 1)[1]))
    for item in _scan(dynamodb, resources.tables[JOURNAL], "id, #state, #status, body", state=True):
        key = item["id"]["S"]
        if key.startswith(KEY_PREFIX) and "state" in item:
            body = item.get("body", {}).get("S", "")
            observed.sms_records.append((key, item["state"]["S"], run_of(body)))
        elif "S" in item.get("status", {}):  # the bot's call journal keeps an HTTP status, a number
            observed.idempotency_records.append((key, item["status"]["S"]))
    observed.dead = dead_letters(runtime)
    observed.hidden_named, observed.hidden_counted = hidden_orders(runtime)
    for portal in PORTALS:
        item = dynamodb.get_item(
            TableName=resources.tables[JOURNAL],
            Key={"id": {"S": CURSOR_PREFIX + portal}},
            ConsistentRead=True,
        ).get("Item", {})
        if "S" in item.get("read_to", {}):
            observed.sweep_read_to[portal] = datetime.fromisoformat(item["read_to"]["S"]).timestamp()
    return observed


def hidden_orders(runtime: Runtime) -> tuple[list[str], int]:
    """The orders the CRM consumers' logs name as hidden, and how many `CrmOrdersHidden` they count."""
    named: list[str] = []
    counted = 0
    for portal in PORTALS:
        for path in sorted(runtime.log_dir.glob(f"{portal}*.log")):
            for line in path.read_text(errors="replace").splitlines():
                if HIDDEN_MESSAGE not in line and HIDDEN_METRIC not in line:
                    continue
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if entry.get("message") == HIDDEN_MESSAGE:
                    named.append(str(entry.get("what")))
                value = entry.get(HIDDEN_METRIC)
                counted += int(sum(value) if isinstance(value, list) else value or 0)
    return named, counted


def _scan(dynamodb: Any, table: str, projection: str, state: bool = False) -> list[dict[str, Any]]:
    arguments: dict[str, Any] = {"TableName": table, "ProjectionExpression": projection}
    if state:
        arguments["ExpressionAttributeNames"] = {"#state": "state", "#status": "status"}
    items: list[dict[str, Any]] = []
    while True:
        page = dynamodb.scan(**arguments)
        items.extend(page.get("Items", []))
        if "LastEvaluatedKey" not in page:
            return items
        arguments["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def dead_letters(runtime: Runtime) -> dict[str, dict[str, str]]:
    """Per consumer: each dead-lettered event id and its reason, read without consuming them."""
    assert runtime.resources is not None
    sqs = runtime.client("sqs")
    found: dict[str, dict[str, str]] = {}
    for name, queue in runtime.resources.queues.items():
        events: dict[str, str] = {}
        for message in read_and_release(
            queue.dlq_url, limit=EVERY_DEAD_LETTER, visibility_timeout=60, sqs=sqs
        ):
            reason = message.get("MessageAttributes", {}).get("dead_letter_reason", {}).get("StringValue")
            event_id = summarize_body(message["Body"]).event_id or "(unreadable)"
            events[event_id] = reason or "(no reason: moved by the redrive policy)"
        found[name] = events
    return found
