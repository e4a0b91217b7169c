"""The CRMs' own records of stage changes, as the stand-ins serve them (`bitrix24`, `amocrm`).

- `StageHistory`: a Bitrix24 portal's stage history of deals, and `crm.stagehistory.list` over
  it (`entityTypeId`, `order`, `filter` with Bitrix24's prefixes, `select`, `start`; 50 a page);
- `EventFeed`: an amoCRM account's events (`lead_added`, `lead_status_changed`) and
  `GET /api/v4/events` over them (`filter[...]`, `limit`, `page`; newest first);
- `LateRows`, both histories' base: rows that become visible late, deleted rows, a hook between
  two list queries (what a reader of a busy CRM meets; the sweep's tests use them);
- `change_time`: when a control body says a change happened (`at`, `created_at` or
  `age_seconds`), so tests can build a week-old deal or a move made 20 minutes ago.
"""

from __future__ import annotations

import itertools
import operator
import random
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
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


class LateRows:
    """What a CRM's history does to a reader, as a database under load does (both stand-ins):

    - `hide_new`: rows written while it is set take their id (and time) now but stay invisible
      until `reveal()`, as a transaction committed after a later one was read;
    - `delete(id)`: a row removed (a person deleting a history entry, a deal's cleanup);
    - `after_query`: called after each list query is answered (under the stand-in's lock: it may
      use these methods, not the stand-in's own), so a test can delete or reveal a row between
      two pages of one read.
    """

    def __init__(self) -> None:
        self.hide_new = False
        self.hidden: set[Any] = set()
        self.after_query: Callable[[], None] | None = None
        # Every row's id in the order written (deleted ones too; amoCRM: its status changes).
        self.written: list[Any] = []

    def reveal(self) -> int:
        """Make every hidden row visible; how many there were."""
        count = len(self.hidden)
        self.hidden.clear()
        return count

    def _queried(self) -> None:
        if self.after_query is not None:
            self.after_query()


class StageHistory(LateRows):
    """A portal's stage history of deals, the records the caller adds under its own lock."""

    def __init__(self) -> None:
        super().__init__()
        self._records: list[dict[str, Any]] = []
        self._ids = itertools.count(1)

    def delete(self, record_id: int) -> None:
        self._records = [record for record in self._records if record["ID"] != record_id]

    def add(self, type_id: int, deal_id: int, at: int, category_id: int, stage_id: str) -> None:
        record_id = next(self._ids)
        self.written.append(record_id)
        if self.hide_new:
            self.hidden.add(record_id)
        self._records.append(
            {
                "ID": record_id,
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

    def query(
        self, params: Mapping[str, Any], visible: Callable[[int], bool] = lambda deal_id: True
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """`crm.stagehistory.list`: (result, extra) as Bitrix24 answers it; RestError (400) else.
        Records of a deal not `visible` to the webhook's user are left out, as the portal does."""
        entity = params.get("entityTypeId", 0)
        if isinstance(entity, str) and entity.strip().isdigit():
            entity = int(entity)
        if entity in EMPTY_ENTITY_TYPES and not isinstance(entity, bool):
            return {"items": []}, {"total": 0}
        if entity != ENTITY_DEAL or isinstance(entity, bool):
            raise RestError(f"Entity type {entity} is not supported", "ENTITY_TYPE_NOT_SUPPORTED")
        conditions = [self._condition(key, value) for key, value in _mapping(params.get("filter")).items()]
        records = [
            record
            for record in self._records
            if record["ID"] not in self.hidden
            and all(test(record) for test in conditions)
            and visible(record["OWNER_ID"])
        ]
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
        self._queried()
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


# -- amoCRM: GET /api/v4/events --------------------------------------------------------------------
EVENT_LIMIT_DEFAULT = 50
EVENT_LIMIT_MAX = 100
MAX_ENTITY_IDS = 10
_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


class EventQueryError(ValueError):
    """A query amoCRM refuses (400): the message, and the parameter's path (`filter.entity_id`)."""

    def __init__(self, detail: str, path: str) -> None:
        super().__init__(detail)
        self.path = path


class EventFeed(LateRows):
    """An account's events, newest first when listed; thread-safe on its own (`after_query` is
    called outside its lock)."""

    def __init__(self, account_id: int, user_id: int, first_note_id: int = 52000001) -> None:
        super().__init__()
        self.account_id = account_id
        self.user_id = user_id
        self._events: list[dict[str, Any]] = []
        self._sequence = itertools.count(1)
        self._note_ids = itertools.count(first_note_id)
        self._lock = threading.Lock()

    def _event_id(self, created_at: int) -> str:
        """26 lowercase Crockford base32 characters, ordered by time then by creation (ULID-like)."""
        value = (created_at * 1000) << 80 | next(self._sequence) << 48 | random.getrandbits(48)
        return "".join(_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))

    def lead_added(self, lead_id: int, created_at: int) -> None:
        """A new lead: amoCRM's `lead_added` carries a note in value_after, not the status."""
        with self._lock:
            note = {"note": {"id": next(self._note_ids)}}
            self._add("lead_added", lead_id, created_at, [], [note])

    def lead_status_changed(
        self, lead_id: int, created_at: int, before: tuple[int, int], after: tuple[int, int]
    ) -> None:
        """A move from (status_id, pipeline_id) `before` to `after`."""
        with self._lock:
            self._add(
                "lead_status_changed",
                lead_id,
                created_at,
                [{"lead_status": {"id": before[0], "pipeline_id": before[1]}}],
                [{"lead_status": {"id": after[0], "pipeline_id": after[1]}}],
            )

    def delete(self, event_id: str) -> None:
        with self._lock:
            self._events = [event for event in self._events if event["id"] != event_id]

    def _add(self, kind: str, lead_id: int, created_at: int, before: list[Any], after: list[Any]) -> None:
        event_id = self._event_id(created_at)
        if kind == "lead_status_changed":
            self.written.append(event_id)
        if self.hide_new:
            self.hidden.add(event_id)
        self._events.append(
            {
                "id": event_id,
                "type": kind,
                "entity_id": lead_id,
                "entity_type": "lead",
                "created_by": self.user_id,
                "created_at": created_at,
                "value_after": after,
                "value_before": before,
                "account_id": self.account_id,
            }
        )

    def last_time(self, lead_id: int) -> int | None:
        """When the lead's latest event happened (its creation or a move); None without any."""
        with self._lock:
            times = [event["created_at"] for event in self._events if event["entity_id"] == lead_id]
        return max(times) if times else None

    def event(self, event_id: str, base_url: str) -> dict[str, Any] | None:
        with self._lock:
            found = next((event for event in self._events if event["id"] == event_id), None)
            return None if found is None else _event_document(found, base_url)

    def query(
        self,
        params: Mapping[str, Any],
        pairs: Iterable[tuple[str, str]],
        base_url: str,
        visible: Callable[[int], bool] = lambda lead_id: True,
    ) -> dict[str, Any] | None:
        """`GET /api/v4/events`: the page's HAL document, None when it has no events (204).

        `params` is the query read PHP-style, `pairs` the query as sent (for the links). Events of
        a lead not `visible` to the token's user are left out, as amoCRM does."""
        limit = _bounded_int(params.get("limit"), "limit", EVENT_LIMIT_DEFAULT, EVENT_LIMIT_MAX)
        page = _bounded_int(params.get("page"), "page", 1, None)
        tests = _event_filters(params.get("filter"))
        with self._lock:
            events = [
                event
                for event in self._events
                if event["id"] not in self.hidden
                and all(test(event) for test in tests)
                and visible(event["entity_id"])
            ]
            events.sort(key=lambda event: (event["created_at"], event["id"]), reverse=True)
            chosen = [_event_document(event, base_url) for event in events[(page - 1) * limit : page * limit]]
        self._queried()
        if not chosen:
            return None
        kept = [(key, value) for key, value in pairs if key not in ("page", "limit")]

        def href(number: int) -> dict[str, str]:
            query = urllib.parse.urlencode([*kept, ("page", str(number)), ("limit", str(limit))])
            return {"href": f"{base_url}/api/v4/events?{query}"}

        links = {"self": href(page)}
        if page * limit < len(events):
            links["next"] = href(page + 1)
        return {"_page": page, "_links": links, "_embedded": {"events": chosen}}


def _event_document(event: Mapping[str, Any], base_url: str) -> dict[str, Any]:
    document = {key: value for key, value in event.items()}
    document["_links"] = {"self": {"href": f"{base_url}/api/v4/events/{event['id']}"}}
    entity = event["entity_id"]
    document["_embedded"] = {
        "entity": {"id": entity, "_links": {"self": {"href": f"{base_url}/api/v4/leads/{entity}"}}}
    }
    return document


def _bounded_int(value: Any, name: str, default: int, maximum: int | None) -> int:
    if value in (None, ""):
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise EventQueryError(f"{name} must be an integer", name) from None
    if number < 1 or (maximum is not None and number > maximum):
        limit = f" and at most {maximum}" if maximum is not None else ""
        raise EventQueryError(f"{name} must be at least 1{limit}", name)
    return number


def _listed(value: Any) -> list[str]:
    """`a`, `a,b`, `a[]=..`, `a[0]=..`: the strings it names (none for None)."""
    if value is None:
        return []
    return [part.strip() for item in _values(value) for part in str(item).split(",") if part.strip()]


def _listed_ints(value: Any, path: str) -> list[int]:
    try:
        return [int(item) for item in _listed(value)]
    except ValueError:
        raise EventQueryError(f"{path} must be integers", path) from None


def _event_filters(document: Any) -> list[Callable[[Mapping[str, Any]], bool]]:
    if document in (None, ""):
        return []
    if not isinstance(document, dict):
        raise EventQueryError("filter must be an object, e.g. filter[type]=lead_status_changed", "filter")
    tests: list[Callable[[Mapping[str, Any]], bool]] = []
    if "id" in document:
        ids = set(_listed(document["id"]))
        tests.append(lambda event: event["id"] in ids)
    if "type" in document:
        types = set(_listed(document["type"]))
        tests.append(lambda event: event["type"] in types)
    entities = _listed(document.get("entity"))
    if entities:
        tests.append(lambda event: event["entity_type"] in entities)
    if "entity_id" in document:
        if len(entities) != 1:
            raise EventQueryError(
                "filter[entity_id] needs filter[entity] with exactly one entity type", "filter.entity_id"
            )
        entity_ids = _listed_ints(document["entity_id"], "filter.entity_id")
        if len(entity_ids) > MAX_ENTITY_IDS:
            raise EventQueryError(f"at most {MAX_ENTITY_IDS} filter[entity_id] values", "filter.entity_id")
        tests.append(lambda event: event["entity_id"] in entity_ids)
    if "created_by" in document:
        users = _listed_ints(document["created_by"], "filter.created_by")
        tests.append(lambda event: event["created_by"] in users)
    if "created_at" in document:
        tests.append(_created_at_filter(document["created_at"]))
    for side in ("value_before", "value_after"):
        if side in document:
            tests.append(_status_filter(side, document[side]))
    return tests


def _created_at_filter(value: Any) -> Callable[[Mapping[str, Any]], bool]:
    """`[from]`/`[to]` (inclusive), or one timestamp (from then on), or `from,to`."""
    if isinstance(value, dict) and ({"from", "to"} & set(value)):
        bounds = [value.get("from"), value.get("to")]
    else:
        bounds = [*_listed(value), None][:2]
    try:
        low, high = (None if bound in (None, "") else int(bound) for bound in bounds)
    except (TypeError, ValueError):
        raise EventQueryError("filter[created_at] must be unix timestamps", "filter.created_at") from None
    return lambda event: (
        (low is None or event["created_at"] >= low) and (high is None or event["created_at"] <= high)
    )


def _status_filter(side: str, value: Any) -> Callable[[Mapping[str, Any]], bool]:
    """`filter[value_after][leads_statuses][0][pipeline_id]=..&...[status_id]=..`."""
    statuses = value.get("leads_statuses") if isinstance(value, dict) else None
    if statuses is None:
        raise EventQueryError(f"filter[{side}] takes leads_statuses here", f"filter.{side}")
    try:
        wanted = {
            (int(entry["status_id"]), int(entry["pipeline_id"]))
            for entry in _values(statuses)
            if isinstance(entry, dict)
        }
    except (KeyError, TypeError, ValueError):
        raise EventQueryError(
            f"filter[{side}][leads_statuses][N] needs status_id and pipeline_id", f"filter.{side}"
        ) from None
    return lambda event: (
        event["type"] == "lead_status_changed"
        and any(
            (item["lead_status"]["id"], item["lead_status"]["pipeline_id"]) in wanted for item in event[side]
        )
    )
