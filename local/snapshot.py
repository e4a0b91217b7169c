"""State that outlives a restart of the local runtime (`python -m local --persist`).

moto keeps everything in memory and has no persistence of its own. With `persist`, at a clean
stop the moto process writes every queue's messages (`queues.json`: read from moto's SQS model,
so the in-flight and delayed ones too) and the runtime every table's items (`tables.json`: a scan
through the DynamoDB API), both in `<state dir>/persisted/`; the next start with `persist`
creates the resources as always, then sends the messages and writes the items back through the
APIs. So "break, fix, redrive" can be rehearsed across restarts: a DLQ's messages, with their
`dead_letter_reason`, and the journal's records are there after a restart.

What does not survive (said in local/README.md): a message comes back visible at once, as new
(in flight or delayed before: visible now; its receive count starts at 0; string and number
attributes only); secrets are the local values again (a rotated one is not kept); the fakes'
recorded calls; anything since the last clean stop when the runtime is killed (SIGKILL). A
snapshot is kept until the next clean stop with `persist` replaces it; a run without `persist`
neither reads nor writes it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

STATE_DIR = "persisted"
QUEUES_FILE = "queues.json"
TABLES_FILE = "tables.json"
_BINARY = "__base64__"
SQS_BATCH = 10
DYNAMODB_BATCH = 25


def write_json(path: Path, document: Any) -> None:
    """Atomically: a stop interrupted half-way never leaves half a snapshot."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(document, default=_encode_binary) + "\n", encoding="utf-8")
    temporary.replace(path)


def _encode_binary(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return {_BINARY: base64.b64encode(bytes(value)).decode("ascii")}
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _decode_binary(document: dict[str, Any]) -> Any:
    return base64.b64decode(document[_BINARY]) if set(document) == {_BINARY} else document


# -- saving ----------------------------------------------------------------------------------------
def save_queues(path: Path) -> int:
    """In the moto process, at stop: every queue's messages from moto's SQS model; how many."""
    from moto.sqs.models import sqs_backends

    queues: dict[str, list[dict[str, Any]]] = {}
    for regions in sqs_backends.values():
        for backend in regions.values():
            for name, queue in backend.queues.items():
                messages = [_message(message) for message in list(queue._messages)]
                if messages:
                    queues.setdefault(name, []).extend(messages)
    write_json(path, queues)
    return sum(len(messages) for messages in queues.values())


def _message(message: Any) -> dict[str, Any]:
    attributes = {
        name: {"DataType": value["DataType"], "StringValue": value["StringValue"]}
        for name, value in message.message_attributes.items()
        if value.get("StringValue") is not None
    }
    return {
        "body": message.body,
        "attributes": attributes,
        "group_id": message.group_id,
        "deduplication_id": message.deduplication_id,
    }


def save_tables(client: Callable[[str], Any], tables: list[str], path: Path) -> int:
    """In the runtime, before moto stops: every item of these tables; how many."""
    dynamodb = client("dynamodb")
    items: dict[str, list[dict[str, Any]]] = {}
    for table in tables:
        for page in dynamodb.get_paginator("scan").paginate(TableName=table):
            items.setdefault(table, []).extend(page["Items"])
    write_json(path, items)
    return sum(len(found) for found in items.values())


# -- restoring -------------------------------------------------------------------------------------
def restore(client: Callable[[str], Any], directory: Path) -> str:
    """Send the saved messages and write the saved items back (the resources exist); what it did."""
    queues_file, tables_file = directory / QUEUES_FILE, directory / TABLES_FILE
    if not queues_file.is_file() and not tables_file.is_file():
        return f"persist: no saved state in {directory} yet; it is written at stop"
    said = []
    if queues_file.is_file():
        queues = json.loads(queues_file.read_text(encoding="utf-8"))
        said.append(_restore_queues(client("sqs"), queues))
    if tables_file.is_file():
        tables = json.loads(tables_file.read_text(encoding="utf-8"), object_hook=_decode_binary)
        said.append(_restore_tables(client("dynamodb"), tables))
    return f"persist: restored from {directory}: " + "; ".join(said)


def _restore_queues(sqs: Any, queues: dict[str, list[dict[str, Any]]]) -> str:
    restored, skipped = 0, []
    for name, messages in queues.items():
        try:
            url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
        except sqs.exceptions.QueueDoesNotExist:
            skipped.append(name)  # its consumer is off in this run
            continue
        for start in range(0, len(messages), SQS_BATCH):
            chunk = messages[start : start + SQS_BATCH]
            entries = [_entry(str(i), message) for i, message in enumerate(chunk)]
            response = sqs.send_message_batch(QueueUrl=url, Entries=entries)
            if response.get("Failed"):
                codes = sorted({failure.get("Code", "?") for failure in response["Failed"]})
                failed = len(response["Failed"])
                raise RuntimeError(f"persist: could not restore {failed} messages to {name}: {codes}")
            restored += len(entries)
    note = f" (skipped queues not in this run: {', '.join(skipped)})" if skipped else ""
    return f"{restored} messages in {len(queues) - len(skipped)} queues{note}"


def _entry(identifier: str, message: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {"Id": identifier, "MessageBody": message["body"]}
    if message["attributes"]:
        entry["MessageAttributes"] = message["attributes"]
    if message.get("group_id"):
        entry["MessageGroupId"] = message["group_id"]
    if message.get("deduplication_id"):
        entry["MessageDeduplicationId"] = message["deduplication_id"]
    return entry


def _restore_tables(dynamodb: Any, tables: dict[str, list[dict[str, Any]]]) -> str:
    restored, skipped = 0, []
    existing = set(dynamodb.list_tables()["TableNames"])
    for table, items in tables.items():
        if table not in existing:
            skipped.append(table)
            continue
        for start in range(0, len(items), DYNAMODB_BATCH):
            chunk = items[start : start + DYNAMODB_BATCH]
            requests = {table: [{"PutRequest": {"Item": item}} for item in chunk]}
            while requests:
                requests = dynamodb.batch_write_item(RequestItems=requests).get("UnprocessedItems") or {}
        restored += len(items)
    note = f" (skipped tables not in this run: {', '.join(skipped)})" if skipped else ""
    return f"{restored} items in {len(tables) - len(skipped)} tables{note}"
