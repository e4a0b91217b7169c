"""A stand-in for an amoCRM account: API v4 reads and the "lead status changed" webhook.

API (`base_url`, what the operator has as `https://<subdomain>.amocrm.ru`), with
`Authorization: Bearer <token>` (a long-lived token):

- `GET /api/v4/leads/<id>` (`with=contacts` adds `_embedded.contacts`: `id`, `is_main`,
  `_links`) and `GET /api/v4/contacts/<id>` (the phone in `custom_fields_values`, field code
  `PHONE`), `Content-Type: application/hal+json`;
- `GET /api/v4/events` (`local.fakes.crm_history.EventFeed`): the account's events, newest
  first (`created_at`, then `id`): a new lead is `lead_added` (its `value_after` a note, as
  amoCRM documents it), each move of a lead's status or pipeline `lead_status_changed` with
  `value_before`/`value_after` `[{"lead_status": {"id", "pipeline_id"}}]`; `id` a 26-character
  lowercase time-ordered string, `created_at` unix seconds, `_links`, `_embedded.entity`.
  `filter[type]`, `filter[entity]`, `filter[id]`, `filter[created_by]` (one value, `a,b`, or
  `[]=` lists), `filter[entity_id][]` (at most 10; with exactly one `filter[entity]`, else 400),
  `filter[created_at][from]`/`[to]` (inclusive), `filter[value_before|value_after][leads_statuses]
  [N][status_id|pipeline_id]`, `limit` (default 50, at most 100, else 400), `page` (from 1):
  `{"_page", "_links": {"self", "next"?}, "_embedded": {"events": [...]}}`; `GET
  /api/v4/events/<id>` one event. A query it refuses: 400 problem+json with `validation-errors`;
- an entity that does not exist, or no events: 204 No Content, an empty body, as amoCRM answers;
- a lead hidden from the token's user (`access.hide(pipelines=[7001])` or `orders=[...]`, `POST
  /_access`, `local.fakes.crm_access`): its `GET /api/v4/leads/<id>` is 403 problem+json, and
  `GET /api/v4/events` leaves its events out; `set_contact_phone` (`POST /_contacts/<id>/phone`)
  corrects a contact's number (amoCRM sends no lead status webhook for it);
- a missing or wrong token, or a revoked one (`revoke_token()`): 401 `application/problem+json`
  `{"title": "Unauthorized", "type": "https://httpstatus.es/401", "status": 401, "detail": ...}`;
- the account refused (`local.fakes.accounts`, `POST /_account/block {"cause"}`): "unpaid" 402
  Payment Required, "blocked" 403 Forbidden, problem+json; `POST /_credential/rotate` a new token.

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
byte for byte, as amoCRM's retry would. `burst_statuses` moves one lead several times within one
second, then posts one request per move (or one carrying the net change, `collapse`). Webhook
faults (lost, delayed): `local.fakes.webhook_faults`, `/_webhook_faults`.

Faults (`POST /_faults`, see `local.fakes.base`) apply to the API only: 5xx and 4xx as
problem+json, `rate_limit_next` 429 `{"title": "Too Many Requests", ...}` with Retry-After.
Control endpoints (JSON bodies; a body it cannot follow is 400 with the reason; `at`,
`created_at`: unix seconds, `age_seconds`: that long ago, to date a change in the past, not in the
future nor before the lead's latest event):

    POST /_contacts {"name", "phone"?}                                     -> {"contact_id"}
    POST /_leads {"name", "pipeline_id", "status_id", "contact": {"name", "phone"?}? | "contact_id"?,
                  "custom_fields": {"<field name>": "<text>", ...}?,
                  "at"? | "created_at"? | "age_seconds"?}                  -> {"lead_id", "contact_id"}
    POST /_leads/status {"leads": [{"id", "status_id", "pipeline_id"?, "at"? | "age_seconds"?}, ...]}
                                                                           -> {"delivery"}
    POST /_leads/<id>/burst {"statuses": [status_id | {"status_id", "pipeline_id"?}, ...],
                             "collapse"?}                                  -> {"lead", "deliveries"}
    POST /_resend                                                          -> {"delivery"}
    GET  /_leads/<id>                                                      -> the lead (with contacts)
    POST /_token/revoke, POST /_token/restore; GET /_account (base URL, token, handler)
"""

from __future__ import annotations

import functools
import itertools
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from local.fakes import crm_access
from local.fakes.amocrm_model import (
    HAL_JSON,
    LOST_STATUS_ID,
    PROBLEM_JSON,
    USER_ID,
    WON_STATUS_ID,
    invalid_query,
    new_contact,
    new_lead,
    phone_fields,
    positive,
    problem,
    status_change,
    status_fields,
    unauthorized,
)
from local.fakes.base import FakeRequest, FakeResponse, status_phrase
from local.fakes.crm_history import EventFeed, EventQueryError, change_time, not_after
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
    php_params,
    text_field,
)

DEFAULT_TOKEN = "localAmoLongLivedToken0123456789"  # noqa: S105 - a fake's token
DEFAULT_SUBDOMAIN = "localshop"
DEFAULT_ACCOUNT_ID = 29085955
EVENT = "leads.status"
USER_AGENT = "amoCRM-Webhooks/3.0"
FIRST_LEAD_ID = 31000001
FIRST_CONTACT_ID = 42000001
# The account's lead custom fields get ids from here, in the order their names are first used.
FIRST_LEAD_FIELD_ID = 1425001
_API_PATH = re.compile(
    r"^/api/v4/(?:(?P<entity>leads|contacts)/(?P<id>\d+)|(?P<events>events)(?:/(?P<event>[0-9a-z]+))?)$"
)
_LEAD_ROUTE = re.compile(r"^/_leads/(?P<id>\d+)(?P<burst>/burst)?$")

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
        self.events = EventFeed(account_id, USER_ID)
        self.access = crm_access.ReadAccess()  # what the token's user may not see

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

    def account_refusals(self) -> dict[str, Callable[[], FakeResponse]]:
        """amoCRM's answers when the account is refused (API v4 error codes): 402 when the
        subscription ended, 403 when the account is blocked."""
        return {
            "unpaid": lambda: problem(402, "Functional not paid in this account"),
            "blocked": lambda: problem(403, "Account is blocked"),
        }

    def rotate_credential(self, value: str) -> None:
        """A new long-lived token: the old one is refused (401) from now on."""
        self.token = value

    # -- the account -------------------------------------------------------------------------------
    def create_contact(self, name: str, phone: str | None) -> int:
        check_contact(name, phone)
        now = self._clock.tick()
        with self._state_lock:
            contact_id = next(self._contact_ids)
            self._contacts[contact_id] = new_contact(contact_id, name, phone, now, self.account_id)
        return contact_id

    def set_contact_phone(self, contact_id: int, phone: str) -> None:
        """A manager corrects the contact's phone (amoCRM sends no lead status webhook for it)."""
        check_contact("-", phone)
        with self._state_lock:
            self._contacts[contact_id].update(
                custom_fields_values=phone_fields(phone), updated_at=self._clock.now()
            )

    def create_lead(
        self,
        name: str,
        pipeline_id: int,
        status_id: int,
        contact_id: int | None = None,
        *,
        created_at: int | None = None,
        custom_fields: Mapping[str, str] | None = None,
    ) -> int:
        """A lead in a pipeline's status (amoCRM's ids are any positive integers here); no webhook.

        Its `lead_added` event is in the feed; `created_at` (unix seconds) dates both in the past.
        `custom_fields`: text custom fields by name, carried by the lead and its webhooks.
        """
        if not isinstance(name, str) or not name.strip():
            raise ValueError("a lead needs a name")
        positive("pipeline_id", pipeline_id)
        positive("status_id", status_id)
        fields = dict(custom_fields or {})
        if not all(isinstance(k, str) and k.strip() and isinstance(v, str) for k, v in fields.items()):
            raise ValueError("custom_fields must map non-empty field names to text values")
        now = not_after(created_at, self._clock.tick(), "created_at")
        with self._state_lock:
            if contact_id is not None and contact_id not in self._contacts:
                raise ValueError(f"no contact {contact_id}")
            lead_id = next(self._lead_ids)
            lead = new_lead(lead_id, name, pipeline_id, status_id, now, self.account_id)
            lead["custom_fields_values"] = self._lead_field_values(fields)
            self._leads[lead_id] = lead
            if contact_id is not None:
                self._lead_contact[lead_id] = contact_id
            self.events.lead_added(lead_id, now)
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

    def change_statuses(
        self, changes: Sequence[StatusChange], at: Mapping[int, int] | None = None
    ) -> Delivery:
        """Each lead moves to its new status (and pipeline); one webhook carries them all.

        Each move that changes the status or pipeline adds a `lead_status_changed` event. `at`
        (lead id -> unix seconds) dates a lead's move in the past: its event, `updated_at`,
        `closed_at`; not before the lead's latest event.
        """
        parsed = [status_change(change) for change in changes]
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
            times = {lead_id: self._move_time(lead_id, (at or {}).get(lead_id), now) for lead_id in lead_ids}
            moves = [
                self._move(lead_id, status_id, pipeline_id, times[lead_id])
                for lead_id, status_id, pipeline_id in parsed
            ]
            payload, headers = self._record_payload(moves)
        return self._deliver(tuple(lead_ids), payload, headers, url)

    def burst_statuses(
        self, lead_id: int, statuses: Sequence[int | tuple[int, int]], collapse: bool = False
    ) -> list[Delivery]:
        """Several moves of one lead within the same second (a status id, or (status_id,
        pipeline_id)), each a `lead_status_changed` event; then one request per move, or with
        `collapse` one request after the last, carrying the net change (old status: before the burst).
        """
        steps = [
            status_change((lead_id, *(step if isinstance(step, tuple) else (step,)))) for step in statuses
        ]
        if len(steps) < 2:
            raise ValueError("a burst needs at least two statuses")
        url = self._handler()
        now = self._clock.tick()
        with self._state_lock:
            lead = self._leads.get(lead_id)
            if lead is None:
                raise KeyError(f"no lead {lead_id}")
            where = (lead["status_id"], lead["pipeline_id"])
            for _, status_id, pipeline_id in steps:
                target = (status_id, pipeline_id if pipeline_id is not None else where[1])
                if target == where:
                    raise ValueError(f"a burst moves the lead each time: status {status_id} follows itself")
                where = target
            moves = [self._move(lead_id, status_id, pipeline_id, now) for _, status_id, pipeline_id in steps]
            if collapse:
                moves = [(moves[-1][0], moves[0][1], moves[0][2])]
            requests = [self._record_payload([move]) for move in moves]
        return [self._deliver((lead_id,), payload, headers, url) for payload, headers in requests]

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

    # -- changes and documents (under the account lock) -----------------------------------------------
    def _move_time(self, lead_id: int, at: int | None, now: int) -> int:
        when = not_after(at, now, "at")
        last = self.events.last_time(lead_id)
        if at is not None and last is not None and when < last:
            raise ValueError(f"at ({when}) is before lead {lead_id}'s latest event ({last})")
        return when

    def _move(
        self, lead_id: int, status_id: int, pipeline_id: int | None, when: int
    ) -> tuple[dict[str, Any], int, int]:
        """The lead moved (an event when its status or pipeline changes): (lead as it is now, the
        old status, the old pipeline)."""
        lead = self._leads[lead_id]
        old_status, old_pipeline = lead["status_id"], lead["pipeline_id"]
        new_pipeline = pipeline_id if pipeline_id is not None else old_pipeline
        lead.update(
            status_id=status_id,
            pipeline_id=new_pipeline,
            updated_at=max(lead["updated_at"], when),
            updated_by=USER_ID,
            closed_at=when if status_id in (WON_STATUS_ID, LOST_STATUS_ID) else None,
        )
        if (status_id, new_pipeline) != (old_status, old_pipeline):
            self.events.lead_status_changed(
                lead_id, when, (old_status, old_pipeline), (status_id, new_pipeline)
            )
        return dict(lead), old_status, old_pipeline

    def _record_payload(self, moves: list[tuple[dict[str, Any], int, int]]) -> tuple[str, dict[str, str]]:
        """One `leads[status]` request carrying `moves`, remembered for resend_last."""
        pairs: list[tuple[str, object]] = [
            ("account[subdomain]", self.subdomain),
            ("account[id]", self.account_id),
            ("account[_links][self]", self.account_url),
        ]
        for index, (lead, old_status, old_pipeline) in enumerate(moves):
            pairs.extend(status_fields(index, lead, old_status, old_pipeline))
        payload = php_form(pairs)
        headers = {"User-Agent": USER_AGENT, "X-Amocrm-Requestid": str(uuid.uuid4())}
        self._last_sent = (tuple(lead["id"] for lead, _, _ in moves), payload, headers)
        return payload, headers

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
    def _deliver(
        self, lead_ids: tuple[int, ...], payload: str, headers: dict[str, str], url: str
    ) -> Delivery:
        """Outside the account lock: the handler may read the leads while it answers."""
        build = functools.partial(Delivery, event=EVENT, lead_ids=lead_ids, payload=payload)
        return self._send(url, payload, headers, build)

    # -- API -----------------------------------------------------------------------------------------------
    def error_response(self, status: int, retry_after: int | None = None) -> FakeResponse:
        if retry_after is not None or status == 429:
            headers = {"Content-Type": PROBLEM_JSON}
            if retry_after is not None:
                headers["Retry-After"] = str(retry_after)
            body = {"title": "Too Many Requests", "type": "https://httpstatus.es/429", "status": 429}
            return FakeResponse(429, body, headers)
        if status == 401:
            return unauthorized()
        return problem(status, f"{status_phrase(status)} (injected fault)")

    def answer(self, request: FakeRequest) -> FakeResponse:
        if not request.path.startswith("/api/"):
            return problem(404, "Not found")
        authorization = request.headers.get("authorization", "")
        if self._revoked or authorization != f"Bearer {self.token}":
            return unauthorized()
        if (refused := self.account.refusal()) is not None:
            return refused
        match = _API_PATH.match(request.path)
        if match is None:
            return problem(404, "Not found")
        if request.method != "GET":
            return problem(405, "Method not allowed")
        if match["events"]:
            return self._answer_events(request, match["event"])
        entity_id = int(match["id"])
        with_values = {value.strip() for value in request.query.get("with", "").split(",")}
        with self._state_lock:
            if match["entity"] == "leads":
                if entity_id not in self._leads:
                    return FakeResponse(204, b"")
                if not self.access.may_read(entity_id, self._leads[entity_id]["pipeline_id"]):
                    return problem(403, "Access denied")
                document = self._lead_document(entity_id, "contacts" in with_values)
            else:
                if entity_id not in self._contacts:
                    return FakeResponse(204, b"")
                document = self._contact_document(entity_id)
        return FakeResponse(200, document, {"Content-Type": HAL_JSON})

    def _answer_events(self, request: FakeRequest, event_id: str | None) -> FakeResponse:
        """`GET /api/v4/events` (204 when no event matches) and `GET /api/v4/events/<id>`."""
        if event_id is not None:
            document = self.events.event(event_id, self.base_url)
        else:
            pairs = request.field_pairs()
            with self._state_lock:
                pipelines = {lead_id: lead["pipeline_id"] for lead_id, lead in self._leads.items()}

            def visible(lead_id: int) -> bool:
                return self.access.may_read(lead_id, pipelines.get(lead_id, 0))

            try:
                document = self.events.query(php_params(pairs), pairs, self.base_url, visible)
            except EventQueryError as error:
                return invalid_query(str(error), error.path)
        if document is None:
            return FakeResponse(204, b"")
        return FakeResponse(200, document, {"Content-Type": HAL_JSON})

    # -- control endpoints ----------------------------------------------------------------------------------
    def _control(self, request: FakeRequest) -> FakeResponse | None:
        route = (request.method, request.path)
        if route == ("GET", "/_account"):
            return FakeResponse(200, self._account_state())
        if (answer := crm_access.control(self, request)) is not None:
            return answer
        if route == ("POST", "/_contacts"):
            return FakeResponse(201, {"contact_id": self._contact_from(json_object(request))})
        if route == ("POST", "/_leads"):
            return self._control_create_lead(json_object(request))
        if route == ("POST", "/_leads/status"):
            return FakeResponse(200, {"delivery": self._control_statuses(json_object(request)).as_dict()})
        if route == ("POST", "/_resend"):
            return FakeResponse(200, {"delivery": self.resend_last().as_dict()})
        match = _LEAD_ROUTE.match(request.path)
        if match is not None and not match["burst"] and request.method == "GET":
            return FakeResponse(200, self.lead(int(match["id"])))
        if match is not None and match["burst"] and request.method == "POST":
            return self._control_burst(int(match["id"]), json_object(request))
        return None

    def _control_create_lead(self, document: dict[str, Any]) -> FakeResponse:
        known = {
            "name",
            "pipeline_id",
            "status_id",
            "contact",
            "contact_id",
            "custom_fields",
            "created_at",
            "at",
            "age_seconds",
        }
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
        created_at = change_time(document, self._clock.now(), names=("created_at", "at"))
        contact_id = control_contact(document, self.contact, self._contact_from)
        lead_id = self.create_lead(
            name, pipeline_id, status_id, contact_id, created_at=created_at, custom_fields=custom_fields
        )
        return FakeResponse(201, {"lead_id": lead_id, "contact_id": contact_id})

    def _control_statuses(self, document: dict[str, Any]) -> Delivery:
        unknown = set(document) - {"leads"}
        if unknown:
            raise ControlInputError(f"unknown keys {sorted(unknown)}; expected only leads")
        leads = document.get("leads")
        if not isinstance(leads, list) or not leads:
            raise ControlInputError('leads must be a non-empty list such as [{"id": 1, "status_id": 142}]')
        changes: list[StatusChange] = []
        times: dict[int, int] = {}
        now = self._clock.now()
        for entry in leads:
            if not isinstance(entry, dict):
                raise ControlInputError('each lead must be an object {"id", "status_id", "pipeline_id"?}')
            extra = set(entry) - {"id", "status_id", "pipeline_id", "at", "age_seconds"}
            if extra:
                known = "id, status_id, pipeline_id, at, age_seconds"
                raise ControlInputError(f"unknown keys {sorted(extra)} in a lead; known: {known}")
            lead_id = int(id_field(entry, "id") or 0)
            status_id = int(id_field(entry, "status_id") or 0)
            pipeline_id = id_field(entry, "pipeline_id", required=False)
            changes.append((lead_id, status_id) if pipeline_id is None else (lead_id, status_id, pipeline_id))
            existing(self.lead, lead_id)
            when = change_time(entry, now)
            if when is not None:
                times[lead_id] = when
        return self.change_statuses(changes, times)

    def _control_burst(self, lead_id: int, document: dict[str, Any]) -> FakeResponse:
        unknown = set(document) - {"statuses", "collapse"}
        if unknown:
            raise ControlInputError(f"unknown keys {sorted(unknown)}; a burst takes statuses, collapse")
        statuses, collapse = document.get("statuses"), document.get("collapse", False)
        if not isinstance(statuses, list):
            raise ControlInputError(
                'statuses must be a list, e.g. [70012, {"status_id": 142, "pipeline_id": 7001}]'
            )
        if not isinstance(collapse, bool):
            raise ControlInputError("collapse must be true or false")
        steps: list[int | tuple[int, int]] = []
        for step in statuses:
            if isinstance(step, dict):
                status_id = int(id_field(step, "status_id") or 0)
                pipeline_id = id_field(step, "pipeline_id", required=False)
                steps.append(status_id if pipeline_id is None else (status_id, pipeline_id))
            else:
                steps.append(int(id_field({"status_id": step}, "status_id") or 0))
        self.lead(lead_id)  # 404 for a lead that does not exist
        deliveries = self.burst_statuses(lead_id, steps, collapse)
        return FakeResponse(
            200, {"lead": self.lead(lead_id), "deliveries": [delivery.as_dict() for delivery in deliveries]}
        )

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
