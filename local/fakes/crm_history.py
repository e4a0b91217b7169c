"""The CRMs' own records of stage changes, as the stand-ins serve them (`bitrix24`, `amocrm`).

- `StageHistory`: a Bitrix24 portal's stage history of deals, and `crm.stagehistory.list` over
  it (`entityTypeId`, `order`, `filter` with Bitrix24's prefixes, `select`, `start`; 50 a page);
- `change_time`: when a control body says a change happened (`at`, `created_at` or
  `age_seconds`), so tests can build a week-old deal or a move made 20 minutes ago.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from local.fakes.bitrix24_model import PORTAL_OFFSET, RestError, list_page, portal_time, stage_semantic


def change_time(document: Mapping[str, Any], now: int, *, names: tuple[str, ...] = ("at",)) -> int | None:
    """When a control body dates its change: one of `names` (unix seconds) or `age_seconds`
    (that long before `now`); None when it names neither. ValueError for a time after `now`."""
    given = [name for name in (*names, "age_seconds") if document.get(name) is not None]
    if not given:
        return None
    if len(given) > 1:
        raise ValueError(f"give one of {', '.join(given)}, not several")
    name, value = given[0], document[given[0]]
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"{name} must be a number of seconds >= 0")
    when = now - int(value) if name == "age_seconds" else int(value)
    if when > now:
        raise ValueError(f"{name} is in the future (now is {now})")
    return when


def not_after(at: int | None, now: int, name: str) -> int:
    """`at` (unix seconds) when given, else `now`; ValueError for a time after `now`."""
    if at is None:
        return now
    if isinstance(at, bool) or not isinstance(at, int) or at > now:
        raise ValueError(f"{name} must be unix seconds, not after now ({now})")
    return at


def _values(value: Any) -> list[Any]:
    """A filter value as a list: a JSON list, a PHP `a[]=` list or `a[0]=` object, or one value."""
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        return list(value.values())
    return [value]


# -- Bitrix24: crm.stagehistory.list ---------------------------------------------------------------
ENTITY_DEAL = 2
EMPTY_ENTITY_TYPES = frozenset({1, 5})  # leads, old invoices: served, with no records here
PAGE_SIZE = 50
TYPE_CREATED, TYPE_MOVED, TYPE_FINAL = 1, 2, 3
HISTORY_FIELDS = ("ID", "TYPE_ID", "OWNER_ID", "CREATED_TIME", "CATEGORY_ID", "STAGE_SEMANTIC_ID", "STAGE_ID")
_INT_FIELDS = frozenset({"ID", "TYPE_ID", "OWNER_ID", "CATEGORY_ID"})
# Longest first: `>=` before `>`, `!@` and `!=` before `!`.
_PREFIXES = (">=", "<=", "!=", "!@", ">", "<", "=", "!", "@")


def _history_time(value: Any) -> int:
    """A CREATED_TIME filter value as unix seconds: ISO 8601 with any offset (none: the portal's)."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(value)
    if isinstance(value, int):
        return value
    parsed = datetime.fromisoformat(value.strip())
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=PORTAL_OFFSET)
    return int(parsed.timestamp())


class StageHistory:
    """A portal's stage history of deals, the records the caller adds under its own lock."""

    def __init__(self) -> None:
        self._records: list[dict[str, Any]] = []
        self._ids = itertools.count(1)

    def add(self, type_id: int, deal_id: int, at: int, category_id: int, stage_id: str) -> None:
        self._records.append(
            {
                "ID": next(self._ids),
                "TYPE_ID": type_id,
                "OWNER_ID": deal_id,
                "CREATED_TIME": at,  # unix seconds; written in portal time when listed
                "CATEGORY_ID": category_id,
                "STAGE_SEMANTIC_ID": stage_semantic(stage_id),
                "STAGE_ID": stage_id,
            }
        )

    def created(self, deal_id: int, at: int, category_id: int, stage_id: str) -> None:
        self.add(TYPE_CREATED, deal_id, at, category_id, stage_id)

    def moved(self, deal_id: int, at: int, category_id: int, stage_id: str) -> None:
        final = stage_semantic(stage_id) != "P"
        self.add(TYPE_FINAL if final else TYPE_MOVED, deal_id, at, category_id, stage_id)

    def last_time(self, deal_id: int) -> int | None:
        times = [record["CREATED_TIME"] for record in self._records if record["OWNER_ID"] == deal_id]
        return max(times) if times else None

    def query(self, params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """`crm.stagehistory.list`: (result, extra) as Bitrix24 answers it; RestError (400) else."""
        entity = params.get("entityTypeId", 0)
        if isinstance(entity, str) and entity.strip().isdigit():
            entity = int(entity)
        if entity in EMPTY_ENTITY_TYPES and not isinstance(entity, bool):
            return {"items": []}, {"total": 0}
        if entity != ENTITY_DEAL or isinstance(entity, bool):
            raise RestError(f"Entity type {entity} is not supported", "ENTITY_TYPE_NOT_SUPPORTED")
        conditions = [self._condition(key, value) for key, value in _mapping(params.get("filter")).items()]
        records = [record for record in self._records if all(test(record) for test in conditions)]
        for field, descending in reversed([*self._order(params.get("order")), ("ID", False)]):
            records.sort(key=operator.itemgetter(field), reverse=descending)
        fields = self._select(params.get("select"))
        page, extra = list_page(records, params, PAGE_SIZE)
        items = [
            {
                field: portal_time(record[field]) if field == "CREATED_TIME" else record[field]
                for field in fields
            }
            for record in page
        ]
        return {"items": items}, extra

    @staticmethod
    def _condition(key: str, value: Any) -> Callable[[dict[str, Any]], bool]:
        prefix = next((prefix for prefix in _PREFIXES if key.startswith(prefix)), "")
        field = key[len(prefix) :]
        if field not in HISTORY_FIELDS:
            raise RestError(f"Invalid filter: field '{field}' is not allowed in filter", "INVALID_ARG_VALUE")
        invalid = RestError(f"Invalid filter: field '{field}' has invalid value", "INVALID_ARG_VALUE")
        convert: Callable[[Any], Any] = str
        if field in _INT_FIELDS:
            convert = int
        elif field == "CREATED_TIME":
            convert = _history_time
        if any(isinstance(item, bool | list | dict) or item is None for item in _values(value)):
            raise invalid
        try:
            wanted = [convert(item) for item in _values(value)]
        except (TypeError, ValueError):
            raise invalid from None
        if prefix in ("", "=", "!", "!=", "@", "!@"):
            negate = prefix in ("!", "!=", "!@")
            return lambda record: (record[field] in wanted) != negate
        if len(wanted) != 1:
            raise invalid
        target = wanted[0]
        compare = {
            ">": lambda have: have > target,
            ">=": lambda have: have >= target,
            "<": lambda have: have < target,
            "<=": lambda have: have <= target,
        }[prefix]
        return lambda record: bool(compare(record[field]))

    @staticmethod
    def _order(order: Any) -> list[tuple[str, bool]]:
        keys = []
        for field, direction in _mapping(order).items():
            if field not in HISTORY_FIELDS:
                raise RestError(
                    f"Invalid order: field '{field}' is not allowed in order", "INVALID_ARG_VALUE"
                )
            if not isinstance(direction, str) or direction.upper() not in ("ASC", "DESC"):
                raise RestError(
                    f"Invalid order: allowed sort directions are ASC, DESC. But got '{direction}' "
                    f"for field '{field}'",
                    "INVALID_ARG_VALUE",
                )
            keys.append((field, direction.upper() == "DESC"))
        return keys

    @staticmethod
    def _select(select: Any) -> tuple[str, ...]:
        wanted = {str(item) for item in _values(select)} if select not in (None, "", [], {}) else {"*"}
        if "*" in wanted:
            return HISTORY_FIELDS
        return tuple(field for field in HISTORY_FIELDS if field in wanted) or HISTORY_FIELDS


def _mapping(value: Any) -> dict[str, Any]:
    if value in (None, "", []):
        return {}
    if not isinstance(value, dict):
        raise RestError("Parameter must be an object (an array of key => value)", "INVALID_ARG_VALUE")
    return value
