"""A transaction on the local moto server backs up only its own items (`local.moto_dynamodb`).

moto deep-copies every table a `TransactWriteItems` names, before it runs, to roll back a
cancelled one: the journal's whole table, once per transaction. A long campaign's moto server grew
to 23 GB on those copies and was killed. The outcome must stay DynamoDB's: a cancelled
transaction changes nothing, a completed one changes each item it names.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.table import Table

from local.moto_dynamodb import DYNAMODB_ITEM_WRITES, make_dynamodb_item_writes_atomic
from pipeline import aws
from tests.unit.consumer_support import CONVERSATIONS_TABLE as TABLE


def key(n: int) -> dict[str, Any]:
    return {"pk": {"S": "chat#1"}, "sk": {"S": f"update#{n:012d}"}}


@pytest.fixture
def dynamodb(moto_aws: None, monkeypatch: pytest.MonkeyPatch) -> Any:
    """In-process moto with the conversations table and the patch; moto's own methods come back after."""
    for name in DYNAMODB_ITEM_WRITES:
        monkeypatch.setattr(DynamoDBBackend, name, getattr(DynamoDBBackend, name))
    make_dynamodb_item_writes_atomic()
    client = aws.client("dynamodb")
    for n in range(1, 4):
        client.put_item(TableName=TABLE, Item={**key(n), "text": {"S": f"before {n}"}})
    return client


@pytest.fixture
def tables_copied(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every copy of a table `copy.deepcopy` made."""
    copied: list[Any] = []
    deepcopy = copy.deepcopy

    def spy(value: Any, memo: Any = None) -> Any:
        result = deepcopy(value, memo)
        if isinstance(value, Table) and result is not value:
            copied.append(result)
        return result

    monkeypatch.setattr(copy, "deepcopy", spy)
    return copied


def update(n: int, text: str) -> dict[str, Any]:
    return {
        "Update": {
            "TableName": TABLE,
            "Key": key(n),
            "UpdateExpression": "SET #t = :t",
            "ExpressionAttributeNames": {"#t": "text"},
            "ExpressionAttributeValues": {":t": {"S": text}},
        }
    }


def put(n: int, text: str) -> dict[str, Any]:
    return {"Put": {"TableName": TABLE, "Item": {**key(n), "text": {"S": text}}}}


def must_not_exist(n: int) -> dict[str, Any]:
    return {
        "ConditionCheck": {
            "TableName": TABLE,
            "Key": key(n),
            "ConditionExpression": "attribute_not_exists(pk)",
        }
    }


def texts(client: Any) -> dict[str, str]:
    items = client.scan(TableName=TABLE)["Items"]
    return {item["sk"]["S"][-1]: item["text"]["S"] for item in items}


def test_a_cancelled_transaction_changes_nothing_and_copies_no_table(
    dynamodb: Any, tables_copied: list[Any]
) -> None:
    before = texts(dynamodb)
    with pytest.raises(dynamodb.exceptions.TransactionCanceledException):
        dynamodb.transact_write_items(
            TransactItems=[
                update(1, "after"),
                put(4, "new"),
                {"Delete": {"TableName": TABLE, "Key": key(2)}},
                must_not_exist(3),
            ]
        )

    assert texts(dynamodb) == before
    assert tables_copied == []


def test_a_completed_transaction_changes_each_item_it_names(dynamodb: Any, tables_copied: list[Any]) -> None:
    dynamodb.transact_write_items(
        TransactItems=[
            update(1, "after"),
            put(4, "new"),
            {"Delete": {"TableName": TABLE, "Key": key(2)}},
            must_not_exist(5),
        ]
    )

    assert texts(dynamodb) == {"1": "after", "3": "before 3", "4": "new"}
    assert tables_copied == []


def test_a_transaction_moto_refuses_midway_leaves_the_items_before_it_as_they_were(dynamodb: Any) -> None:
    """Two operations on one item: moto refuses at the second, after writing the first."""
    with pytest.raises(dynamodb.exceptions.ClientError):
        dynamodb.transact_write_items(TransactItems=[update(1, "after"), put(4, "new"), update(4, "again")])

    assert texts(dynamodb) == {"1": "before 1", "2": "before 2", "3": "before 3"}


def test_unpatched_moto_copies_the_whole_table(moto_aws: None, tables_copied: list[Any]) -> None:
    """The artefact itself, so that the tests above are known to be able to fail."""
    client = aws.client("dynamodb")
    client.transact_write_items(TransactItems=[put(1, "x")])

    assert len(tables_copied) == 1
