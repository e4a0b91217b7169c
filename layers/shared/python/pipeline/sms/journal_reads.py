"""Reading the SMS journal: a record, an order's history, and the records in a state through the
sparse `by_state` index (oldest first, in turns for the reconciler, counted for the alarms).

`JournalReads` is the base of `pipeline.sms.journal.Journal`, whose conditional writes are the
other half; apart so that each stays a readable size.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from pipeline import aws
from pipeline.formats import SCHEMA_VERSION
from pipeline.retention import SMS_RETENTION_DAYS
from pipeline.sms.clock import CLOCK, Clock, iso, parse_iso
from pipeline.sms.orders import OrderState, order_item_id
from pipeline.sms.records import (
    BY_STATE_INDEX,
    CURSOR,
    CURSOR_PREFIX,
    KEY_PREFIX,
    Notification,
    State,
    cursor_of,
)

# The journal is read through boto3's resource: built at the init of a function that reads it
# (`pipeline.aws.prepare`: in an execution environment only).
aws.prepare(resources=("dynamodb",))


class JournalReads:
    """The journal's table, its settings, and its reads (see the module docstring)."""

    def __init__(
        self,
        table_name: str,
        *,
        lease: timedelta = timedelta(seconds=120),
        retention: timedelta = timedelta(days=SMS_RETENTION_DAYS),
        clock: Clock = CLOCK,
        dynamodb: Any = None,
    ) -> None:
        self.table_name = table_name
        self.lease = lease
        self.retention = retention
        self.clock = clock
        # A DynamoDB resource of the caller's (a local run's moto server); else the function's own.
        self._dynamodb = dynamodb

    @property
    def table(self) -> Any:
        return (self._dynamodb or aws.resource("dynamodb")).Table(self.table_name)

    # -- reading --------------------------------------------------------------------------------
    def get(self, key: str) -> Notification | None:
        item = self.table.get_item(Key={"id": KEY_PREFIX + key}, ConsistentRead=True).get("Item")
        return Notification.from_item(item) if item else None

    def get_order(self, order_key: str) -> OrderState | None:
        """The order's status history as the pipeline has seen it (`pipeline.sms.orders`)."""
        item = self.table.get_item(Key={"id": order_item_id(order_key)}, ConsistentRead=True).get("Item")
        return OrderState.from_item(item) if item else None

    def _state_query(
        self, state: State, newer_than: datetime | None, not_newer_than: datetime | None
    ) -> dict[str, Any]:
        # Imported here, as `aws.resource` imports boto3: with the table this query runs on.
        from boto3.dynamodb.conditions import Key

        condition = Key("sms_state").eq(state.value)
        if newer_than is not None:
            condition = condition & Key("state_since").gt(iso(newer_than))
        if not_newer_than is not None:
            condition = condition & Key("state_since").lte(iso(not_newer_than))
        return {"IndexName": BY_STATE_INDEX, "KeyConditionExpression": condition}

    def keys_in_state(
        self,
        state: State,
        limit: int | None = None,
        *,
        newer_than: datetime | None = None,
        not_newer_than: datetime | None = None,
    ) -> Iterator[tuple[str, datetime]]:
        """(key, state_since) of records in `state`, oldest first, from the `by_state` index,
        optionally only those whose `state_since` lies in (newer_than, not_newer_than]."""
        query = {**self._state_query(state, newer_than, not_newer_than), "ScanIndexForward": True}
        returned = 0
        while True:
            page = self.table.query(**query)
            for item in page.get("Items", []):
                if limit is not None and returned >= limit:
                    return
                returned += 1
                yield str(item["id"])[len(KEY_PREFIX) :], parse_iso(item["state_since"])
            if "LastEvaluatedKey" not in page:
                return
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def records_in_state(
        self, state: State, limit: int | None = None, *, newer_than: datetime | None = None
    ) -> Iterator[Notification]:
        """Records in `state`, oldest first: the index's keys, each re-read consistently.

        The index is eventually consistent and the keys are read before anything is done to
        them, so a record that has left `state` in the meantime is skipped.
        """
        for key, _ in list(self.keys_in_state(state, limit, newer_than=newer_than)):
            record = self.get(key)
            if record is not None and record.state is state:
                yield record

    def records_in_turn(self, state: State, limit: int, *, newer_than: datetime) -> Iterator[Notification]:
        """Up to `limit` records in `state` (younger than `newer_than`), taking turns: each call
        starts after the last record the previous call handed out (a cursor item in the table),
        and wraps around, so every record comes up within ceil(count / limit) calls, however
        the oldest ones fare. The cursor moves before the records are handed out: one that
        fails every time cannot hold the others back."""
        keys = sorted((iso(since), key) for key, since in self.keys_in_state(state, newer_than=newer_than))
        cursor_id = {"id": f"{CURSOR_PREFIX}{state.value}"}
        after = cursor_of(self.table.get_item(Key=cursor_id, ConsistentRead=True).get("Item") or {})
        turn = [entry for entry in keys if entry > after] + [entry for entry in keys if entry <= after]
        batch = turn[:limit]
        if batch:
            self.table.update_item(
                Key=cursor_id,
                UpdateExpression="SET #since = :since, #key = :key, #v = :v",
                ExpressionAttributeNames={"#since": "state_since", "#key": "key", "#v": SCHEMA_VERSION},
                ExpressionAttributeValues={
                    ":since": batch[-1][0],
                    ":key": batch[-1][1],
                    ":v": CURSOR.version,
                },
            )
        for _, key in batch:
            record = self.get(key)
            if record is not None and record.state is state:
                yield record

    def count_in_state(self, state: State, *, not_newer_than: datetime | None = None) -> int:
        query = {**self._state_query(state, None, not_newer_than), "Select": "COUNT"}
        total = 0
        while True:
            page = self.table.query(**query)
            total += int(page.get("Count", 0))
            if "LastEvaluatedKey" not in page:
                return total
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]
