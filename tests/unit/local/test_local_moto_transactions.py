"""Transactions and queries on the local moto server cost what their items cost (`local.moto_dynamodb`).

moto deep-copies every table a `TransactWriteItems` names, before it runs, to roll back a
cancelled one: the journal's whole table, once per transaction. A long campaign's moto server grew
to 23 GB on those copies and was killed. And each query sorted the whole table first. The outcome
must stay DynamoDB's: a cancelled transaction changes nothing, a completed one changes each item
it names, a query's pages and a scan's come in the same order.
"""

from __future__ import annotations

import copy
import sys
import threading
from typing import Any

import pytest
from moto.dynamodb.models import DynamoDBBackend, dynamodb_backends
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table

from local.moto_dynamodb import (
    DYNAMODB_ITEM_WRITES,
    TABLE_READS,
    make_dynamodb_item_writes_atomic,
    query_without_sorting_the_table,
)
from pipeline import aws
from pipeline.sms.journal import BY_STATE_INDEX
from tests.unit.consumer_support import CONVERSATIONS_TABLE as TABLE
from tests.unit.consumer_support import JOURNAL_TABLE
from tests.unit.sms.conftest import add_by_state_index


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


# -- queries -----------------------------------------------------------------------------------------
STATES = ("pending", "sending", "accepted")


@pytest.fixture
def journal(moto_aws: None, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The journal with its `by_state` index and 300 records, most `accepted`; moto's own reads
    come back after the test."""
    for name in TABLE_READS:
        monkeypatch.setattr(Table, name, getattr(Table, name))
    client = aws.client("dynamodb")
    add_by_state_index(client)
    for n in reversed(range(300)):  # written out of key order
        state = STATES[0 if n % 50 == 0 else 1 if n % 60 == 0 else 2]
        since = f"2026-12-03T04:{n % 60:02d}:00.000Z"
        client.put_item(
            TableName=JOURNAL_TABLE,
            Item={"id": {"S": f"sms#{n:04d}"}, "sms_state": {"S": state}, "state_since": {"S": since}},
        )
    return client


def every_page(client: Any, state: str, forward: bool) -> list[list[str]]:
    query = {
        "TableName": JOURNAL_TABLE,
        "IndexName": BY_STATE_INDEX,
        "KeyConditionExpression": "sms_state = :s AND state_since > :t",
        "ExpressionAttributeValues": {":s": {"S": state}, ":t": {"S": "2026-12-03T04:00:00.000Z"}},
        "ScanIndexForward": forward,
        "Limit": 2,
    }
    pages = []
    while True:
        page = client.query(**query)
        pages.append([item["id"]["S"] for item in page["Items"]])
        if "LastEvaluatedKey" not in page:
            return pages
        query["ExclusiveStartKey"] = page["LastEvaluatedKey"]


@pytest.fixture
def comparisons(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times two `DynamoType`s are ordered."""
    counted: list[int] = []
    less_than = DynamoType.__lt__

    def counting(self: DynamoType, other: DynamoType) -> bool:
        counted.append(1)
        return less_than(self, other)

    monkeypatch.setattr(DynamoType, "__lt__", counting)
    return counted


def test_an_index_query_answers_as_moto_does_without_ordering_the_table(
    journal: Any, comparisons: list[int]
) -> None:
    expected = {
        (state, forward): every_page(journal, state, forward) for state in STATES for forward in (True, False)
    }
    scanned = journal.scan(TableName=JOURNAL_TABLE, Limit=7)["Items"]
    query_without_sorting_the_table()
    comparisons.clear()

    pending = every_page(journal, "pending", True)

    assert pending == expected[("pending", True)]
    assert len(comparisons) < 300  # the six matches ordered; moto ordered the 300 items first
    for (state, forward), pages in expected.items():
        assert every_page(journal, state, forward) == pages
    assert journal.scan(TableName=JOURNAL_TABLE, Limit=7)["Items"] == scanned


def test_a_query_while_another_request_adds_items_reads_the_table_as_it_was(journal: Any) -> None:
    """Reads take no lock: moto iterated the table's item dictionary live, and a query while a
    write added an item failed ("dictionary changed size during iteration": a 500; 45 of them
    in a long campaign's moto log). The query copies it first."""
    query_without_sorting_the_table()
    region = journal.meta.region_name
    table = next(
        regions[region].get_table(JOURNAL_TABLE)
        for regions in dynamodb_backends.values()
        if JOURNAL_TABLE in regions[region].tables
    )

    def write_new_items() -> None:
        for n in range(1000, 3000):
            table.put_item({"id": {"S": f"sms#{n:06d}"}, "sms_state": {"S": "sending"}})

    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # threads take turns often
    writer = threading.Thread(target=write_new_items)
    writer.start()
    try:
        while writer.is_alive():
            assert every_page(journal, "pending", True)
    finally:
        writer.join()
        sys.setswitchinterval(switch_interval)
