"""amoCRM (Kommo): "lead status changed" webhooks in, API v4 look-ups out.

Webhook (amoCRM -> us), `application/x-www-form-urlencoded`, read with
`pipeline.forms.parse_form` (amocrm.ru/developers, "Webhooks", webhooks-format): one POST may
carry several leads, each `leads[status][<n>][...]`, and the account:

    leads[status][0][id]=21804135&leads[status][0][status_id]=61482550
    &leads[status][0][pipeline_id]=7391542&leads[status][0][old_status_id]=61482546
    &leads[status][0][old_pipeline_id]=7391542 ... &account[id]=31415926&account[subdomain]=shop

Bodies captured from real accounts differ: many also carry the lead's other fields (name,
price, responsible_user_id, date_create, created_at, and the unix times `last_modified` and
`updated_at`), some only the five ids above. `StatusChange.changed_at` is `last_modified`, else
`updated_at`, else None: never rely on it being there.

API (us -> amoCRM): `GET https://<subdomain>.amocrm.ru/api/v4/leads/<id>?with=contacts` and
`/api/v4/contacts/<id>` with `Authorization: Bearer <long-lived token>`. amoCRM answers 204 No
Content (no body) for an id it has no entity for; errors are `application/problem+json`
(`title`, `status`, `detail`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode, urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pipeline.errors import RemoteRefused
from pipeline.http import DEFAULT_TIMEOUT_SECONDS, JsonHttpClient, JsonResponse, retry_after_seconds
from pipeline.observability import mask_phones

NO_STATUS_CHANGES = "no lead status changes in the webhook (is it subscribed to 'lead status changed'?)"
_DETAIL_LIMIT = 200


class AmoWebhookError(ValueError):
    """Why a webhook form is not a lead-status webhook; names fields, never their values."""


class _Model(BaseModel):
    model_config = ConfigDict(
        defer_build=True, frozen=True, hide_input_in_errors=True, populate_by_name=True, extra="ignore"
    )


def _blank_is_none(value: Any) -> Any:
    return None if value is None or (isinstance(value, str) and not value.strip()) else value


def _unix_time(value: Any) -> datetime | None:
    """A unix time (int or digit string) as an aware UTC datetime; 0 and blanks as None."""
    value = _blank_is_none(value)
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("not a unix time")
    if value == 0:
        return None
    try:
        return datetime.fromtimestamp(value, tz=UTC)
    except (ValueError, OverflowError, OSError):
        raise ValueError("not a unix time in range") from None


def _field_names(error: ValidationError, form_prefix: str | None = None) -> str:
    """The fields a ValidationError is about: as form fields (`leads[status][0][id]`) under
    `form_prefix`, else dotted (`_embedded.contacts`). Their input is never part of it."""
    if form_prefix is None:
        names = {".".join(str(part) for part in item["loc"]) or "(whole)" for item in error.errors()}
    else:
        names = {form_prefix + "".join(f"[{part}]" for part in item["loc"]) for item in error.errors()}
    return ", ".join(sorted(names))


# -- the webhook ---------------------------------------------------------------------------------
class Account(_Model):
    """`account[id]`, `account[subdomain]` of a webhook."""

    id: int | None = None
    subdomain: str | None = None

    @field_validator("id", "subdomain", mode="before")
    @classmethod
    def _optional(cls, value: Any) -> Any:
        return _blank_is_none(value)


class StatusChange(_Model):
    """One `leads[status][<n>]` entry: the lead moved to `status_id` in `pipeline_id`."""

    lead_id: int = Field(alias="id", gt=0)
    status_id: int
    pipeline_id: int
    old_status_id: int | None = None
    old_pipeline_id: int | None = None
    # Unix times many webhooks send (as UTC datetimes here); some send neither.
    last_modified: datetime | None = None
    updated_at: datetime | None = None

    @field_validator("old_status_id", "old_pipeline_id", mode="before")
    @classmethod
    def _optional(cls, value: Any) -> Any:
        return _blank_is_none(value)

    @field_validator("last_modified", "updated_at", mode="before")
    @classmethod
    def _time(cls, value: Any) -> Any:
        return _unix_time(value)

    @property
    def changed_at(self) -> datetime | None:
        """When amoCRM recorded the change (`last_modified`, else `updated_at`), if the webhook says."""
        return self.last_modified or self.updated_at


def status_changes(form: Mapping[str, Any]) -> tuple[Account, list[StatusChange]]:
    """The account and every `leads[status][<n>]` change of a webhook, in numeric order of n.

    AmoWebhookError (a ValueError) when the form has no `leads[status]` or an entry is not one;
    the message names the fields (`leads[status][1][status_id]`), never their values.
    """
    leads = form.get("leads")
    status = leads.get("status") if isinstance(leads, Mapping) else None
    if status is None:
        raise AmoWebhookError(NO_STATUS_CHANGES)
    if not isinstance(status, Mapping) or not status:
        raise AmoWebhookError("leads[status] is not a set of indexed entries")
    if not all(isinstance(index, str) and index.isdigit() for index in status):
        raise AmoWebhookError("leads[status] has an index that is not a number")

    changes: list[StatusChange] = []
    for index in sorted(status, key=int):
        entry = status[index]
        if not isinstance(entry, Mapping):
            raise AmoWebhookError(f"leads[status][{index}] is not an entry")
        try:
            changes.append(StatusChange.model_validate(entry))
        except ValidationError as error:
            fields = _field_names(error, f"leads[status][{index}]")
            raise AmoWebhookError(f"invalid status change ({fields})") from None

    raw_account = form.get("account")
    try:
        account = Account.model_validate(raw_account if isinstance(raw_account, Mapping) else {})
    except ValidationError as error:
        raise AmoWebhookError(f"invalid account ({_field_names(error, 'account')})") from None
    return account, changes


# -- API v4 answers ------------------------------------------------------------------------------
class Lead(_Model):
    """A `GET /api/v4/leads/<id>?with=contacts` answer."""

    id: int = Field(gt=0)
    name: str = ""
    status_id: int
    pipeline_id: int
    updated_at: datetime | None = None
    # `_embedded.contacts[]`: the one with `is_main: true`, else the first.
    main_contact_id: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _main_contact(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or "main_contact_id" in data:
            return data
        embedded = data.get("_embedded")
        contacts = embedded.get("contacts") if isinstance(embedded, Mapping) else None
        linked = [c for c in contacts if isinstance(c, Mapping)] if isinstance(contacts, list) else []
        main = next((c for c in linked if c.get("is_main") is True), linked[0] if linked else None)
        return {**data, "main_contact_id": main.get("id") if main is not None else None}

    @field_validator("name", mode="before")
    @classmethod
    def _name(cls, value: Any) -> Any:
        return "" if value is None else value

    @field_validator("updated_at", mode="before")
    @classmethod
    def _time(cls, value: Any) -> Any:
        return _unix_time(value)

    @classmethod
    def from_api(cls, body: Mapping[str, Any]) -> Lead:
        return cls.model_validate(body)


STATUS_CHANGED_EVENT = "lead_status_changed"
# `GET /api/v4/events` pages: at most 250 events a page (amoCRM's limit); the sweep reads 100.
EVENTS_PAGE = 100


def _lead_status(values: Any) -> tuple[int, int] | None:
    """`(pipeline_id, status_id)` of an event's `value_after`/`value_before`
    (`[{"lead_status": {"id": 142, "pipeline_id": 7}}]`), None when it names none."""
    for value in values if isinstance(values, list) else []:
        status = value.get("lead_status") if isinstance(value, Mapping) else None
        if isinstance(status, Mapping):
            status_id, pipeline_id = status.get("id"), status.get("pipeline_id")
            if isinstance(status_id, int) and isinstance(pipeline_id, int):
                return pipeline_id, status_id
    return None


class StatusEvent(_Model):
    """One `lead_status_changed` event of `GET /api/v4/events`: lead `entity_id` entered status
    `after` (pipeline, status) from `before` at `created_at`. `id` is amoCRM's own (a string)."""

    id: str = Field(min_length=1, max_length=64)
    type: str
    entity_id: int = Field(gt=0)
    created_at: datetime
    after: tuple[int, int]
    before: tuple[int, int] | None = None

    @model_validator(mode="before")
    @classmethod
    def _values(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or "after" in data:
            return data
        return {
            **data,
            "after": _lead_status(data.get("value_after")),
            "before": _lead_status(data.get("value_before")),
        }

    @field_validator("created_at", mode="before")
    @classmethod
    def _time(cls, value: Any) -> Any:
        return _unix_time(value)


# Phone kinds (`enum_code` of the PHONE field) in the order `Contact.phone` prefers them.
PHONE_PREFERENCE = ("MOB",)


class Contact(_Model):
    """A `GET /api/v4/contacts/<id>` answer. `phones` are the values of the PHONE field (as written
    in the CRM, not normalised), `phone_codes` their `enum_code` (WORK, MOB, HOME, ...)."""

    id: int = Field(gt=0)
    name: str | None = None
    phones: tuple[str, ...] = ()
    phone_codes: tuple[str, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _phone_field(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or "custom_fields_values" not in data:
            return data
        values: list[str] = []
        codes: list[str] = []
        fields = data["custom_fields_values"]
        for field in fields if isinstance(fields, list) else []:
            if not isinstance(field, Mapping) or field.get("field_code") != "PHONE":
                continue
            entries = field.get("values")
            for entry in entries if isinstance(entries, list) else []:
                value = entry.get("value") if isinstance(entry, Mapping) else None
                if isinstance(value, str) and value.strip():
                    values.append(value.strip())
                    code = entry.get("enum_code")
                    codes.append(code.upper() if isinstance(code, str) else "")
        rest = {key: value for key, value in data.items() if key != "custom_fields_values"}
        return {**rest, "phones": tuple(values), "phone_codes": tuple(codes)}

    @field_validator("name", mode="before")
    @classmethod
    def _optional(cls, value: Any) -> Any:
        return _blank_is_none(value)

    def phone(self) -> str | None:
        """The number to text: the first with enum_code MOB, else the first at all."""
        for preferred in PHONE_PREFERENCE:
            for index, value in enumerate(self.phones):
                if index < len(self.phone_codes) and self.phone_codes[index] == preferred:
                    return value
        return self.phones[0] if self.phones else None

    @classmethod
    def from_api(cls, body: Mapping[str, Any]) -> Contact:
        return cls.model_validate(body)


# -- the API client ------------------------------------------------------------------------------
class AmoCrmApi:
    """amoCRM API v4 with a long-lived access token, at `base_url` (`https://shop.amocrm.ru`).

    Errors: TransientError (408, 429, 5xx, no answer; Retry-After honoured) or RemoteRefused
    with kind "unauthorized" (401, 403), "not_found" (204 No Content, 404) or "refused" (any
    other answer, a malformed one included). Reasons read "amocrm lead: HTTP 401 Unauthorized:
    <detail>" (problem+json title and detail, short, phones masked); the token never appears.
    """

    def __init__(self, base_url: str, token: str, *, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("https", "http") or not parts.netloc or parts.path not in ("", "/"):
            raise ValueError("base_url must be https://<account>.amocrm.ru (no path)")
        if parts.query or parts.fragment:
            raise ValueError("base_url must have no query or fragment")
        if not token or token != token.strip() or any(c in token for c in "\r\n"):
            raise ValueError("token must be a non-empty string without whitespace around it")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._token = token
        self._secrets = (token, f"Bearer {token}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.base_url!r}, token=***)"

    def _client(self, entity: str) -> JsonHttpClient:
        return JsonHttpClient(f"amocrm {entity}", secrets=self._secrets, timeout=self.timeout)

    def _get(self, entity: str, path: str) -> Mapping[str, Any]:
        http = self._client(entity)
        response = http.get(f"{self.base_url}{path}", {"Authorization": f"Bearer {self._token}"})
        status = response.status
        if status == 200 and isinstance(response.body, Mapping):
            return response.body
        reason = f"HTTP {status}" + (f" {detail}" if (detail := _problem(response)) else "")
        if status == 204:
            raise http.refused(f"{reason} (no such {entity})", "not_found")
        if 200 <= status < 300:
            raise http.refused(f"{reason}: the answer is not a {entity}", "refused")
        if status in (408, 429) or status >= 500:
            raise http.transient(reason, retry_after_seconds(response))
        if status in (401, 403):
            raise http.refused(reason, "unauthorized")
        if status == 404:
            raise http.refused(reason, "not_found")
        raise http.refused(reason, "refused")

    @staticmethod
    def _checked_id(entity_id: int) -> int:
        if isinstance(entity_id, bool) or not isinstance(entity_id, int) or entity_id <= 0:
            raise ValueError("the id must be a positive integer")
        return entity_id

    def lead(self, lead_id: int) -> Lead:
        """`GET /api/v4/leads/<lead_id>?with=contacts`."""
        body = self._get("lead", f"/api/v4/leads/{self._checked_id(lead_id)}?with=contacts")
        try:
            lead = Lead.from_api(body)
        except ValidationError as error:
            raise self._client("lead").refused(f"malformed lead ({_field_names(error)})", "refused") from None
        if lead.id != lead_id:
            raise self._client("lead").refused(f"answered lead {lead.id} for {lead_id}", "refused")
        return lead

    def contact(self, contact_id: int) -> Contact:
        """`GET /api/v4/contacts/<contact_id>`."""
        body = self._get("contact", f"/api/v4/contacts/{self._checked_id(contact_id)}")
        try:
            contact = Contact.from_api(body)
        except ValidationError as error:
            raise self._client("contact").refused(
                f"malformed contact ({_field_names(error)})", "refused"
            ) from None
        if contact.id != contact_id:
            raise self._client("contact").refused(
                f"answered contact {contact.id} for {contact_id}", "refused"
            )
        return contact

    def status_events(
        self, query: Mapping[str, str | int], *, page: int = 1
    ) -> tuple[list[StatusEvent], bool]:
        """One page of `GET /api/v4/events` filtered to lead status changes and `query`
        (`{"filter[entity_id][]": 42}`, `{"filter[created_at][from]": 1733000000}`), newest first
        as amoCRM lists them: the events, and whether another page follows. No events: ([], False)."""
        params = {
            "filter[type]": STATUS_CHANGED_EVENT,
            "filter[entity]": "lead",
            **query,
            "limit": EVENTS_PAGE,
            "page": page,
        }
        path = f"/api/v4/events?{urlencode(params)}"
        try:
            body = self._get("events", path)
        except RemoteRefused as error:
            if error.kind == "not_found":  # 204: no event matches
                return [], False
            raise
        embedded = body.get("_embedded")
        events = embedded.get("events") if isinstance(embedded, Mapping) else None
        if not isinstance(events, list):
            raise self._client("events").refused("the answer has no _embedded.events list", "refused")
        try:
            parsed = [StatusEvent.model_validate(event) for event in events]
        except ValidationError as error:
            raise self._client("events").refused(
                f"malformed events ({_field_names(error)})", "refused"
            ) from None
        links = body.get("_links")
        return parsed, isinstance(links, Mapping) and "next" in links


def _problem(response: JsonResponse) -> str | None:
    """The problem+json `title: detail` of an error answer, short and with phones masked."""
    body = response.body
    if not isinstance(body, Mapping):
        return None
    parts = [body.get(key) for key in ("title", "detail")]
    text = ": ".join(part.strip() for part in parts if isinstance(part, str) and part.strip())
    return mask_phones(text[:_DETAIL_LIMIT]) if text else None
