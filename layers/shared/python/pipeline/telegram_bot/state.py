"""The bot's python-telegram-bot state in the `bot_state` table: one item per (kind, key).

Items are `pk = "<kind>#<key>"` with the value as JSON (`data`) and a `version` counter:
`conversation#<handler name>#<key as JSON>`, `chat#<chat id>`, `user#<user id>`, `bot`.
Items written carry `schema_version` (1; an item without it is version 0, the same shape less
`chat`). A conversation item whose key starts with a chat id (the handler's chat, or its user's,
which is the chat in a private chat) also carries that id as `chat`: the sparse `by_chat` index
lets the operator's console read one chat's conversations by their key, never scanning others'.

Every read is strongly consistent and remembers the version it saw; every write is conditional
on that version (or on the item not existing), and an update's writes go in one transaction
together with the marker `applied#<event id>`. So:

- two writers never overwrite each other's state silently: the later one's transaction is
  cancelled (`StateConflict`, a TransientError), and its record is retried on fresh state;
- a replay of an update whose state was already written (a crash after the commit, before the
  idempotency record was saved) sees the marker and does not run the handlers a second time.

No python-telegram-bot import here: the store works on plain JSON values.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from pipeline import aws
from pipeline.errors import PermanentError, TransientError
from pipeline.formats import FormatTooNew, by_name
from pipeline.registry import table_env_var
from pipeline.retention import IDEMPOTENCY_TTL_SECONDS

TABLE = "bot_state"
TTL_ATTRIBUTE = "expiration"
# DynamoDB's limit on the items of one TransactWriteItems call.
MAX_TRANSACTION_ITEMS = 100
# The items' formats (`pipeline.formats`, the one source of their versions): the state, the marker.
FORMAT = by_name("bot_state")
APPLIED_FORMAT = by_name("bot_update_applied")
STATE_SCHEMA_VERSION = FORMAT.version
# The sparse index of conversation items by the chat their key starts with (infra.tables).
BY_CHAT_INDEX = "by_chat"
CHAT_ATTRIBUTE = "chat"
CONVERSATION_PREFIX = "conversation#"


class StateConflict(TransientError):
    """Another update changed the state this one read: retry on fresh state."""


@dataclass(frozen=True)
class Stored:
    """An item's value as last read or written (None: absent) and its version (0: absent)."""

    value: Any
    version: int


def dumps(value: Any, what: str) -> str:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as error:
        raise PermanentError(f"bot {what} is not JSON-serializable ({error})") from None


def conversation_key(name: str, key: Iterable[Any]) -> str:
    return f"{CONVERSATION_PREFIX}{name}#{json.dumps(list(key), separators=(',', ':'))}"


def conversation_chat(pk: str) -> int | None:
    """The chat id a conversation item's key starts with (None: not a conversation, or a key
    that starts with no integer, as an inline message's does)."""
    if not pk.startswith(CONVERSATION_PREFIX):
        return None
    _, _, key = pk[len(CONVERSATION_PREFIX) :].rpartition("#")
    try:
        parts = json.loads(key)
    except ValueError:
        return None
    first = parts[0] if isinstance(parts, list) and parts else None
    return first if type(first) is int else None


def item_attributes(pk: str, data: str, version: int) -> dict[str, Any]:
    """The item written for `pk` (low-level attribute values)."""
    item: dict[str, Any] = {
        "pk": {"S": pk},
        "data": {"S": data},
        "version": {"N": str(version)},
        **FORMAT.written(),
    }
    chat = conversation_chat(pk)
    if chat is not None:
        item[CHAT_ATTRIBUTE] = {"S": str(chat)}
    return item


def schema_version(item: dict[str, Any]) -> int:
    """An item's format version (low-level attribute values); refuses one newer than this code."""
    try:
        return FORMAT.version_of(item)
    except FormatTooNew as error:
        raise PermanentError(f"bot state item: {error}") from None


def stored_of(item: dict[str, Any] | None) -> Stored:
    """A state item as read (None: absent); versions 0 and 1 differ in attributes this ignores."""
    if not item:
        return Stored(None, 0)
    schema_version(item)
    return Stored(json.loads(item["data"]["S"]), int(item["version"]["N"]))


def applied_of(item: dict[str, Any] | None) -> bool:
    """Whether a marker item (`applied#<event id>`) says the update's writes were committed."""
    if item:
        APPLIED_FORMAT.version_of(item)
    return bool(item)


class StateTable:
    """Reads and transactional writes of the bot_state table (table name from BOT_STATE_TABLE)."""

    def __init__(self, table_name: str | None = None) -> None:
        self._table_name = table_name

    @property
    def table_name(self) -> str:
        if self._table_name is None:
            self._table_name = os.environ[table_env_var(TABLE)]
        return self._table_name

    def get(self, pk: str) -> Stored:
        response = aws.client("dynamodb").get_item(
            TableName=self.table_name, Key={"pk": {"S": pk}}, ConsistentRead=True
        )
        return stored_of(response.get("Item"))

    def applied(self, event_id: str) -> bool:
        """Whether an update's state writes were committed already (see the module docstring)."""
        response = aws.client("dynamodb").get_item(
            TableName=self.table_name,
            Key={"pk": {"S": f"applied#{event_id}"}},
            ConsistentRead=True,
            ProjectionExpression="pk, schema_version",
        )
        return applied_of(response.get("Item"))

    def commit(self, writes: dict[str, tuple[str | None, int]], event_id: str | None) -> dict[str, int]:
        """Write `pk -> (JSON or None to delete, version read)` and the event's marker at once
        (no marker without an event: a flush outside an update).

        Returns the new version per written pk; raises StateConflict when any item changed since
        it was read."""
        expiration = {"N": str(int(time.time()) + IDEMPOTENCY_TTL_SECONDS)}
        items: list[dict[str, Any]] = []
        versions: dict[str, int] = {}
        for pk, (data, version) in sorted(writes.items()):
            if data is None and version == 0:
                continue  # nothing stored, nothing to delete
            condition: dict[str, Any] = (
                {"ConditionExpression": "attribute_not_exists(pk)"}
                if version == 0
                else {
                    "ConditionExpression": "version = :read",
                    "ExpressionAttributeValues": {":read": {"N": str(version)}},
                }
            )
            if data is None:
                items.append(
                    {"Delete": {"TableName": self.table_name, "Key": {"pk": {"S": pk}}, **condition}}
                )
                versions[pk] = 0
            else:
                item = item_attributes(pk, data, version + 1)
                items.append({"Put": {"TableName": self.table_name, "Item": item, **condition}})
                versions[pk] = version + 1
        if not items:
            return versions
        if event_id is not None:
            marker = {
                "pk": {"S": f"applied#{event_id}"},
                TTL_ATTRIBUTE: expiration,
                **APPLIED_FORMAT.written(),
            }
            items.append({"Put": {"TableName": self.table_name, "Item": marker}})
        if len(items) > MAX_TRANSACTION_ITEMS:
            raise PermanentError(
                f"one update changed {len(versions)} bot state items (at most {MAX_TRANSACTION_ITEMS - 1})"
            )
        try:
            aws.client("dynamodb").transact_write_items(TransactItems=items)
        except ClientError as error:
            if aws.error_code(error) != "TransactionCanceledException":
                raise
            reasons = [r.get("Code") for r in error.response.get("CancellationReasons", [])]
            if "ConditionalCheckFailed" in reasons:
                raise StateConflict("bot state changed by another update since it was read") from None
            raise TransientError(
                f"bot state transaction cancelled ({', '.join(map(str, reasons))})"
            ) from None
        return versions
