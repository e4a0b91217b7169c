"""amoCRM (Kommo): "lead status changed" webhooks in, API v4 look-ups out.

Webhook (amoCRM -> us), `application/x-www-form-urlencoded` (amocrm.ru/developers, "Webhooks",
webhooks-format): one POST may carry many leads, each `leads[status][<n>][...]`, and the account:

    leads[status][0][id]=21804135&leads[status][0][status_id]=61482550
    &leads[status][0][pipeline_id]=7391542&leads[status][0][old_status_id]=61482546
    &leads[status][0][old_pipeline_id]=7391542 ... &account[id]=31415926&account[subdomain]=shop

Bodies captured from real accounts differ: many also carry the lead's other fields (name,
price, responsible_user_id, last_modified, created_at, updated_at...) and its custom fields
(`leads[status][0][custom_fields][<k>][values][<v>][value]`), some only the five ids above.
`read_status_webhook` reads the five ids of each lead and the account, and skips everything else
unread (`pipeline.crm.forms.form_fields`): a batch of a hundred leads with fifty custom fields each is
some twenty thousand fields, none of which the pipeline needs.

API (us -> amoCRM): `GET https://<subdomain>.amocrm.ru/api/v4/leads/<id>?with=contacts` and
`/api/v4/contacts/<id>` with `Authorization: Bearer <long-lived token>`. amoCRM answers 204 No
Content (no body) for an id it has no entity for; errors are `application/problem+json`
(`title`, `status`, `detail`).

The webhook's account and entries and the API's answers are plain frozen dataclasses checked by
hand (`pipeline.validation`), not pydantic models: the `amocrm` function and the webhook's amoCRM
route would otherwise import pydantic and build its schemas at each cold start, about 0.4x of
`import boto3` (docs/perf.md). tests/unit/crm_sources/test_amocrm_oracle.py holds them to the
pydantic models they replaced, on generated input. A refusal names fields, never their values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode, urlsplit

from pipeline.crm import forms
from pipeline.errors import RemoteRefused
from pipeline.http import DEFAULT_TIMEOUT_SECONDS, JsonHttpClient, JsonResponse, retry_after_seconds
from pipeline.observability import mask_phones
from pipeline.validation import Fields, Invalid, aliased, blank_is_none, refusal

NO_STATUS_CHANGES = "no lead status changes in the webhook (is it subscribed to 'lead status changed'?)"
_DETAIL_LIMIT = 200


# What the webhook reads of each `leads[status][<n>]` entry and of `account`; every other field
# (name, price, custom fields, tags, links) is skipped unread, however many a batch carries.
STATUS_FIELDS = ("id", "status_id", "pipeline_id", "old_status_id", "old_pipeline_id")
ACCOUNT_FIELDS = ("id", "subdomain")
# An entry's index as PHP numbers a list: 0, 1, 2... (no sign, no leading zero).
_INDEX = re.compile(r"0|[1-9][0-9]*")

FieldError = dict[str, Any]  # {"loc": [form field name], "msg": why}, as the webhook answers errors


class AmoWebhookError(ValueError):
    """Why a webhook is not a readable lead-status webhook. `errors` name the form fields
    (`{"loc": ["account[id]"], "msg": ...}`), never their values."""

    def __init__(self, message: str, errors: tuple[FieldError, ...] = ()) -> None:
        super().__init__(message)
        self.errors = errors


class NoStatusChanges(AmoWebhookError):
    """The webhook has no `leads[status]`: it is about other events than lead status changes."""


def _unix_time(value: Any) -> datetime | None:
    """A unix time (int or digit string) as an aware UTC datetime; 0 and blanks as None."""
    value = blank_is_none(value)
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


def _blanks_as_none(data: Any, keys: tuple[str, ...]) -> Any:
    """`data` with its blank `keys` (None, empty or spaces) as None: amoCRM's forms leave an
    unset id empty."""
    if not isinstance(data, Mapping):
        return data
    return {**data, **{key: None for key in keys if key in data and blank_is_none(data[key]) is None}}


def _moment(fields: Fields, key: str, *, required: bool) -> datetime | None:
    """`_unix_time` of `key`; where `required`, a refusal when it is missing or none (0, blank)."""
    if key not in fields.data:
        if required:
            fields.problems.append(refusal((key,), "missing", "Field required"))
        return None
    moment = fields.checked(key, fields.data[key], _unix_time)
    refused = any(problem["loc"] == (key,) for problem in fields.problems)
    if moment is None and required and not refused:
        fields.problems.append(refusal((key,), "datetime_type", "Input should be a valid datetime"))
    return moment if isinstance(moment, datetime) else None


# -- the webhook ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Account:
    """`account[id]`, `account[subdomain]` of a webhook (blanks as None)."""

    id: int | None = None
    subdomain: str | None = None

    @classmethod
    def parse(cls, data: Any) -> Account:
        """The account in `data` (field name -> text), or `Invalid` naming its refused fields."""
        fields = Fields("Account", _blanks_as_none(data, ("id", "subdomain")))
        account = cls(
            id=fields.number("id", int, default=None), subdomain=fields.text("subdomain", default=None)
        )
        fields.done()
        return account

    def to_payload(self) -> dict[str, Any]:
        """The `account` of the event the webhook publishes."""
        return {"id": self.id, "subdomain": self.subdomain}


@dataclass(frozen=True, kw_only=True)
class StatusChange:
    """One `leads[status][<n>]` entry: the lead moved to `status_id` in `pipeline_id`."""

    lead_id: int  # the entry's `id`
    status_id: int
    pipeline_id: int
    old_status_id: int | None = None
    old_pipeline_id: int | None = None

    @classmethod
    def parse(cls, data: Any) -> StatusChange:
        """The entry in `data` (field name -> text; blank old ids as None), or `Invalid` naming
        its refused fields. The lead id is `id`, else `lead_id` (the pydantic model's
        `populate_by_name`)."""
        fields = Fields("StatusChange", _blanks_as_none(data, ("old_status_id", "old_pipeline_id")))
        change = cls(
            lead_id=fields.number(aliased(fields.data, "id", "lead_id"), int, gt=0),
            status_id=fields.number("status_id", int),
            pipeline_id=fields.number("pipeline_id", int),
            old_status_id=fields.number("old_status_id", int, default=None),
            old_pipeline_id=fields.number("old_pipeline_id", int, default=None),
        )
        fields.done()
        return change

    def to_payload(self) -> dict[str, Any]:
        """The `lead` of the event the webhook publishes, named as the webhook names its fields."""
        return {
            "id": self.lead_id,
            "status_id": self.status_id,
            "pipeline_id": self.pipeline_id,
            "old_status_id": self.old_status_id,
            "old_pipeline_id": self.old_pipeline_id,
        }


@dataclass(frozen=True)
class RefusedEntry:
    """A `leads[status][<n>]` entry that is not a status change, and why (`errors`, naming its
    form fields, never their values)."""

    index: str
    errors: tuple[FieldError, ...]


@dataclass(frozen=True)
class StatusWebhook:
    """A lead status webhook: its account, its valid changes and its refused entries, each in
    numeric order of n. One entry's fault refuses that entry only."""

    account: Account
    changes: tuple[StatusChange, ...]
    refused: tuple[RefusedEntry, ...]


def _form_name(prefix: str, loc: tuple[Any, ...]) -> str:
    """`leads[status][1]` + ("status_id",) -> `leads[status][1][status_id]` (a phone-looking index masked)."""
    return mask_phones(prefix + "".join(f"[{part}]" for part in loc))


def _field_errors(error: Invalid, prefix: str) -> tuple[FieldError, ...]:
    return tuple(
        {"loc": [_form_name(prefix, item["loc"])], "msg": item["msg"]}
        for item in error.errors(include_input=False)
    )


def read_status_webhook(raw: bytes) -> StatusWebhook:
    """The lead status webhook in the form body `raw`, reading only STATUS_FIELDS of each entry
    and ACCOUNT_FIELDS of the account.

    forms.FormError when `raw` is not a form (FormTooLarge over forms.MAX_BODY_BYTES);
    NoStatusChanges when it has no `leads[status]`; AmoWebhookError when `leads[status]` is not a
    list of entries, or the account is malformed or repeats a field. A malformed entry (a field
    missing, not a number, or given twice) is a RefusedEntry, and the rest are read on.
    """
    entries: dict[str, dict[str, str]] = {}
    # An entry's faults by form field: a field given a thousand times is one fault, not a thousand.
    faults: dict[str, dict[str, FieldError]] = {}
    account: dict[str, str] = {}
    for field in forms.form_fields(raw):
        path = field.path
        if path[0] == "account" and len(path) == 2 and path[1] in ACCOUNT_FIELDS:
            if path[1] in account:
                error = {"loc": [f"account[{path[1]}]"], "msg": "given twice"}
                raise AmoWebhookError(f"invalid account (account[{path[1]}])", (error,))
            account[path[1]] = field.value()
            continue
        if path[:2] != ("leads", "status"):
            continue
        if len(path) < 3 or not _INDEX.fullmatch(path[2]):
            error = {"loc": ["leads[status]"], "msg": "not a list of entries numbered 0, 1, 2..."}
            raise AmoWebhookError("leads[status] has an entry that is not numbered", (error,))
        index = path[2]
        entry = entries.setdefault(index, {})
        prefix = f"leads[status][{index}]"
        if len(path) == 3:
            name = _form_name(prefix, ())
            faults.setdefault(index, {})[name] = {"loc": [name], "msg": "not an entry"}
        elif len(path) == 4 and path[3] in STATUS_FIELDS:
            if path[3] in entry:
                name = _form_name(prefix, path[3:])
                faults.setdefault(index, {})[name] = {"loc": [name], "msg": "given twice"}
            else:
                entry[path[3]] = field.value()
    if not entries:
        raise NoStatusChanges(NO_STATUS_CHANGES)

    changes: list[StatusChange] = []
    refused: list[RefusedEntry] = []
    # Numeric order without int(): an index is canonical decimal, so shorter is smaller.
    for index in sorted(entries, key=lambda index: (len(index), index)):
        if index in faults:
            refused.append(RefusedEntry(index, tuple(faults[index].values())))
            continue
        try:
            changes.append(StatusChange.parse(entries[index]))
        except Invalid as error:
            refused.append(RefusedEntry(index, _field_errors(error, f"leads[status][{index}]")))
    try:
        parsed_account = Account.parse(account)
    except Invalid as error:
        errors = _field_errors(error, "account")
        names = ", ".join(sorted(item["loc"][0] for item in errors))
        raise AmoWebhookError(f"invalid account ({names})", errors) from None
    return StatusWebhook(parsed_account, tuple(changes), tuple(refused))


# -- API v4 answers ------------------------------------------------------------------------------
def _with_main_contact(data: Any) -> Any:
    """`data` with `main_contact_id`: of `_embedded.contacts[]`, the one with `is_main: true`, else
    the first (unless `data` names it already)."""
    if not isinstance(data, Mapping) or "main_contact_id" in data:
        return data
    embedded = data.get("_embedded")
    contacts = embedded.get("contacts") if isinstance(embedded, Mapping) else None
    linked = [c for c in contacts if isinstance(c, Mapping)] if isinstance(contacts, list) else []
    main = next((c for c in linked if c.get("is_main") is True), linked[0] if linked else None)
    return {**data, "main_contact_id": main.get("id") if main is not None else None}


@dataclass(frozen=True, kw_only=True)
class Lead:
    """A `GET /api/v4/leads/<id>?with=contacts` answer."""

    id: int
    name: str = ""
    status_id: int
    pipeline_id: int
    updated_at: datetime | None = None
    # `_embedded.contacts[]`: the one with `is_main: true`, else the first.
    main_contact_id: int | None = None

    @classmethod
    def from_api(cls, body: Any) -> Lead:
        """The lead in `body`, or `Invalid` naming its refused fields (a null name is "")."""
        fields = Fields("Lead", _with_main_contact(body))
        lead_id = fields.number("id", int, gt=0)
        name = "" if fields.data.get("name") is None else fields.text("name")
        status_id = fields.number("status_id", int)
        pipeline_id = fields.number("pipeline_id", int)
        updated_at = _moment(fields, "updated_at", required=False)
        main_contact_id = fields.number("main_contact_id", int, default=None)
        fields.done()
        return cls(
            id=lead_id,
            name=name,
            status_id=status_id,
            pipeline_id=pipeline_id,
            updated_at=updated_at,
            main_contact_id=main_contact_id,
        )


# What amoCRM's refusals of the account are (API v4 "Error codes", "Common errors"): 401 the token
# is invalid, revoked or expired (or the user behind it disabled, codes 110-112); 402 Payment
# Required, the subscription ended ("Functional not paid in this account"); 403 the account is
# blocked (for exceeding the request limits again and again) or refuses this IP (code 113).
ACCOUNT_STATUSES = {401: "unauthorized", 402: "unpaid", 403: "blocked"}
# A 403 refuses the account only when it says so (blocked, or this IP refused); any other 403 is
# about the entity asked for: the token's user has no right on it (a lead hidden from that user).
ACCOUNT_403_WORDS = ("blocked", "заблокирован", "ip")

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


def _with_statuses(data: Any) -> Any:
    """`data` with `after` and `before` read from `value_after`/`value_before` (unless `data`
    names `after` already)."""
    if not isinstance(data, Mapping) or "after" in data:
        return data
    return {
        **data,
        "after": _lead_status(data.get("value_after")),
        "before": _lead_status(data.get("value_before")),
    }


@dataclass(frozen=True, kw_only=True)
class StatusEvent:
    """One `lead_status_changed` event of `GET /api/v4/events`: lead `entity_id` entered status
    `after` (pipeline, status) from `before` at `created_at`. `id` is amoCRM's own (a string)."""

    id: str
    type: str
    entity_id: int
    created_at: datetime
    after: tuple[int, int]
    before: tuple[int, int] | None = None

    @classmethod
    def parse(cls, data: Any) -> StatusEvent:
        """The event in `data`, or `Invalid` naming its refused fields."""
        fields = Fields("StatusEvent", _with_statuses(data))
        event_id = fields.text("id", min_length=1, max_length=64)
        kind = fields.text("type")
        entity_id = fields.number("entity_id", int, gt=0)
        created_at = _moment(fields, "created_at", required=True)
        after = fields.sequence("after", int, length=2)
        before = fields.sequence("before", int, length=2, default=None)
        fields.done()
        assert created_at is not None  # done() refused it otherwise
        return cls(
            id=event_id, type=kind, entity_id=entity_id, created_at=created_at, after=after, before=before
        )


# Phone kinds (`enum_code` of the PHONE field) in the order `Contact.phone` prefers them.
PHONE_PREFERENCE = ("MOB",)


def _with_phones(data: Any) -> Any:
    """`data` with `phones` and `phone_codes` read from the PHONE field of `custom_fields_values`
    (when it has that key): each non-blank value stripped, its `enum_code` upper-cased."""
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


@dataclass(frozen=True, kw_only=True)
class Contact:
    """A `GET /api/v4/contacts/<id>` answer. `phones` are the values of the PHONE field (as written
    in the CRM, not normalised), `phone_codes` their `enum_code` (WORK, MOB, HOME, ...)."""

    id: int
    name: str | None = None
    phones: tuple[str, ...] = ()
    phone_codes: tuple[str, ...] = ()

    def phone(self) -> str | None:
        """The number to text: the first with enum_code MOB, else the first at all."""
        for preferred in PHONE_PREFERENCE:
            for index, value in enumerate(self.phones):
                if index < len(self.phone_codes) and self.phone_codes[index] == preferred:
                    return value
        return self.phones[0] if self.phones else None

    @classmethod
    def from_api(cls, body: Any) -> Contact:
        """The contact in `body` (a blank name as None), or `Invalid` naming its refused fields."""
        fields = Fields("Contact", _blanks_as_none(_with_phones(body), ("name",)))
        contact = cls(
            id=fields.number("id", int, gt=0),
            name=fields.text("name", default=None),
            phones=fields.sequence("phones", str, default=()),
            phone_codes=fields.sequence("phone_codes", str, default=()),
        )
        fields.done()
        return contact


# -- the API client ------------------------------------------------------------------------------
class AmoCrmApi:
    """amoCRM API v4 with a long-lived access token, at `base_url` (`https://shop.amocrm.ru`).

    Errors: TransientError (408, 429, 5xx, no answer; Retry-After honoured), AccountRefused
    (ACCOUNT_STATUSES: the token, or the whole account) or RemoteRefused with kind "not_found"
    (204 No Content, 404) or "refused" (any other answer, a malformed one included). Reasons
    read "amocrm lead: HTTP 401 Unauthorized: <detail>" (problem+json title and detail, short,
    phones masked); the token never appears.
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
        if status == 403 and not _says_account(detail):
            raise http.refused(reason, "unauthorized")
        if status in ACCOUNT_STATUSES:
            raise http.account_refused(reason, ACCOUNT_STATUSES[status])
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
        except Invalid as error:
            raise self._client("lead").refused(
                f"malformed lead ({', '.join(error.field_names())})", "refused"
            ) from None
        if lead.id != lead_id:
            raise self._client("lead").refused(f"answered lead {lead.id} for {lead_id}", "refused")
        return lead

    def contact(self, contact_id: int) -> Contact:
        """`GET /api/v4/contacts/<contact_id>`."""
        body = self._get("contact", f"/api/v4/contacts/{self._checked_id(contact_id)}")
        try:
            contact = Contact.from_api(body)
        except Invalid as error:
            raise self._client("contact").refused(
                f"malformed contact ({', '.join(error.field_names())})", "refused"
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
            parsed = [StatusEvent.parse(event) for event in events]
        except Invalid as error:
            raise self._client("events").refused(
                f"malformed events ({', '.join(error.field_names())})", "refused"
            ) from None
        links = body.get("_links")
        return parsed, isinstance(links, Mapping) and "next" in links


def _says_account(detail: str | None) -> bool:
    """Whether a 403's problem text is about the whole account (see ACCOUNT_403_WORDS)."""
    words = re.findall(r"\w+", (detail or "").lower())
    return any(word == "ip" or word.startswith(ACCOUNT_403_WORDS[:2]) for word in words)


def _problem(response: JsonResponse) -> str | None:
    """The problem+json `title: detail` of an error answer, short and with phones masked."""
    body = response.body
    if not isinstance(body, Mapping):
        return None
    parts = [body.get(key) for key in ("title", "detail")]
    text = ": ".join(part.strip() for part in parts if isinstance(part, str) and part.strip())
    return mask_phones(text[:_DETAIL_LIMIT]) if text else None
