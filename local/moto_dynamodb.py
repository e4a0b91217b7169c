"""DynamoDB's write rules for the local moto server: each item write whole, transactions cheap.

moto 5.x reads an item, checks the condition and writes it in steps, and the threaded server
runs requests side by side: two `UpdateItem`s of an item that does not exist yet each create it
and the attributes of one are lost (`store` and `ai` write the same conversation item at the same
moment), and two conditional writes can both pass their condition. One lock around the backend's
item writes makes each a single step; reads do not wait.

moto's `TransactWriteItems` backs up every table it names with a deep copy before it starts, to
roll back a cancelled transaction: the journal's whole table once per transaction. A long chaos
campaign's journal holds tens of thousands of items, so each transaction cost more than the last
and the server grew to 23 GB until the kernel killed it. Here a transaction backs up only the items
it names and puts them back when it is cancelled: the same outcome, since under the lock nothing
else writes while it runs.

moto's `Query` starts from every item of the table, sorted by its key with `DynamoType`
comparisons, then filters and sorts the matches again by the index's keys and the table's: the
reconciler's `by_state` queries sorted the whole journal every few seconds. A query here starts
from the items unsorted (its own sort orders the matches completely), and a scan's sort compares
the keys' values once computed, in the same order. Reads take no lock, so both copy the table's
item dictionaries before iterating them (moto iterated them live: a query while another request
added an item failed with "dictionary changed size during iteration", a 500).
"""

from __future__ import annotations

import copy
import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# The DynamoDB backend's writes that read an item, check it and write it in steps.
DYNAMODB_ITEM_WRITES = ("put_item", "update_item", "delete_item", "transact_write_items")

# (table, hash key, range key, the item as it was or None): what a cancelled transaction restores.
Saved = tuple[Any, Any, Any, Any]


def make_dynamodb_item_writes_atomic() -> None:
    """Make each DynamoDB item write whole, as DynamoDB's are, and transactions back up only their
    own items (module docstring)."""
    from moto.dynamodb.models import DynamoDBBackend

    lock = threading.RLock()

    def locked(write: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(write)
        def write_alone(*args: Any, **kwargs: Any) -> Any:
            with lock:
                return write(*args, **kwargs)

        return write_alone

    transact = DynamoDBBackend.transact_write_items

    def transact_backing_up_its_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        saved = _save_named_items(self, transact_items)
        try:
            with _tables_not_copied():
                transact(self, transact_items)
        except Exception:
            _restore(saved)
            raise

    DynamoDBBackend.transact_write_items = transact_backing_up_its_items  # type: ignore[method-assign]
    for name in DYNAMODB_ITEM_WRITES:
        setattr(DynamoDBBackend, name, locked(getattr(DynamoDBBackend, name)))


# What `query_without_sorting_the_table` replaces on moto's `Table` (a test puts them back).
TABLE_READS = ("query", "all_items")
_in_query = threading.local()


def query_without_sorting_the_table() -> None:
    """A query starts from the table's items unsorted; a scan sorts them on computed keys (module
    docstring)."""
    from moto.dynamodb.models.table import Table

    query = Table.query

    def query_unsorted(self: Any, *args: Any, **kwargs: Any) -> Any:
        _in_query.active = True
        try:
            return query(self, *args, **kwargs)
        finally:
            _in_query.active = False

    def all_items(self: Any) -> list[Any]:
        # `list(...)` of a dict copies it in one step (C code, under the GIL): a write on another
        # thread adding an item meanwhile cannot break the iteration (reads do not take the lock).
        hash_sets = list(self.items.values())
        items = (
            [item for hash_set in hash_sets for item in list(hash_set.values())]
            if self.range_key_attr
            else hash_sets
        )
        if getattr(_in_query, "active", False):
            return items
        # moto's order: (hash, range) when the item has a range key, else hash; compared as
        # DynamoType compares, on `cast_value`.
        return sorted(items, key=_table_order)

    def _table_order(item: Any) -> Any:
        if item.range_key:
            return (item.hash_key.cast_value, item.range_key.cast_value)
        return item.hash_key.cast_value

    Table.query = query_unsorted  # type: ignore[method-assign]
    Table.all_items = all_items  # type: ignore[method-assign]


def _save_named_items(backend: Any, transact_items: list[dict[str, Any]]) -> list[Saved]:
    """A copy of each item the transaction names (None for one not there yet); an operation moto
    will refuse is skipped here, moto raises its error."""
    saved: list[Saved] = []
    for entry in transact_items:
        try:
            op_type, op = next(iter(entry.items()))
            table = backend.get_table(op["TableName"])
            key = op["Key"] if op_type != "Put" else _key_of(table, op["Item"])
            hash_key, range_key = backend.get_keys_value(table, key)
        except Exception:  # noqa: S112 - moto answers for a malformed operation itself
            continue
        saved.append((table, hash_key, range_key, copy.deepcopy(table.get_item(hash_key, range_key))))
    return saved


def _key_of(table: Any, attributes: dict[str, Any]) -> dict[str, Any]:
    key = {table.hash_key_attr: attributes[table.hash_key_attr]}
    if table.range_key_attr is not None:
        key[table.range_key_attr] = attributes[table.range_key_attr]
    return key


def _restore(saved: list[Saved]) -> None:
    for table, hash_key, range_key, item in reversed(saved):
        if item is None:
            table.delete_item(hash_key, range_key)
        elif range_key is not None:
            table.items[hash_key][range_key] = item
        else:
            table.items[hash_key] = item


@contextmanager
def _tables_not_copied() -> Iterator[None]:
    """moto's own backup, while it runs, is the table itself: its rollback puts back the same table,
    and `_restore` the items. Only a transaction deep-copies a table; under the lock, one at a time."""
    from moto.dynamodb.models.table import Table

    assert "__deepcopy__" not in Table.__dict__, "moto's Table copies itself now: revisit this patch"
    Table.__deepcopy__ = lambda self, memo: self  # type: ignore[attr-defined]
    try:
        yield
    finally:
        del Table.__deepcopy__  # type: ignore[attr-defined]
