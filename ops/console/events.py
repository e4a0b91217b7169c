"""Each event's path through the consumers, from what the functions log and what the DLQs hold.

Every function logs one structured line per record with the event's id and correlation id: the
webhook's `Event published` (source, type, its chat or order: the FIFO group), each consumer's
`record processed` / `record duplicate` / `record will be retried` (the reason) / `record sent
to the DLQ` (the reason). The routing is decided again from the registry (`pipeline.registry.
matches` on the source and type the topic routes on, as `local.routing` explains it), so the
consumers an event was not routed to are named with why. The DLQs' current messages (`dlq
peek`'s view) say which dead letters are still there and which were redriven since.

The log lines come from the local runtime's log directory (`make local`), or from the deployed
stack's log groups (CloudWatch Logs FilterLogEvents, with the user's credentials). Only ids,
types, states and reasons are kept, never a payload; reasons are shown phone-masked.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline import aws
from pipeline.registry import Consumer, matches

# Read at most this much of the end of each local log file: the latest events are at the end.
LOCAL_TAIL_BYTES = 4_000_000
# A deployed stack's log lines of the last hour, at most this many per log group.
CLOUDWATCH_WINDOW_SECONDS = 3600
CLOUDWATCH_MAX_PER_GROUP = 2000

PROCESSED, DUPLICATE, RETRYING, DEAD_LETTERED = "processed", "duplicate", "retrying", "in the DLQ"
REDRIVEN, WAITING, NOT_ROUTED = "redriven, waiting", "waiting", "not routed"
_STATES = {
    "record processed": PROCESSED,
    "record duplicate": DUPLICATE,
    "record will be retried": RETRYING,
    "record sent to the DLQ": DEAD_LETTERED,
}
ORIGIN_MESSAGES = frozenset({"Event published"})


# -- where the log lines come from ------------------------------------------------------------------
def _json_lines(text: str) -> Iterable[dict[str, Any]]:
    for line in text.splitlines():
        if line.startswith("{") and '"event_id"' in line:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                yield record


def local_records(log_dir: Path) -> list[dict[str, Any]]:
    """The structured lines naming an event of every function's log (each worker's file)."""
    records: list[dict[str, Any]] = []
    for path in sorted(log_dir.glob("*.log")):
        with path.open("rb") as log:
            size = log.seek(0, 2)
            log.seek(max(0, size - LOCAL_TAIL_BYTES))
            text = log.read().decode("utf-8", "replace")
        records.extend(_json_lines(text))
    return records


def stack_resources(stack_name: str, resource_type: str) -> list[str]:
    """The physical ids of a deployed stack's resources of one type (its log groups, its alarms)."""
    found: list[str] = []
    paginator = aws.client("cloudformation").get_paginator("list_stack_resources")
    for page in paginator.paginate(StackName=stack_name):
        for resource in page.get("StackResourceSummaries", []):
            if resource.get("ResourceType") == resource_type and resource.get("PhysicalResourceId"):
                found.append(str(resource["PhysicalResourceId"]))
    return found


def stack_log_groups(stack_name: str) -> list[str]:
    """The log groups of a deployed stack's functions (the stack's own resources)."""
    return stack_resources(stack_name, "AWS::Logs::LogGroup")


def cloudwatch_records(log_groups: Iterable[str], now: float | None = None) -> list[dict[str, Any]]:
    """The last hour's JSON lines naming an event, of each log group (FilterLogEvents)."""
    start = int(((now or time.time()) - CLOUDWATCH_WINDOW_SECONDS) * 1000)
    logs = aws.client("logs")
    records: list[dict[str, Any]] = []
    for group in log_groups:
        request: dict[str, Any] = {
            "logGroupName": group,
            "startTime": start,
            "filterPattern": "{ $.event_id = * }",
        }
        taken = 0
        while taken < CLOUDWATCH_MAX_PER_GROUP:
            page = logs.filter_log_events(**request)
            for event in page.get("events", []):
                found = list(_json_lines(str(event.get("message", ""))))
                records.extend(found)
                taken += 1
            if not page.get("nextToken"):
                break
            request["nextToken"] = page["nextToken"]
    return records


# -- paths -----------------------------------------------------------------------------------------
@dataclass
class Step:
    """One consumer's part in one event."""

    consumer: str
    routed: bool
    state: str
    why_not: str | None = None
    detail: str | None = None  # the last error (retrying) or the dead-letter reason
    attempts: int = 0
    at: str | None = None
    dlq_message_id: str | None = None  # the DLQ message holding it now (`dlq redrive --message-id`)


@dataclass
class EventPath:
    event_id: str
    source: str
    type: str
    correlation_id: str | None = None
    group: str | None = None
    received_at: str | None = None
    steps: list[Step] = field(default_factory=list)

    @property
    def summary(self) -> str:
        states = [s.state for s in self.steps if s.routed]
        if not states:
            return "no consumer"
        for state in (DEAD_LETTERED, RETRYING, REDRIVEN, WAITING):
            if state in states:
                return state
        return PROCESSED


@dataclass(frozen=True)
class Filters:
    source: str = ""
    type: str = ""
    chat: str = ""
    order: str = ""

    def keep(self, path: EventPath) -> bool:
        """Each filter matches a whole value: chat 12 is not chat 123, order 4 not order 42."""
        return (
            (not self.source or path.source == self.source.strip())
            and (not self.type or path.type == self.type.strip())
            and (not self.chat or group_chat(path.group) == self.chat.strip())
            and (not self.order or group_order(path.group, path.source, self.order.strip()))
        )


def group_chat(group: str | None) -> str | None:
    """The chat (or, without one, the user) of a Telegram FIFO group `telegram:<bot>:chat:<id>`
    (`pipeline.telegram.chat_group`), as a whole value; None for any other group."""
    parts = (group or "").split(":")
    if len(parts) == 4 and parts[0] == "telegram" and parts[2] in ("chat", "user"):
        return parts[3]
    return None


def group_order(group: str | None, source: str, order: str) -> bool:
    """Whether a CRM FIFO group `<source>:<noun>:<order>` (`pipeline.envelope.message_group`; a
    `crm` order qualified by its CRM, `crm:order:bitrix24:42`) is of this order: its id whole
    (`42`) or qualified as `ops journal` shows it (`bitrix24:42`)."""
    parts = (group or "").split(":")
    if source == "telegram" or len(parts) < 3 or not order:
        return False
    order_id = ":".join(parts[2:])
    return order in (order_id, order_id.rsplit(":", 1)[-1], f"{source}:{order_id}")


def why_not(filter_policy: Mapping[str, Any], attributes: Mapping[str, str]) -> str:
    """The first key of the policy the event's attributes fail, said plainly."""
    for key, allowed in filter_policy.items():
        if matches({key: allowed}, dict(attributes)):
            continue
        value = attributes.get(key)
        strings = [rule for rule in allowed if isinstance(rule, str)]
        if value is None:
            return f"no {key}"
        if strings and len(strings) == len(allowed):
            shown = repr(strings[0]) if len(strings) == 1 else f"one of {len(strings)} {key}s"
            return f"{key} {value!r} is not {shown}"
        return f"{key} {value!r} does not match {json.dumps(allowed)}"
    return "matches"


def _source_of(event_id: str) -> str:
    return event_id.split(":", 1)[0]


def event_paths(
    records: Iterable[Mapping[str, Any]],
    consumers: list[Consumer],
    dead_letters: Mapping[tuple[str, str], Mapping[str, Any]],
    filters: Filters = Filters(),
    limit: int = 50,
) -> list[EventPath]:
    """The latest events (newest first), each with every deployed consumer's part in it.

    `dead_letters`: (consumer, event id) -> the DLQ message now holding it (`dlq peek`'s row)."""
    names = {c.name for c in consumers}
    paths: dict[str, EventPath] = {}
    last: dict[tuple[str, str], Step] = {}
    for record in sorted(records, key=lambda r: str(r.get("timestamp", ""))):
        event_id = record.get("event_id")
        if not isinstance(event_id, str):
            continue
        path = paths.get(event_id)
        if path is None:
            path = paths[event_id] = EventPath(event_id, _source_of(event_id), "?")
        service, message = str(record.get("service", "")), str(record.get("message", ""))
        kind = record.get("type") if message in ORIGIN_MESSAGES else record.get("event_type")
        if isinstance(kind, str) and path.type == "?":
            path.type = kind
        if message in ORIGIN_MESSAGES and isinstance(record.get("source"), str):
            path.source = str(record["source"])
            path.received_at = path.received_at or str(record.get("timestamp", "")) or None
        path.correlation_id = path.correlation_id or _text(record.get("correlation_id"))
        path.group = path.group or _text(record.get("message_group"))
        state = _STATES.get(message)
        if service in names and state is not None:
            step = last.setdefault((service, event_id), Step(service, True, state))
            step.state, step.at = state, str(record.get("timestamp", "")) or None
            step.attempts = max(step.attempts, int(record.get("receive_count") or 0))
            if state in (RETRYING, DEAD_LETTERED):
                step.detail = _text(record.get("reason"))
        if path.received_at is None:
            path.received_at = str(record.get("timestamp", "")) or None
    shown = sorted(paths.values(), key=lambda p: p.received_at or "", reverse=True)
    result: list[EventPath] = []
    for path in shown:
        if not filters.keep(path):
            continue
        attributes = {"source": path.source, "type": path.type}
        for consumer in consumers:
            logged = last.get((consumer.name, path.event_id))
            held = dead_letters.get((consumer.name, path.event_id))
            routed = matches(consumer.filter_policy, attributes)
            if logged is not None:
                step = logged
            else:
                step = Step(consumer.name, routed, WAITING if routed else NOT_ROUTED)
                if not routed:
                    step.why_not = why_not(consumer.filter_policy, attributes)
            if held is not None:
                step.routed, step.state = True, DEAD_LETTERED
                step.detail = _text(held.get("dead_letter_reason")) or step.detail
                step.dlq_message_id = _text(held.get("message_id"))
            elif step.state == DEAD_LETTERED:
                step.state = REDRIVEN  # dead-lettered, no longer in the DLQ, not processed since
            path.steps.append(step)
        result.append(path)
        if len(result) >= limit:
            break
    return result


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
