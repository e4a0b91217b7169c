"""A stand-in for an amoCRM account: API v4 reads and the "lead status changed" webhook.

API (`base_url`, what the operator has as `https://<subdomain>.amocrm.ru`), with
`Authorization: Bearer <token>` (a long-lived token):

- `GET /api/v4/leads/<id>` (`with=contacts` adds `_embedded.contacts`: `id`, `is_main`,
  `_links`) and `GET /api/v4/contacts/<id>` (the phone in `custom_fields_values`, field code
  `PHONE`), `Content-Type: application/hal+json`;
- an entity that does not exist: 204 No Content, an empty body, as amoCRM answers;
- a missing or wrong token, or a revoked one (`revoke_token()`): 401 `application/problem+json`
  `{"title": "Unauthorized", "type": "https://httpstatus.es/401", "status": 401, "detail": ...}`.

Webhook (`configure_handler(url)`): `change_statuses([(lead_id, status_id[, pipeline_id]), ...])`
moves the leads and posts ONE form-encoded request carrying all of them, shaped like amoCRM's
(`User-Agent: amoCRM-Webhooks/3.0`, `X-Amocrm-Requestid`):

    account[subdomain]=..&account[id]=..&account[_links][self]=https://<subdomain>.amocrm.ru
    &leads[status][0][id]=..&leads[status][0][name]=..&leads[status][0][status_id]=..
    &leads[status][0][old_status_id]=..&leads[status][0][price]=..
    &leads[status][0][responsible_user_id]=..&leads[status][0][last_modified]=..
    &leads[status][0][modified_user_id]=..&leads[status][0][created_user_id]=..
    &leads[status][0][date_create]=..&leads[status][0][pipeline_id]=..
    &leads[status][0][old_pipeline_id]=..&leads[status][0][account_id]=..
    &leads[status][0][custom_fields][0][id]=..&leads[status][0][custom_fields][0][name]=..
    &leads[status][0][custom_fields][0][values][0][value]=.. (one group per custom field)
    &leads[status][0][created_at]=..&leads[status][0][updated_at]=..&leads[status][1][id]=..

(brackets percent-encoded; a lead without custom fields has no `custom_fields`). It is synchronous
and returns the pipeline's answer as a `Delivery`; `resend_last()` posts the last request again,
byte for byte, as amoCRM's retry would.

Faults (`POST /_faults`, see `local.fakes.base`) apply to the API only: 5xx and 4xx as
problem+json, `rate_limit_next` 429 `{"title": "Too Many Requests", ...}` with Retry-After.
Control endpoints (JSON bodies; a body it cannot follow is 400 with the reason):

    POST /_contacts {"name", "phone"?}                                     -> {"contact_id"}
    POST /_leads {"name", "pipeline_id", "status_id", "contact": {"name", "phone"?}? | "contact_id"?,
                  "custom_fields": {"<field name>": "<text>", ...}?}       -> {"lead_id", "contact_id"}
    POST /_leads/status {"leads": [{"id", "status_id", "pipeline_id"?}, ...]} -> {"delivery"}
    POST /_resend                                                          -> {"delivery"}
    GET  /_leads/<id>                                                      -> the lead (with contacts)
    POST /_token/revoke, POST /_token/restore; GET /_account (base URL, token, handler)
"""

from __future__ import annotations

import itertools
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from local.fakes.base import FakeRequest, FakeResponse, status_phrase
from local.fakes.emitting import (
    ControlInputError,
    EmittingFake,
    WebhookDelivery,
    check_contact,
    control_contact,
    existing,
    id_field,
    json_object,
    php_form,
    post_form,
    text_field,
)

DEFAULT_TOKEN = "localAmoLongLivedToken0123456789"  # noqa: S105 - a fake's token
DEFAULT_SUBDOMAIN = "localshop"
DEFAULT_ACCOUNT_ID = 29085955
EVENT = "leads.status"
USER_AGENT = "amoCRM-Webhooks/3.0"
HAL_JSON = "application/hal+json"
PROBLEM_JSON = "application/problem+json"
# amoCRM's system statuses, the same in every pipeline: "successfully realized" and "closed, not realized".
WON_STATUS_ID = 142
LOST_STATUS_ID = 143
# The account's one user (the long-lived token's owner) and its phone field.
USER_ID = 10000698
PHONE_FIELD_ID = 1138181
PHONE_ENUM_ID = 718323
FIRST_LEAD_ID = 31000001
FIRST_CONTACT_ID = 42000001
# The account's lead custom fields get ids from here, in the order their names are first used.
FIRST_LEAD_FIELD_ID = 1425001
_API_PATH = re.compile(r"^/api/v4/(?P<entity>leads|contacts)/(?P<id>\d+)$")
_LEAD_ROUTE = re.compile(r"^/_leads/(?P<id>\d+)$")

# The fields of one lead in a `leads[status]` webhook, in amoCRM's order; its custom fields come
# after `account_id`.
_STATUS_FIELDS = (
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

StatusChange = tuple[int, int] | tuple[int, int, int]


@dataclass(frozen=True)
class Delivery(WebhookDelivery):
    """The pipeline's answer to one `leads[status]` webhook about `lead_ids` (event "leads.status")."""

    lead_ids: tuple[int, ...]


class AmoCrmFake(EmittingFake):
    name: ClassVar[str] = "amocrm"
    credential: ClassVar[str] = "token"

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        token: str = DEFAULT_TOKEN,
        subdomain: str = DEFAULT_SUBDOMAIN,
        account_id: int = DEFAULT_ACCOUNT_ID,
        handler_url: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(host, port, handler_url=handler_url, clock=clock)
        self.token = token
        self.subdomain = subdomain
        self.account_id = account_id
        self._contacts: dict[int, dict[str, Any]] = {}
        self._leads: dict[int, dict[str, Any]] = {}
        self._lead_contact: dict[int, int] = {}
        self._contact_ids = itertools.count(FIRST_CONTACT_ID)
        self._lead_ids = itertools.count(FIRST_LEAD_ID)
        self._lead_field_ids: dict[str, int] = {}
        self._last_sent: tuple[tuple[int, ...], str, dict[str, str]] | None = None

    # -- configuration -----------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        """The account's address: `https://<subdomain>.amocrm.ru` for the real one."""
        return self.url

    @property
    def account_url(self) -> str:
        """The address amoCRM names in its webhooks (`account[_links][self]`)."""
        return f"https://{self.subdomain}.amocrm.ru"

    def configure_handler(self, url: str) -> None:
        with self._state_lock:
            self.handler_url = url

    def revoke_token(self) -> None:
        """Every API call is refused with 401, as after the long-lived token was revoked."""
        self._set_revoked(True)

    def restore_token(self) -> None:
        self._set_revoked(False)

    @property
    def token_revoked(self) -> bool:
        return self._revoked

    # -- the account -------------------------------------------------------------------------------
    def create_contact(self, name: str, phone: str | None) -> int:
        check_contact(name, phone)
        now = self._clock.tick()
        first, _, last = name.strip().partition(" ")
        with self._state_lock:
            contact_id = next(self._contact_ids)
            self._contacts[contact_id] = {
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
                "custom_fields_values": _phone_fields(phone),
                "account_id": self.account_id,
            }
        return contact_id

    def create_lead(
        self,
        name: str,
        pipeline_id: int,
        status_id: int,
        contact_id: int | None = None,
        custom_fields: Mapping[str, str] | None = None,
    ) -> int:
        """A lead in a pipeline's status (amoCRM's ids are any positive integers here); no webhook.
        `custom_fields`: text custom fields by name, carried by the lead and its webhooks."""
        if not isinstance(name, str) or not name.strip():
            raise ValueError("a lead needs a name")
        _positive("pipeline_id", pipeline_id)
        _positive("status_id", status_id)
        fields = dict(custom_fields or {})
        if not all(isinstance(k, str) and k.strip() and isinstance(v, str) for k, v in fields.items()):
            raise ValueError("custom_fields must map non-empty field names to text values")
        now = self._clock.tick()
        with self._state_lock:
            if contact_id is not None and contact_id not in self._contacts:
                raise ValueError(f"no contact {contact_id}")
            lead_id = next(self._lead_ids)
            self._leads[lead_id] = {
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
                "custom_fields_values": self._lead_field_values(fields),
                "score": None,
                "account_id": self.account_id,
                "labor_cost": None,
            }
            if contact_id is not None:
                self._lead_contact[lead_id] = contact_id
        return lead_id

    def _lead_field_values(self, fields: Mapping[str, str]) -> list[dict[str, Any]] | None:
        """Text custom fields as API v4 gives them (`custom_fields_values`; None when there are none)."""
        values = [
            {
                "field_id": self._lead_field_ids.setdefault(
                    name, FIRST_LEAD_FIELD_ID + len(self._lead_field_ids)
                ),
                "field_name": name,
                "field_code": None,
                "field_type": "text",
                "values": [{"value": value}],
            }
            for name, value in fields.items()
        ]
        return values or None

    def change_statuses(self, changes: Sequence[StatusChange]) -> Delivery:
        """Each lead moves to its new status (and pipeline); one webhook carries them all."""
        parsed = [_status_change(change) for change in changes]
        if not parsed:
            raise ValueError("change_statuses needs at least one (lead_id, status_id[, pipeline_id])")
        lead_ids = [lead_id for lead_id, _, _ in parsed]
        if len(set(lead_ids)) != len(lead_ids):
            raise ValueError("a lead appears twice in one status change")
        url = self._handler()
        now = self._clock.tick()
        with self._state_lock:
            missing = [lead_id for lead_id in lead_ids if lead_id not in self._leads]
            if missing:
                raise KeyError(f"no lead {missing[0]}")
            pairs: list[tuple[str, object]] = [
                ("account[subdomain]", self.subdomain),
                ("account[id]", self.account_id),
                ("account[_links][self]", self.account_url),
            ]
            for index, (lead_id, status_id, pipeline_id) in enumerate(parsed):
                lead = self._leads[lead_id]
                old_status, old_pipeline = lead["status_id"], lead["pipeline_id"]
                lead.update(
                    status_id=status_id,
                    pipeline_id=pipeline_id if pipeline_id is not None else old_pipeline,
                    updated_at=now,
                    updated_by=USER_ID,
                    closed_at=now if status_id in (WON_STATUS_ID, LOST_STATUS_ID) else None,
                )
                pairs.extend(_status_fields(index, lead, old_status, old_pipeline))
            payload = php_form(pairs)
            headers = {"User-Agent": USER_AGENT, "X-Amocrm-Requestid": str(uuid.uuid4())}
            self._last_sent = (tuple(lead_ids), payload, headers)
        return self._deliver(tuple(lead_ids), payload, headers, url)

    def resend_last(self) -> Delivery:
        """The last webhook posted again, byte for byte (same headers too)."""
        url = self._handler()
        with self._state_lock:
            last = self._last_sent
        if last is None:
            raise LookupError("nothing emitted yet")
        lead_ids, payload, headers = last
        return self._deliver(lead_ids, payload, headers, url)

    def lead(self, lead_id: int, with_contacts: bool = True) -> dict[str, Any]:
        """The lead as `GET /api/v4/leads/<id>` returns it; KeyError if there is none."""
        with self._state_lock:
            if lead_id not in self._leads:
                raise KeyError(f"no lead {lead_id}")
            return self._lead_document(lead_id, with_contacts)

    def contact(self, contact_id: int) -> dict[str, Any]:
        with self._state_lock:
            if contact_id not in self._contacts:
                raise KeyError(f"no contact {contact_id}")
            return self._contact_document(contact_id)

    # -- documents (under the account lock) -----------------------------------------------------------
    def _link(self, entity: str, entity_id: int) -> dict[str, Any]:
        return {"self": {"href": f"{self.base_url}/api/v4/{entity}/{entity_id}"}}

    def _lead_document(self, lead_id: int, with_contacts: bool) -> dict[str, Any]:
        document = dict(self._leads[lead_id])
        document["_links"] = self._link("leads", lead_id)
        embedded: dict[str, Any] = {"tags": [], "companies": []}
        if with_contacts:
            contact_id = self._lead_contact.get(lead_id)
            embedded["contacts"] = (
                []
                if contact_id is None
                else [{"id": contact_id, "is_main": True, "_links": self._link("contacts", contact_id)}]
            )
        document["_embedded"] = embedded
        return document

    def _contact_document(self, contact_id: int) -> dict[str, Any]:
        document = dict(self._contacts[contact_id])
        fields = document["custom_fields_values"]
        if fields is not None:
            document["custom_fields_values"] = [
                {**field, "values": [dict(value) for value in field["values"]]} for field in fields
            ]
        document["_links"] = self._link("contacts", contact_id)
        document["_embedded"] = {"tags": [], "companies": []}
        return document

    # -- emission ---------------------------------------------------------------------------------------
    @staticmethod
    def _deliver(lead_ids: tuple[int, ...], payload: str, headers: dict[str, str], url: str) -> Delivery:
        """Outside the account lock: the handler may read the leads while it answers."""
        status, body, error = post_form(url, payload, headers)
        return Delivery(status, body, error, EVENT, lead_ids, payload=payload)

    # -- API -----------------------------------------------------------------------------------------------
    def error_response(self, status: int, retry_after: int | None = None) -> FakeResponse:
        if retry_after is not None or status == 429:
            headers = {"Content-Type": PROBLEM_JSON}
            if retry_after is not None:
                headers["Retry-After"] = str(retry_after)
            body = {"title": "Too Many Requests", "type": "https://httpstatus.es/429", "status": 429}
            return FakeResponse(429, body, headers)
        if status == 401:
            return _unauthorized()
        return _problem(status, f"{status_phrase(status)} (injected fault)")

    def answer(self, request: FakeRequest) -> FakeResponse:
        if not request.path.startswith("/api/"):
            return _problem(404, "Not found")
        authorization = request.headers.get("authorization", "")
        if self._revoked or authorization != f"Bearer {self.token}":
            return _unauthorized()
        match = _API_PATH.match(request.path)
        if match is None:
            return _problem(404, "Not found")
        if request.method != "GET":
            return _problem(405, "Method not allowed")
        entity_id = int(match["id"])
        with_values = {value.strip() for value in request.query.get("with", "").split(",")}
        with self._state_lock:
            if match["entity"] == "leads":
                if entity_id not in self._leads:
                    return FakeResponse(204, b"")
                document = self._lead_document(entity_id, "contacts" in with_values)
            else:
                if entity_id not in self._contacts:
                    return FakeResponse(204, b"")
                document = self._contact_document(entity_id)
        return FakeResponse(200, document, {"Content-Type": HAL_JSON})

    # -- control endpoints ----------------------------------------------------------------------------------
    def _control(self, request: FakeRequest) -> FakeResponse | None:
        route = (request.method, request.path)
        if route == ("GET", "/_account"):
            return FakeResponse(200, self._account_state())
        if route == ("POST", "/_contacts"):
            return FakeResponse(201, {"contact_id": self._contact_from(json_object(request))})
        if route == ("POST", "/_leads"):
            return self._control_create_lead(json_object(request))
        if route == ("POST", "/_leads/status"):
            return FakeResponse(200, {"delivery": self._control_statuses(json_object(request)).as_dict()})
        if route == ("POST", "/_resend"):
            return FakeResponse(200, {"delivery": self.resend_last().as_dict()})
        match = _LEAD_ROUTE.match(request.path)
        if match is not None and request.method == "GET":
            return FakeResponse(200, self.lead(int(match["id"])))
        return None

    def _control_create_lead(self, document: dict[str, Any]) -> FakeResponse:
        known = {"name", "pipeline_id", "status_id", "contact", "contact_id", "custom_fields"}
        unknown = set(document) - known
        if unknown:
            raise ControlInputError(f"unknown keys {sorted(unknown)}; known: {', '.join(sorted(known))}")
        name = str(text_field(document, "name"))
        pipeline_id = int(id_field(document, "pipeline_id") or 0)
        status_id = int(id_field(document, "status_id") or 0)
        if "contact" in document and "contact_id" in document:
            raise ControlInputError("give either contact or contact_id, not both")
        custom_fields = document.get("custom_fields", {})
        if not isinstance(custom_fields, dict):
            raise ControlInputError('custom_fields must be an object such as {"Delivery": "Pickup"}')
        contact_id = control_contact(document, self.contact, self._contact_from)
        lead_id = self.create_lead(name, pipeline_id, status_id, contact_id, custom_fields)
        return FakeResponse(201, {"lead_id": lead_id, "contact_id": contact_id})

    def _control_statuses(self, document: dict[str, Any]) -> Delivery:
        unknown = set(document) - {"leads"}
        if unknown:
            raise ControlInputError(f"unknown keys {sorted(unknown)}; expected only leads")
        leads = document.get("leads")
        if not isinstance(leads, list) or not leads:
            raise ControlInputError('leads must be a non-empty list such as [{"id": 1, "status_id": 142}]')
        changes: list[StatusChange] = []
        for entry in leads:
            if not isinstance(entry, dict):
                raise ControlInputError('each lead must be an object {"id", "status_id", "pipeline_id"?}')
            extra = set(entry) - {"id", "status_id", "pipeline_id"}
            if extra:
                raise ControlInputError(
                    f"unknown keys {sorted(extra)} in a lead; known: id, status_id, pipeline_id"
                )
            lead_id = int(id_field(entry, "id") or 0)
            status_id = int(id_field(entry, "status_id") or 0)
            pipeline_id = id_field(entry, "pipeline_id", required=False)
            changes.append((lead_id, status_id) if pipeline_id is None else (lead_id, status_id, pipeline_id))
            existing(self.lead, lead_id)
        return self.change_statuses(changes)

    def _contact_from(self, document: Mapping[str, Any]) -> int:
        unknown = set(document) - {"name", "phone"}
        if unknown:
            raise ControlInputError(f"unknown keys {sorted(unknown)}; a contact has name, phone")
        return self.create_contact(
            str(text_field(document, "name")), text_field(document, "phone", required=False)
        )

    def _account_state(self) -> dict[str, Any]:
        with self._state_lock:
            leads, contacts = len(self._leads), len(self._contacts)
        return {
            "base_url": self.base_url,
            "subdomain": self.subdomain,
            "account_id": self.account_id,
            "token": self.token,
            "token_revoked": self.token_revoked,
            "handler_url": self.handler_url,
            "leads": leads,
            "contacts": contacts,
        }


def _positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer")


def _status_change(change: object) -> tuple[int, int, int | None]:
    if not isinstance(change, tuple | list) or len(change) not in (2, 3):
        raise ValueError(f"a status change is (lead_id, status_id[, pipeline_id]), not {change!r}")
    for name, value in zip(("lead_id", "status_id", "pipeline_id"), change, strict=False):
        _positive(name, value)
    return int(change[0]), int(change[1]), int(change[2]) if len(change) == 3 else None


def _status_fields(
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
    for key in _STATUS_FIELDS:
        pairs.append((f"{prefix}[{key}]", values[key]))
        if key == "account_id":
            pairs += _custom_field_pairs(prefix, lead["custom_fields_values"] or [])
    return pairs


def _custom_field_pairs(prefix: str, fields: Sequence[Mapping[str, Any]]) -> list[tuple[str, object]]:
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


def _phone_fields(phone: str | None) -> list[dict[str, Any]] | None:
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


def _problem(status: int, detail: str) -> FakeResponse:
    body = {
        "title": status_phrase(status),
        "type": f"https://httpstatus.es/{status}",
        "status": status,
        "detail": detail,
    }
    return FakeResponse(status, body, {"Content-Type": PROBLEM_JSON})


def _unauthorized() -> FakeResponse:
    return _problem(401, "Invalid user name or password")
