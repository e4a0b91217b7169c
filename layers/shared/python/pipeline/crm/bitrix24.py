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
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from typing import Any

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from pipeline.errors import UNAUTHORIZED, RemoteRefused
from pipeline.http import (
    DEFAULT_TIMEOUT_SECONDS,
    JsonHttpClient,
    JsonResponse,
    retry_after_seconds,
    url_secrets,
)
from pipeline.observability import mask_phones

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


def _field_names(error: ValidationError) -> str:
    """The fields a ValidationError is about (their input is never part of it)."""
    names = {".".join(str(part) for part in item["loc"]) or "(whole)" for item in error.errors()}
    return ", ".join(sorted(names))


# -- outgoing webhook events ---------------------------------------------------------------------
_MISSING = object()


def _dig(form: Mapping[str, Any], *path: str) -> Any:
    node: Any = form
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return _MISSING
        node = node[key]
    return node


class OutgoingEvent(BaseModel):
    """One outgoing-webhook request. Built by `from_form`; validation errors name the form fields
    (`data[FIELDS][ID]`, `auth[application_token]`), never their values."""

    model_config = ConfigDict(defer_build=True, frozen=True, hide_input_in_errors=True, populate_by_name=True)

    event: str = Field(alias="event", min_length=1, max_length=128, pattern=r"^[A-Z0-9_]+$")
    deal_id: int = Field(alias="data[FIELDS][ID]", gt=0)
    ts: int | None = Field(default=None, alias="ts", ge=0)
    domain: str | None = Field(default=None, alias="auth[domain]", max_length=253)
    member_id: str | None = Field(default=None, alias="auth[member_id]", max_length=128)
    application_token: SecretStr = Field(alias="auth[application_token]", min_length=1, max_length=256)
    event_handler_id: str | None = Field(default=None, alias="event_handler_id", max_length=64)

    @field_validator("event", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("ts", "domain", "member_id", "event_handler_id", mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("application_token", mode="before")
    @classmethod
    def _strip(cls, value: Any) -> Any:
        return value.strip() if isinstance(value, str) else value

    @classmethod
    def from_form(cls, form: Mapping[str, Any]) -> OutgoingEvent:
        """The event in a `parse_form` result; pydantic ValidationError naming the bad fields."""
        fields = {
            "event": _dig(form, "event"),
            "data[FIELDS][ID]": _dig(form, "data", "FIELDS", "ID"),
            "ts": _dig(form, "ts"),
            "auth[domain]": _dig(form, "auth", "domain"),
            "auth[member_id]": _dig(form, "auth", "member_id"),
            "auth[application_token]": _dig(form, "auth", "application_token"),
            "event_handler_id": _dig(form, "event_handler_id"),
        }
        return cls.model_validate({name: value for name, value in fields.items() if value is not _MISSING})

    @property
    def is_deal_event(self) -> bool:
        return self.event in DEAL_EVENTS

    def token_matches(self, expected: str) -> bool:
        """Whether the event carries `expected` as its application token (constant-time)."""
        return bool(expected) and hmac.compare_digest(
            self.application_token.get_secret_value().encode(), expected.encode()
        )


# -- REST answers --------------------------------------------------------------------------------
class _Entity(BaseModel):
    # Bitrix adds fields (UF_CRM_*, PARENT_ID_*) per portal: ignore what is not modelled.
    model_config = ConfigDict(
        defer_build=True, frozen=True, hide_input_in_errors=True, populate_by_name=True, extra="ignore"
    )


def _category_id(value: Any) -> Any:
    """A CATEGORY_ID as text ("0" when blank: the default pipeline)."""
    if value is None or value == "":
        return "0"
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _empty_is_none(value: Any) -> Any:
    return None if value is None or (isinstance(value, str) and not value.strip()) else value


class Deal(_Entity):
    """A `crm.deal.get` result. `moved_time` (MOVED_TIME) is when the deal entered its current stage."""

    id: int = Field(alias="ID", gt=0)
    title: str = Field(default="", alias="TITLE")
    stage_id: str = Field(alias="STAGE_ID", min_length=1)
    category_id: str = Field(default="0", alias="CATEGORY_ID")
    contact_id: int | None = Field(default=None, alias="CONTACT_ID")
    moved_time: AwareDatetime | None = Field(default=None, alias="MOVED_TIME")
    date_modify: AwareDatetime | None = Field(default=None, alias="DATE_MODIFY")
    opportunity: str | None = Field(default=None, alias="OPPORTUNITY")
    currency_id: str | None = Field(default=None, alias="CURRENCY_ID")

    @field_validator("title", mode="before")
    @classmethod
    def _title(cls, value: Any) -> Any:
        return "" if value is None else value

    @field_validator("category_id", mode="before")
    @classmethod
    def _category(cls, value: Any) -> Any:
        return _category_id(value)

    @field_validator("contact_id", mode="before")
    @classmethod
    def _contact(cls, value: Any) -> Any:
        value = _empty_is_none(value)
        return None if value in (0, "0") else value

    @field_validator("moved_time", "date_modify", "currency_id", mode="before")
    @classmethod
    def _optional(cls, value: Any) -> Any:
        return _empty_is_none(value)

    @field_validator("opportunity", mode="before")
    @classmethod
    def _amount(cls, value: Any) -> Any:
        value = _empty_is_none(value)
        return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value

    @classmethod
    def from_result(cls, result: Mapping[str, Any]) -> Deal:
        """The deal in `result` (the `result` of a crm.deal.get answer); ValidationError otherwise."""
        return cls.model_validate(result)


# Phone kinds in the order `Contact.phone` prefers them.
PHONE_PREFERENCE = ("MOBILE", "WORK")


class Contact(_Entity):
    """A `crm.contact.get` result. `phones` are the PHONE multifield values as written in the CRM
    (not normalised), `phone_types` their VALUE_TYPE (MOBILE, WORK, HOME, ...) at the same index."""

    id: int = Field(alias="ID", gt=0)
    name: str | None = Field(default=None, alias="NAME")
    last_name: str | None = Field(default=None, alias="LAST_NAME")
    phones: tuple[str, ...] = ()
    phone_types: tuple[str, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _multifield(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or "PHONE" not in data:
            return data
        entries = data["PHONE"]
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
        rest = {key: value for key, value in data.items() if key != "PHONE"}
        return {**rest, "phones": tuple(values), "phone_types": tuple(types)}

    @field_validator("name", "last_name", mode="before")
    @classmethod
    def _optional(cls, value: Any) -> Any:
        return _empty_is_none(value)

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

    @classmethod
    def from_result(cls, result: Mapping[str, Any]) -> Contact:
        return cls.model_validate(result)


# `crm.stagehistory.list`'s page: 50 records, as every Bitrix24 list method.
HISTORY_PAGE = 50
DEAL_ENTITY_TYPE = 2


class StageHistoryRecord(_Entity):
    """One `crm.stagehistory.list` record of a deal (entityTypeId 2): the deal `owner_id` entered
    stage `stage_id` of category `category_id` at `created_time`. Portals write the numbers as
    integers or as strings; both are read."""

    id: int = Field(alias="ID", gt=0)
    type_id: int = Field(alias="TYPE_ID")
    owner_id: int = Field(alias="OWNER_ID", gt=0)
    created_time: AwareDatetime = Field(alias="CREATED_TIME")
    category_id: str = Field(default="0", alias="CATEGORY_ID")
    stage_id: str = Field(alias="STAGE_ID", min_length=1)

    @field_validator("category_id", mode="before")
    @classmethod
    def _category(cls, value: Any) -> Any:
        return _category_id(value)


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

    def _malformed(self, method: str, error: ValidationError) -> RemoteRefused:
        return self._client(method).refused(f"malformed result ({_field_names(error)})", "refused")

    def deal(self, deal_id: int) -> Deal:
        """`crm.deal.get` for `deal_id`."""
        result = self._entity("crm.deal.get", deal_id)
        try:
            deal = Deal.from_result(result)
        except ValidationError as error:
            raise self._malformed("crm.deal.get", error) from None
        if deal.id != deal_id:
            raise self._client("crm.deal.get").refused(f"answered deal {deal.id} for {deal_id}", "refused")
        return deal

    def contact(self, contact_id: int) -> Contact:
        """`crm.contact.get` for `contact_id`."""
        result = self._entity("crm.contact.get", contact_id)
        try:
            contact = Contact.from_result(result)
        except ValidationError as error:
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
            records = [StageHistoryRecord.model_validate(item) for item in items]
        except ValidationError as error:
            raise self._malformed(method, error) from None
        following = body.get("next")
        return records, following if isinstance(following, int) and following > start else None
