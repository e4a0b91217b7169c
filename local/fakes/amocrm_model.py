"""What an amoCRM account's records and API answers look like, for the `amocrm` stand-in.

A new contact's and lead's fields as `GET /api/v4/contacts/<id>` and `/leads/<id>` return them,
the fields of one lead in a `leads[status]` webhook, and the API's error documents
(`application/problem+json`, with `validation-errors` for a query it refuses).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from local.fakes.base import FakeResponse, status_phrase

HAL_JSON = "application/hal+json"
PROBLEM_JSON = "application/problem+json"
# amoCRM's system statuses, the same in every pipeline: "successfully realized" and "closed, not realized".
WON_STATUS_ID = 142
LOST_STATUS_ID = 143
# The account's one user (the long-lived token's owner) and its phone field.
USER_ID = 10000698
PHONE_FIELD_ID = 1138181
PHONE_ENUM_ID = 718323

# The fields of one lead in a `leads[status]` webhook, in amoCRM's order.
STATUS_FIELDS = (
    "id",
    "name",
    "status_id",
    "old_status_id",
    "price",
    "responsible_user_id",
    "last_modified",
    "modified_user_id",
    "created_user_id",
    "date_create",
    "pipeline_id",
    "old_pipeline_id",
    "account_id",
    "created_at",
    "updated_at",
)


def new_contact(contact_id: int, name: str, phone: str | None, now: int, account_id: int) -> dict[str, Any]:
    """A contact as `GET /api/v4/contacts/<id>` has it (before its links)."""
    first, _, last = name.strip().partition(" ")
    return {
        "id": contact_id,
        "name": name,
        "first_name": first,
        "last_name": last,
        "responsible_user_id": USER_ID,
        "group_id": 0,
        "created_by": USER_ID,
        "updated_by": USER_ID,
        "created_at": now,
        "updated_at": now,
        "closest_task_at": None,
        "is_deleted": False,
        "is_unsorted": False,
        "custom_fields_values": phone_fields(phone),
        "account_id": account_id,
    }


def new_lead(
    lead_id: int, name: str, pipeline_id: int, status_id: int, now: int, account_id: int
) -> dict[str, Any]:
    """A lead as `GET /api/v4/leads/<id>` has it (before its links and embedded contacts)."""
    return {
        "id": lead_id,
        "name": name,
        "price": 0,
        "responsible_user_id": USER_ID,
        "group_id": 0,
        "status_id": status_id,
        "pipeline_id": pipeline_id,
        "loss_reason_id": None,
        "created_by": USER_ID,
        "updated_by": USER_ID,
        "created_at": now,
        "updated_at": now,
        "closed_at": now if status_id in (WON_STATUS_ID, LOST_STATUS_ID) else None,
        "closest_task_at": None,
        "is_deleted": False,
        "custom_fields_values": None,
        "score": None,
        "account_id": account_id,
        "labor_cost": None,
    }


def positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer")


def status_change(change: object) -> tuple[int, int, int | None]:
    if not isinstance(change, tuple | list) or len(change) not in (2, 3):
        raise ValueError(f"a status change is (lead_id, status_id[, pipeline_id]), not {change!r}")
    for name, value in zip(("lead_id", "status_id", "pipeline_id"), change, strict=False):
        positive(name, value)
    return int(change[0]), int(change[1]), int(change[2]) if len(change) == 3 else None


def status_fields(
    index: int, lead: Mapping[str, Any], old_status: int, old_pipeline: int
) -> list[tuple[str, object]]:
    """One lead of a `leads[status]` webhook, in amoCRM's order."""
    values = {
        **lead,
        "old_status_id": old_status,
        "old_pipeline_id": old_pipeline,
        "last_modified": lead["updated_at"],
        "modified_user_id": lead["updated_by"],
        "created_user_id": lead["created_by"],
        "date_create": lead["created_at"],
    }
    prefix = f"leads[status][{index}]"
    pairs: list[tuple[str, object]] = []
    for key in STATUS_FIELDS:
        pairs.append((f"{prefix}[{key}]", values[key]))
        if key == "account_id":  # a lead's custom fields come after it, as amoCRM sends them
            pairs += custom_field_pairs(prefix, lead.get("custom_fields_values") or [])
    return pairs


def custom_field_pairs(prefix: str, fields: Sequence[Mapping[str, Any]]) -> list[tuple[str, object]]:
    """A lead's custom fields as its webhook carries them: `[custom_fields][k][id]`, `[name]`,
    `[values][v][value]` (and `[code]` for a field that has one)."""
    pairs: list[tuple[str, object]] = []
    for k, field in enumerate(fields):
        group = f"{prefix}[custom_fields][{k}]"
        pairs += [(f"{group}[id]", field["field_id"]), (f"{group}[name]", field["field_name"])]
        pairs += [(f"{group}[values][{v}][value]", entry["value"]) for v, entry in enumerate(field["values"])]
        if field["field_code"]:
            pairs.append((f"{group}[code]", field["field_code"]))
    return pairs


def phone_fields(phone: str | None) -> list[dict[str, Any]] | None:
    if not phone:
        return None
    return [
        {
            "field_id": PHONE_FIELD_ID,
            "field_name": "Телефон",
            "field_code": "PHONE",
            "field_type": "multitext",
            "values": [{"value": phone, "enum_id": PHONE_ENUM_ID, "enum_code": "MOB"}],
        }
    ]


def problem(status: int, detail: str) -> FakeResponse:
    body = {
        "title": status_phrase(status),
        "type": f"https://httpstatus.es/{status}",
        "status": status,
        "detail": detail,
    }
    return FakeResponse(status, body, {"Content-Type": PROBLEM_JSON})


def invalid_query(detail: str, path: str) -> FakeResponse:
    """A query amoCRM refuses: 400 problem+json with its validation errors."""
    response = problem(400, "Request validation failed")
    response.body["validation-errors"] = [
        {"request_id": "0", "errors": [{"code": "InvalidValue", "path": path, "detail": detail}]}
    ]
    return response


def unauthorized() -> FakeResponse:
    return problem(401, "Invalid user name or password")
