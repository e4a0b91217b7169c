"""The local moto server makes each DynamoDB item write whole (`local.moto_dynamodb`), as DynamoDB does.

moto's `UpdateItem` of an item that does not exist yet reads it, creates it, then sets the
attributes: two at once (the `store` and `ai` consumers on one conversation item) both create it,
and one's attributes are lost. Here both requests are held right after their read until the other
has read too (or 0.2 s have passed), which makes that interleaving certain when nothing
serialises them.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.table import Table

from local.moto_dynamodb import DYNAMODB_ITEM_WRITES, make_dynamodb_item_writes_atomic
from pipeline import aws
from tests.unit.consumer_support import CONVERSATIONS_TABLE as TABLE

KEY = {"pk": {"S": "chat#1"}, "sk": {"S": "update#000000000001"}}


@pytest.fixture
def dynamodb(moto_aws: None, monkeypatch: pytest.MonkeyPatch) -> Any:
    """In-process moto with the conversations table; what the patch replaces comes back after the test."""
    for name in DYNAMODB_ITEM_WRITES:
        monkeypatch.setattr(DynamoDBBackend, name, getattr(DynamoDBBackend, name))
    return aws.client("dynamodb")


@pytest.fixture
def reads_meet(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every item read waits (at most 0.2 s) until another request has read too."""
    meeting = threading.Barrier(2, timeout=0.2)
    read = Table.get_item

    def read_then_meet(self: Table, *args: Any, **kwargs: Any) -> Any:
        item = read(self, *args, **kwargs)
        try:
            meeting.wait()
        except threading.BrokenBarrierError:
            meeting.reset()
        return item

    monkeypatch.setattr(Table, "get_item", read_then_meet)


def update_both_at_once(client: Any) -> dict[str, Any]:
    def set_attribute(name: str) -> None:
        client.update_item(
            TableName=TABLE,
            Key=KEY,
            UpdateExpression="SET #a = :v",
            ExpressionAttributeNames={"#a": name},
            ExpressionAttributeValues={":v": {"S": name}},
        )

    writers = [threading.Thread(target=set_attribute, args=(name,)) for name in ("event_id", "ai")]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    item: dict[str, Any] = client.get_item(TableName=TABLE, Key=KEY)["Item"]
    return item


def test_unpatched_moto_loses_one_of_two_updates_creating_an_item(dynamodb: Any, reads_meet: None) -> None:
    """The artefact itself, so the test below is known to be able to fail."""
    item = update_both_at_once(dynamodb)

    assert not {"event_id", "ai"} <= set(item)


def test_two_updates_creating_an_item_at_once_both_land(dynamodb: Any, reads_meet: None) -> None:
    make_dynamodb_item_writes_atomic()

    item = update_both_at_once(dynamodb)

    assert {"event_id", "ai"} <= set(item)
