"""Bitrix24: outgoing-webhook events in, REST calls out through an inbound webhook.

Outgoing webhook (Bitrix24 -> us), `application/x-www-form-urlencoded`, read with
`pipeline.crm.forms.parse_form` (apidocs.bitrix24.com, "Inbound and Outbound Webhooks" and
"Event on deal update onCrmDealUpdate"):

    event=ONCRMDEALUPDATE&event_handler_id=201&data[FIELDS][ID]=759&ts=1736405807
    &auth[domain]=<portal>&auth[client_endpoint]=https://<portal>/rest/
    &auth[server_endpoint]=https://oauth.bitrix.info/rest/&auth[member_id]=<32 hex>
    &auth[application_token]=<token shown when the outgoing webhook was created>

The event carries only the deal id: its stage and contact come from `crm.deal.get` and
`crm.contact.get`. `auth[application_token]` is how the handler knows the request is the
portal's: compare it with the configured token (`OutgoingEvent.token_matches`).

Inbound webhook (us -> Bitrix24): `POST https://<portal>/rest/<user>/<code>/<method>.json` with
a JSON body. The URL *is* the credential: neither it nor its code ever appears in a reason.
Bitrix reports errors in the body (`error`, `error_description`) whatever the HTTP status; the
code may be empty, e.g. crm.deal.get for a missing id answers HTTP 400
`{"error": "", "error_description": "Not found"}`.

The event and the REST answers are frozen dataclasses checked by `pipeline.validation`, not pydantic
models: the webhook's Bitrix24 route and the `bitrix24` function read them at their first
invocation, and pydantic's import and schemas cost a cold start about 0.4x of `import boto3`
(docs/perf.md). Refusals keep pydantic's shape and locations (the form's and Bitrix24's field
names); tests/unit/crm_sources/test_bitrix24_oracle.py holds them to the models they replaced.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pipeline.errors import UNAUTHORIZED, RemoteRefused
from pipeline.http import (
    DEFAULT_TIMEOUT_SECONDS,
    JsonHttpClient,
    JsonResponse,
    retry_after_seconds,
    url_secrets,
)
from pipeline.observability import mask_phones
from pipeline.validation import Fields, Invalid, aliased, blank_is_none

# Bitrix24 system errors that go away by themselves (REST docs, "Statuses and System Error Codes").
BITRIX_TRANSIENT_ERRORS = frozenset(
    {"QUERY_LIMIT_EXCEEDED", "OPERATION_TIME_LIMIT", "INTERNAL_SERVER_ERROR", "ERROR_UNEXPECTED_ANSWER"}
)
# Errors about the credential's rights: the webhook's user or scope may not do this (the
# portal's configuration; a person must act, and the record waits in the DLQ for a redrive).
BITRIX_AUTH_ERRORS = frozenset(
    {"INVALID_CREDENTIALS", "INSUFFICIENT_SCOPE", "ACCESS_DENIED", "USER_ACCESS_ERROR"}
)
# Refusals of the whole portal (REST docs, "Statuses and System Error Codes"), by cause: the
# webhook code is wrong or revoked (401 NO_AUTH_FOUND, an OAuth token expired or invalid; any
# 401 too), the portal deleted or closed (PORTAL_DELETED), REST blocked by Bitrix24 support
# (OVERLOAD_LIMIT: "a manual individual block"). ACCESS_DENIED is one only when it says the REST
# API needs a commercial plan (the plan expired or unpaid): a bare "Access denied" is the user's
# rights to one entity.
BITRIX_ACCOUNT_ERRORS = {
    "NO_AUTH_FOUND": "unauthorized",
    "EXPIRED_TOKEN": "unauthorized",
    "INVALID_TOKEN": "unauthorized",
    "PORTAL_DELETED": "blocked",
    "OVERLOAD_LIMIT": "blocked",
}
# The words of ACCESS_DENIED's description when the plan does not include REST (docs: "REST API
# is available only on commercial plans"; portals also say "...only by subscription").
BITRIX_UNPAID_WORDS = ("commercial", "subscription", "tariff")
BITRIX_NOT_FOUND_ERRORS = frozenset({"NOT_FOUND"})

DEAL_EVENTS = ("ONCRMDEALADD", "ONCRMDEALUPDATE")

_METHOD = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)*", re.IGNORECASE)
_DESCRIPTION_LIMIT = 200


def _short(value: Any, limit: int = _DESCRIPTION_LIMIT) -> str | None:
    return mask_phones(value[:limit]) if isinstance(value, str) and value else None


def _read(
    title: str, data: Any, names: Mapping[str, str], before: Mapping[str, Callable[[Any], Any]]
) -> tuple[Fields, dict[str, str]]:
    """`data`'s fields as pydantic read a model with aliases and `populate_by_name`: each under its
    alias (`names`: alias -> field name), else under its name, which a refusal then names (a missing
    one is named by its alias); `before` rewrites a present value first (a before-validator, by
    alias). Other keys are ignored (`extra="ignore"`). Returns the fields and the key each is under."""
    if not isinstance(data, Mapping):
        Fields(title, data)  # raises: not an object
    keys = {alias: aliased(data, alias, name) for alias, name in names.items()}
    view = {
        key: before[alias](data[key]) if alias in before else data[key]
        for alias, key in keys.items()
        if key in data
    }
    return Fields(title, view), keys


# -- outgoing webhook events ---------------------------------------------------------------------
_MISSING = object()


def _dig(form: Mapping[str, Any], *path: str) -> Any:
    node: Any = form
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return _MISSING
        node = node[key]
    return node


@dataclass(frozen=True, kw_only=True)
class OutgoingEvent:
    """One outgoing-webhook request. Built by `from_form`; refusals name the form fields
    (`data[FIELDS][ID]`, `auth[application_token]`), never their values."""

    event: str
    deal_id: int
    ts: int | None = None
    domain: str | None = None
    member_id: str | None = None
    # The credential: kept out of repr and str.
    application_token: str = field(repr=False)
    event_handler_id: str | None = None

    @classmethod
    def from_form(cls, form: Mapping[str, Any]) -> OutgoingEvent:
        """The event in a `parse_form` result; `Invalid` naming the bad fields by their form names."""
        dug = {
            "event": _dig(form, "event"),
            "data[FIELDS][ID]": _dig(form, "data", "FIELDS", "ID"),
            "ts": _dig(form, "ts"),
            "auth[domain]": _dig(form, "auth", "domain"),
            "auth[member_id]": _dig(form, "auth", "member_id"),
            "auth[application_token]": _dig(form, "auth", "application_token"),
            "event_handler_id": _dig(form, "event_handler_id"),
        }
        data = {name: value for name, value in dug.items() if value is not _MISSING}
        # Before the checks, as pydantic's before-validators: the name upper-cased, the token
        # stripped, a blank optional field absent.
        if isinstance(data.get("event"), str):
            data["event"] = data["event"].strip().upper()
        if isinstance(data.get("auth[application_token]"), str):
            data["auth[application_token]"] = data["auth[application_token]"].strip()
        for name in ("ts", "auth[domain]", "auth[member_id]", "event_handler_id"):
            if name in data:
                data[name] = blank_is_none(data[name])
        fields = Fields("OutgoingEvent", data)
        event = cls(
            event=fields.text("event", min_length=1, max_length=128, pattern=r"^[A-Z0-9_]+$"),
            deal_id=fields.number("data[FIELDS][ID]", int, gt=0),
            ts=fields.number("ts", int, ge=0, default=None),
            domain=fields.text("auth[domain]", max_length=253, default=None),
            member_id=fields.text("auth[member_id]", max_length=128, default=None),
            application_token=fields.text("auth[application_token]", min_length=1, max_length=256),
            event_handler_id=fields.text("event_handler_id", max_length=64, default=None),
        )
        fields.done()
        return event

    @property
    def is_deal_event(self) -> bool:
        return self.event in DEAL_EVENTS

    def token_matches(self, expected: str) -> bool:
        """Whether the event carries `expected` as its application token (constant-time)."""
        return bool(expected) and hmac.compare_digest(self.application_token.encode(), expected.encode())


# -- REST answers --------------------------------------------------------------------------------
# Bitrix adds fields (UF_CRM_*, PARENT_ID_*) per portal: what is not read here is ignored.


def _category_id(value: Any) -> Any:
    """A CATEGORY_ID as text ("0" when blank: the default pipeline)."""
    if value is None or value == "":
        return "0"
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _title(value: Any) -> Any:
    return "" if value is None else value


def _contact_id(value: Any) -> Any:
    value = blank_is_none(value)
    return None if value in (0, "0") else value


def _amount(value: Any) -> Any:
    value = blank_is_none(value)
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


_DEAL_NAMES = {
    "ID": "id",
    "TITLE": "title",
    "STAGE_ID": "stage_id",
    "CATEGORY_ID": "category_id",
    "CONTACT_ID": "contact_id",
    "MOVED_TIME": "moved_time",
    "DATE_MODIFY": "date_modify",
    "OPPORTUNITY": "opportunity",
    "CURRENCY_ID": "currency_id",
}
_DEAL_BEFORE = {
    "TITLE": _title,
    "CATEGORY_ID": _category_id,
    "CONTACT_ID": _contact_id,
    "MOVED_TIME": blank_is_none,
    "DATE_MODIFY": blank_is_none,
    "OPPORTUNITY": _amount,
    "CURRENCY_ID": blank_is_none,
}


@dataclass(frozen=True, kw_only=True)
class Deal:
    """A `crm.deal.get` result. `moved_time` (MOVED_TIME) is when the deal entered its current stage."""

    id: int
    title: str = ""
    stage_id: str
    category_id: str = "0"
    contact_id: int | None = None
    moved_time: datetime | None = None
    date_modify: datetime | None = None
    opportunity: str | None = None
    currency_id: str | None = None

    @classmethod
    def from_result(cls, result: Mapping[str, Any]) -> Deal:
        """The deal in `result` (the `result` of a crm.deal.get answer); `Invalid` otherwise."""
        fields, key = _read("Deal", result, _DEAL_NAMES, _DEAL_BEFORE)
        deal = cls(
            id=fields.number(key["ID"], int, gt=0),
            title=fields.text(key["TITLE"], default=""),
            stage_id=fields.text(key["STAGE_ID"], min_length=1),
            category_id=fields.text(key["CATEGORY_ID"], default="0"),
            contact_id=fields.number(key["CONTACT_ID"], int, default=None),
            moved_time=fields.aware_moment(key["MOVED_TIME"], default=None),
            date_modify=fields.aware_moment(key["DATE_MODIFY"], default=None),
            opportunity=fields.text(key["OPPORTUNITY"], default=None),
            currency_id=fields.text(key["CURRENCY_ID"], default=None),
        )
        fields.done()
        return deal


# Phone kinds in the order `Contact.phone` prefers them.
PHONE_PREFERENCE = ("MOBILE", "WORK")
# `phones` and `phone_types` have no alias: read under their names when PHONE is absent.
_CONTACT_NAMES = {
    "ID": "id",
    "NAME": "name",
    "LAST_NAME": "last_name",
    "phones": "phones",
    "phone_types": "phone_types",
}
_CONTACT_BEFORE = {"NAME": blank_is_none, "LAST_NAME": blank_is_none}


def _multifield(entries: Any) -> dict[str, tuple[str, ...]]:
    """The PHONE multifield's non-blank values (stripped) and their VALUE_TYPE (upper case, "" if
    none); entries of any other shape are skipped."""
    values: list[str] = []
    types: list[str] = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, Mapping):
            continue
        value = entry.get("VALUE")
        if isinstance(value, str) and value.strip():
            values.append(value.strip())
            kind = entry.get("VALUE_TYPE")
            types.append(kind.upper() if isinstance(kind, str) else "")
    return {"phones": tuple(values), "phone_types": tuple(types)}


@dataclass(frozen=True, kw_only=True)
class Contact:
    """A `crm.contact.get` result. `phones` are the PHONE multifield values as written in the CRM
    (not normalised), `phone_types` their VALUE_TYPE (MOBILE, WORK, HOME, ...) at the same index."""

    id: int
    name: str | None = None
    last_name: str | None = None
    phones: tuple[str, ...] = ()
    phone_types: tuple[str, ...] = ()

    @classmethod
    def from_result(cls, result: Mapping[str, Any]) -> Contact:
        """The contact in `result` (the `result` of a crm.contact.get answer); `Invalid` otherwise."""
        if isinstance(result, Mapping) and "PHONE" in result:
            rest = {key: value for key, value in result.items() if key != "PHONE"}
            result = {**rest, **_multifield(result["PHONE"])}
        fields, key = _read("Contact", result, _CONTACT_NAMES, _CONTACT_BEFORE)
        contact = cls(
            id=fields.number(key["ID"], int, gt=0),
            name=fields.text(key["NAME"], default=None),
            last_name=fields.text(key["LAST_NAME"], default=None),
            phones=fields.text_tuple("phones", default=()),
            phone_types=fields.text_tuple("phone_types", default=()),
        )
        fields.done()
        return contact

    def phone(self) -> str | None:
        """The number to text: the first MOBILE, else the first WORK, else the first at all."""
        for preferred in PHONE_PREFERENCE:
            for index, value in enumerate(self.phones):
                if index < len(self.phone_types) and self.phone_types[index] == preferred:
                    return value
        return self.phones[0] if self.phones else None

    @property
    def display_name(self) -> str:
        return " ".join(part.strip() for part in (self.name, self.last_name) if part and part.strip())


# `crm.stagehistory.list`'s page: 50 records, as every Bitrix24 list method.
HISTORY_PAGE = 50
DEAL_ENTITY_TYPE = 2
_HISTORY_NAMES = {
    "ID": "id",
    "TYPE_ID": "type_id",
    "OWNER_ID": "owner_id",
    "CREATED_TIME": "created_time",
    "CATEGORY_ID": "category_id",
    "STAGE_ID": "stage_id",
}


@dataclass(frozen=True, kw_only=True)
class StageHistoryRecord:
    """One `crm.stagehistory.list` record of a deal (entityTypeId 2): the deal `owner_id` entered
    stage `stage_id` of category `category_id` at `created_time`. Portals write the numbers as
    integers or as strings; both are read."""

    id: int
    type_id: int
    owner_id: int
    created_time: datetime
    category_id: str = "0"
    stage_id: str

    @classmethod
    def from_result(cls, item: Mapping[str, Any]) -> StageHistoryRecord:
        """The record `item` (one of a crm.stagehistory.list answer's `result.items`); `Invalid` otherwise."""
        fields, key = _read("StageHistoryRecord", item, _HISTORY_NAMES, {"CATEGORY_ID": _category_id})
        record = cls(
            id=fields.number(key["ID"], int, gt=0),
            type_id=fields.number(key["TYPE_ID"], int),
            owner_id=fields.number(key["OWNER_ID"], int, gt=0),
            created_time=fields.aware_moment(key["CREATED_TIME"]),
            category_id=fields.text(key["CATEGORY_ID"], default="0"),
            stage_id=fields.text(key["STAGE_ID"], min_length=1),
        )
        fields.done()
        return record


# -- the REST client -----------------------------------------------------------------------------
class Bitrix24Rest:
    """Bitrix24 REST methods through an inbound webhook `https://<portal>/rest/<user>/<code>/`.

    Errors: TransientError (limits, 5xx, 429, no answer; Retry-After honoured), AccountRefused
    (the webhook code refused, any 401, or the portal blocked or unpaid: BITRIX_ACCOUNT_ERRORS)
    or RemoteRefused with kind "unauthorized" (the webhook user's rights or scope), "not_found"
    (the entity) or "refused" (anything else, a malformed answer included). Reasons read
    "bitrix24 <method>: HTTP <status> <code>: <description>", phones masked, URL and code never.
    """

    def __init__(self, url: str, *, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        self.url = url
        self.timeout = timeout
        self._secrets = url_secrets(url)

    def __repr__(self) -> str:  # the URL is the credential
        return f"{type(self).__name__}(url=***)"

    def _client(self, method: str) -> JsonHttpClient:
        return JsonHttpClient(f"bitrix24 {method}", secrets=self._secrets, timeout=self.timeout)

    def call(self, method: str, params: Mapping[str, Any]) -> Any:
        """POST `params` as JSON to `<url>/<method>.json`; the answer's `result` (None if it has none)."""
        return self._answer(method, params).get("result")

    def _answer(self, method: str, params: Mapping[str, Any]) -> Mapping[str, Any]:
        """The whole answer of a successful call (`result`, and `next`/`total` of a list method)."""
        if not _METHOD.fullmatch(method):
            raise ValueError("not a Bitrix24 REST method name")
        http = self._client(method)
        response = http.post(f"{self.url.rstrip('/')}/{method}.json", dict(params))
        body = response.body if isinstance(response.body, Mapping) else {}
        # Bitrix reports errors in the body (`error`, `error_description`), whatever the status.
        if "error" in body:
            raise self._error(http, response, body)
        if not response.ok:
            reason = f"HTTP {response.status}"
            if response.status in (408, 429) or response.status >= 500:
                raise http.transient(reason, retry_after_seconds(response))
            if response.status == 401:
                raise http.account_refused(reason, UNAUTHORIZED)
            raise http.refused(reason, "unauthorized" if response.status == 403 else "refused")
        return body

    @staticmethod
    def _error(http: JsonHttpClient, response: JsonResponse, body: Mapping[str, Any]) -> Exception:
        code = str(body.get("error") or "")
        description = _short(body.get("error_description")) or "-"
        reason = f"HTTP {response.status} {code or 'error'}: {description}"
        normalised = code.upper()
        plain = description.strip().rstrip(".!").strip().lower()
        if normalised in BITRIX_ACCOUNT_ERRORS:
            return http.account_refused(reason, BITRIX_ACCOUNT_ERRORS[normalised])
        if normalised == "ACCESS_DENIED" and any(word in plain for word in BITRIX_UNPAID_WORDS):
            return http.account_refused(reason, "unpaid")
        if response.status == 401:
            return http.account_refused(reason, UNAUTHORIZED)
        if normalised in BITRIX_TRANSIENT_ERRORS or response.status >= 500 or response.status == 429:
            return http.transient(reason, retry_after_seconds(response))
        if normalised in BITRIX_AUTH_ERRORS or response.status in (401, 403) or plain == "access denied":
            # "Access denied" (no code): the webhook's user may not read/write this entity.
            return http.refused(reason, "unauthorized")
        if normalised in BITRIX_NOT_FOUND_ERRORS or plain == "not found":
            return http.refused(reason, "not_found")
        return http.refused(reason, "refused")

    def _entity(self, method: str, entity_id: int) -> Mapping[str, Any]:
        if isinstance(entity_id, bool) or not isinstance(entity_id, int) or entity_id <= 0:
            raise ValueError("the id must be a positive integer")
        result = self.call(method, {"id": entity_id})
        if not isinstance(result, Mapping):
            raise self._client(method).refused("the answer has no result object", "refused")
        return result

    def _malformed(self, method: str, error: Invalid) -> RemoteRefused:
        return self._client(method).refused(f"malformed result ({', '.join(error.field_names())})", "refused")

    def deal(self, deal_id: int) -> Deal:
        """`crm.deal.get` for `deal_id`."""
        result = self._entity("crm.deal.get", deal_id)
        try:
            deal = Deal.from_result(result)
        except Invalid as error:
            raise self._malformed("crm.deal.get", error) from None
        if deal.id != deal_id:
            raise self._client("crm.deal.get").refused(f"answered deal {deal.id} for {deal_id}", "refused")
        return deal

    def contact(self, contact_id: int) -> Contact:
        """`crm.contact.get` for `contact_id`."""
        result = self._entity("crm.contact.get", contact_id)
        try:
            contact = Contact.from_result(result)
        except Invalid as error:
            raise self._malformed("crm.contact.get", error) from None
        if contact.id != contact_id:
            raise self._client("crm.contact.get").refused(
                f"answered contact {contact.id} for {contact_id}", "refused"
            )
        return contact

    def stage_history(
        self, filters: Mapping[str, Any], *, start: int = 0
    ) -> tuple[list[StageHistoryRecord], int | None]:
        """One page of `crm.stagehistory.list` for deals matching `filters` (`{"OWNER_ID": 42}`,
        `{">ID": 1234}`), oldest first (ID ascending): the records and the next page's `start`,
        None on the last page."""
        method = "crm.stagehistory.list"
        params = {
            "entityTypeId": DEAL_ENTITY_TYPE,
            "order": {"ID": "ASC"},
            "filter": dict(filters),
            "start": start,
        }
        body = self._answer(method, params)
        result = body.get("result")
        items = result.get("items") if isinstance(result, Mapping) else None
        if not isinstance(items, list):
            raise self._client(method).refused("the answer has no result.items list", "refused")
        try:
            records = [StageHistoryRecord.from_result(item) for item in items]
        except Invalid as error:
            raise self._malformed(method, error) from None
        following = body.get("next")
        return records, following if isinstance(following, int) and following > start else None
