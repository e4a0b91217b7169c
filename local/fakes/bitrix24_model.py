"""What a Bitrix24 portal's records and REST answers look like, for the `bitrix24` stand-in.

Stage ids and their semantics, the portal's dates (its own time zone), a new contact's and deal's
fields as `crm.contact.get` / `crm.deal.get` return them (strings, as Bitrix24 has them), the
standard deal stages `crm.status.list` describes, and the shape of REST answers and errors
(`{"error": ..., "error_description": ...}`, the `time` block), with the parameter readers the
REST methods share.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from local.fakes.base import FakeRequest, FakeResponse, status_phrase
from local.fakes.emitting import php_params

PORTAL_OFFSET = timezone(timedelta(hours=3))  # the portal's time zone (Moscow, no DST)
STANDARD_STAGES = ("NEW", "PREPARATION", "PREPAYMENT_INVOICE", "EXECUTING", "FINAL_INVOICE")
SUCCESS_STAGES = frozenset({"WON"})
FAILURE_STAGES = frozenset({"LOSE", "APOLOGY"})
STAGE_NAMES = {
    "NEW": "New",
    "PREPARATION": "Preparing documents",
    "PREPAYMENT_INVOICE": "Invoice",
    "EXECUTING": "In progress",
    "FINAL_INVOICE": "Final invoice",
    "WON": "Deal won",
    "LOSE": "Deal lost",
    "APOLOGY": "Analyze failure",
}
# A contact's or deal's UTM fields, in Bitrix24's order: empty for what the stand-in creates.
NO_UTM: dict[str, None] = dict.fromkeys(
    ("UTM_SOURCE", "UTM_MEDIUM", "UTM_CAMPAIGN", "UTM_CONTENT", "UTM_TERM")
)
STAGE_ID = re.compile(r"^(?:C(?P<category>\d+):)?(?P<stage>[A-Z][A-Z0-9_]*)$")


def portal_time(seconds: int) -> str:
    """A Bitrix24 datetime: `2026-12-01T10:15:07+03:00`."""
    return datetime.fromtimestamp(seconds, PORTAL_OFFSET).isoformat(timespec="seconds")


def portal_date(seconds: int, days: int = 0) -> str:
    """A Bitrix24 date field (`BEGINDATE`, `CLOSEDATE`): the day at UTC midnight, in portal time."""
    day = datetime.fromtimestamp(seconds, PORTAL_OFFSET).date() + timedelta(days=days)
    return datetime(day.year, day.month, day.day, tzinfo=UTC).astimezone(PORTAL_OFFSET).isoformat()


def stage_semantic(stage_id: str) -> str:
    stage = stage_id.rpartition(":")[2]
    if stage in SUCCESS_STAGES:
        return "S"
    if stage in FAILURE_STAGES:
        return "F"
    return "P"


def full_stage_id(stage_id: str, category_id: int) -> str:
    """`NEW` in category 2 is `C2:NEW`; an already prefixed id must name the deal's category."""
    match = STAGE_ID.match(stage_id)
    if match is None:
        raise ValueError(f"stage_id {stage_id!r} is not a stage id such as NEW, WON or C2:NEW")
    if match["category"] is not None and int(match["category"]) != category_id:
        raise ValueError(f"stage {stage_id} belongs to category {match['category']}, not {category_id}")
    return match["stage"] if category_id == 0 else f"C{category_id}:{match['stage']}"


def new_contact(
    contact_id: int,
    name: str,
    phone: str | None,
    last_name: str | None,
    now: int,
    *,
    user_id: int,
    phone_entry_id: int,
) -> dict[str, Any]:
    """A contact as crm.contact.get returns it; the phone, if any, as entry `phone_entry_id`."""
    user = str(user_id)
    contact: dict[str, Any] = {
        "ID": str(contact_id),
        "POST": None,
        "COMMENTS": None,
        "HONORIFIC": None,
        "NAME": name,
        "SECOND_NAME": None,
        "LAST_NAME": last_name,
        "PHOTO": None,
        "LEAD_ID": None,
        "TYPE_ID": "CLIENT",
        "SOURCE_ID": "STORE",
        "SOURCE_DESCRIPTION": None,
        "COMPANY_ID": None,
        "BIRTHDATE": "",
        "EXPORT": "Y",
        "HAS_PHONE": "Y" if phone else "N",
        "HAS_EMAIL": "N",
        "HAS_IMOL": "N",
        "DATE_CREATE": portal_time(now),
        "DATE_MODIFY": portal_time(now),
        "ASSIGNED_BY_ID": user,
        "CREATED_BY_ID": user,
        "MODIFY_BY_ID": user,
        "OPENED": "Y",
        "ORIGINATOR_ID": None,
        "ORIGIN_ID": None,
        "ORIGIN_VERSION": None,
        "FACE_ID": None,
        "LAST_ACTIVITY_TIME": portal_time(now),
        "ADDRESS": None,
        **NO_UTM,
        "LAST_ACTIVITY_BY": user,
    }
    if phone:
        contact["PHONE"] = [
            {
                "ID": str(phone_entry_id),
                "VALUE_TYPE": "MOBILE",
                "VALUE": phone,
                "TYPE_ID": "PHONE",
            }
        ]
    return contact


def new_deal(
    deal_id: int, title: str, stage: str, category_id: int, contact_id: int | None, now: int, *, user_id: int
) -> dict[str, Any]:
    """A deal as crm.deal.get returns it, created at `now` in `stage` (a full stage id)."""
    user = str(user_id)
    semantic = stage_semantic(stage)
    return {
        "ID": str(deal_id),
        "TITLE": title,
        "TYPE_ID": "SALE",
        "STAGE_ID": stage,
        "PROBABILITY": None,
        "CURRENCY_ID": "RUB",
        "OPPORTUNITY": "0.00",
        "IS_MANUAL_OPPORTUNITY": "N",
        "TAX_VALUE": "0.00",
        "LEAD_ID": None,
        "COMPANY_ID": "0",
        "CONTACT_ID": None if contact_id is None else str(contact_id),
        "QUOTE_ID": None,
        "BEGINDATE": portal_date(now),
        "CLOSEDATE": portal_date(now, days=7),
        "ASSIGNED_BY_ID": user,
        "CREATED_BY_ID": user,
        "MODIFY_BY_ID": user,
        "DATE_CREATE": portal_time(now),
        "DATE_MODIFY": portal_time(now),
        "OPENED": "Y",
        "CLOSED": "N" if semantic == "P" else "Y",
        "COMMENTS": None,
        "ADDITIONAL_INFO": None,
        "LOCATION_ID": None,
        "CATEGORY_ID": str(category_id),
        "STAGE_SEMANTIC_ID": semantic,
        "IS_NEW": "Y" if stage.endswith("NEW") else "N",
        "IS_RECURRING": "N",
        "IS_RETURN_CUSTOMER": "N",
        "IS_REPEATED_APPROACH": "N",
        "SOURCE_ID": "STORE",
        "SOURCE_DESCRIPTION": None,
        "ORIGINATOR_ID": None,
        "ORIGIN_ID": None,
        "MOVED_BY_ID": user,
        "MOVED_TIME": portal_time(now),
        "LAST_ACTIVITY_TIME": portal_time(now),
        **NO_UTM,
        "LAST_ACTIVITY_BY": user,
    }


def deal_stages(entity: object) -> list[dict[str, Any]]:
    """crm.status.list's items for `DEAL_STAGE` or `DEAL_STAGE_<category>`: the standard stages."""
    match = re.fullmatch(r"DEAL_STAGE(?:_(\d+))?", str(entity))
    if match is None:
        return []
    category = int(match[1] or 0)
    items = []
    for sort, stage in enumerate((*STANDARD_STAGES, "WON", "LOSE", "APOLOGY"), start=1):
        semantic = stage_semantic(stage)
        items.append(
            {
                "ID": str(category * 100 + sort),
                "ENTITY_ID": str(entity),
                "STATUS_ID": full_stage_id(stage, category),
                "NAME": STAGE_NAMES[stage],
                "NAME_INIT": STAGE_NAMES[stage],
                "SORT": str(sort * 10),
                "SYSTEM": "Y" if stage in ("NEW", "WON", "LOSE") else "N",
                "CATEGORY_ID": str(category),
                "SEMANTICS": {"S": "S", "F": "F"}.get(semantic),
            }
        )
    return items


class RestError(Exception):
    """A method's own error: 400 with `error` (usually empty) and `error_description`."""

    def __init__(self, description: str, code: str = "") -> None:
        super().__init__(description)
        self.code = code


def rest_error(status: int, code: str, description: str) -> FakeResponse:
    return FakeResponse(
        status,
        {"error": code, "error_description": description},
        {"Content-Type": "application/json; charset=utf-8"},
    )


def invalid_credentials() -> FakeResponse:
    return rest_error(401, "INVALID_CREDENTIALS", "Invalid request credentials")


# The portal refused as a whole, by cause (REST docs, "Statuses and System Error Codes"): a plan
# without REST (the paid plan expired), the portal deleted, REST blocked by Bitrix24 support.
PORTAL_REFUSALS = {
    "unpaid": lambda: rest_error(403, "ACCESS_DENIED", "REST API is available only on commercial plans"),
    "deleted": lambda: rest_error(500, "PORTAL_DELETED", "Portal was deleted"),
    "blocked": lambda: rest_error(503, "OVERLOAD_LIMIT", "REST API is blocked due to overload"),
}


def injected_error(status: int, retry_after: int | None = None) -> FakeResponse:
    """An injected fault (`POST /_faults`) as the portal answers such a failure."""
    if retry_after is not None or status == 503:
        return rest_error(503, "QUERY_LIMIT_EXCEEDED", "Too many requests")
    if status == 429:
        return rest_error(429, "OPERATION_TIME_LIMIT", "Method is blocked due to operation time limit")
    if status >= 500:
        return rest_error(status, "INTERNAL_SERVER_ERROR", "Internal server error")
    if status == 401:
        return invalid_credentials()
    if status == 404:
        return rest_error(404, "ERROR_METHOD_NOT_FOUND", "Method not found!")
    if status == 403:
        return rest_error(403, "ACCESS_DENIED", "Access denied")
    return rest_error(status, "", status_phrase(status) if status != 400 else "Not found")


def list_page(
    items: list[Any], params: Mapping[str, Any], size: int = 50
) -> tuple[list[Any], dict[str, Any]]:
    """A list method's page from `start` (50 a page), with `total`, and `next` when more remain;
    `start: -1` is Bitrix24's mode without a count: the first page, no `total`, no `next`."""
    if str(params.get("start", "")).strip() == "-1":
        return items[:size], {}
    start = start_param(params)
    extra: dict[str, Any] = {"total": len(items)}
    if start + size < len(items):
        extra["next"] = start + size
    return items[start : start + size], extra


def rest_timing(started: float) -> dict[str, Any]:
    finished = time.time()
    return {
        "start": started,
        "finish": finished,
        "duration": finished - started,
        "processing": finished - started,
        "date_start": datetime.fromtimestamp(started, PORTAL_OFFSET).isoformat(timespec="seconds"),
        "date_finish": datetime.fromtimestamp(finished, PORTAL_OFFSET).isoformat(timespec="seconds"),
        "operating_reset_at": int(finished) + 600,
        "operating": 0,
    }


def rest_id(params: Mapping[str, Any]) -> int:
    """`id` or `ID`, a positive integer (a number or its digits)."""
    value = params.get("id", params.get("ID"))
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise RestError("ID is not defined or invalid.")
    return value


def nested_param(params: Mapping[str, Any], name: str) -> dict[str, Any]:
    """`filter` as a JSON object, or `filter[KEY]=value` form/query fields."""
    value = params.get(name)
    if isinstance(value, dict):
        return value
    prefix = f"{name}["
    return {
        key[len(prefix) : -1]: item
        for key, item in params.items()
        if key.startswith(prefix) and key.endswith("]")
    }


def start_param(params: Mapping[str, Any]) -> int:
    value = params.get("start", 0)
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


def copy_contact(contact: dict[str, Any]) -> dict[str, Any]:
    copied = dict(contact)
    if "PHONE" in copied:
        copied["PHONE"] = [dict(entry) for entry in copied["PHONE"]]
    return copied


def rest_params(request: FakeRequest) -> dict[str, Any]:
    """A REST call's parameters: query and form fields read as PHP reads them
    (`filter[>ID]=5&select[]=ID`), then a JSON body's."""
    params = php_params(request.field_pairs())
    document = request.json()
    if isinstance(document, dict):
        params.update(document)
    return params


def field_strings(document: Mapping[str, Any]) -> dict[str, str]:
    """Control-endpoint field values as Bitrix24 stores them: strings (numbers allowed in JSON)."""
    fields = {}
    for key, value in document.items():
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ValueError(f"{key} must be a string or a number")
        fields[key] = value if isinstance(value, str) else str(value)
    return fields
