"""A stand-in for a Bitrix24 portal: deals and contacts, its REST API, its outgoing webhooks.

REST, through the portal's inbound webhook (`rest_url()`, what the operator puts into the
pipeline's secret): `POST` or `GET /rest/<user>/<code>/<method>` (or `<method>.json`) with the
parameters as a JSON body, a form body or the query string, answered
`{"result": ..., "time": {...}}` like the portal:

- `crm.deal.get` / `crm.contact.get` (`id`): the deal or contact with Bitrix24's field names and
  its string values (`"ID": "7"`, `"CLOSED": "N"`, dates as `2026-12-01T10:15:07+03:00` in the
  portal's time zone, a contact's `PHONE` multifield only when it has a phone); a missing one is
  400 `{"error": "", "error_description": "Not found"}`, a bad id 400 "ID is not defined or
  invalid.";
- `crm.deal.list` (`filter` of exact field values, optionally `=FIELD`) and `crm.status.list`
  (`filter[ENTITY_ID]` `DEAL_STAGE` or `DEAL_STAGE_<category>`: the standard stages);
- `crm.stagehistory.list` (`local.fakes.crm_history.StageHistory`): the portal's stage history.
  A new deal adds a record `TYPE_ID` 1, each move 2 (to an intermediate stage) or 3 (to a final
  one); `ID` (portal-wide), `TYPE_ID`, `OWNER_ID` (the deal), `CATEGORY_ID` as integers,
  `CREATED_TIME` in portal time, `STAGE_SEMANTIC_ID`, `STAGE_ID`. `entityTypeId` 2 (deals; 1 and
  5 answer no items, another 400 `ENTITY_TYPE_NOT_SUPPORTED`), `order` (`{"ID": "DESC"}`, any
  field; default ID ASC), `filter` (exact values, lists, prefixes `=`, `!=`, `!`, `<`, `>`, `<=`,
  `>=`, `@`, `!@`; CREATED_TIME compared as an instant, any offset; another field, order or value
  400 `INVALID_ARG_VALUE`), `select`, `start`: 50 a page, with `total` and `next`;
- a deal hidden from the webhook's user (`access.hide(pipelines=[2])` or `orders=[7]`, `POST
  /_access`, `local.fakes.crm_access`): `crm.deal.get` answers 400 "Access denied", the list
  methods leave it and its history out; `set_contact_phone` (`POST /_contacts/<id>/phone`) is a
  manager correcting a number (no webhook: the handler is bound to deal events);
- another method: 404 `ERROR_METHOD_NOT_FOUND`; another user or code, or a revoked webhook
  (`revoke_webhook()`): 401 `INVALID_CREDENTIALS`. The code is masked in `/_calls`. The portal
  refused (`local.fakes.accounts`): `bitrix24_model.PORTAL_REFUSALS`.
Query and form parameters are read as PHP reads them (`filter[>ID]=5&select[]=ID`). A portal made
with `omit_moved_time=True` (or `POST /_portal {"omit_moved_time": true}`) answers deals without
MOVED_TIME, as some portals do.

Stages: a deal in the default category (0) has `NEW`, `WON`, ...; one in category 2 has
`C2:NEW`, `C2:WON`, ... (Bitrix24 prefixes the category's stages). `STAGE_SEMANTIC_ID` is `S` for
`WON`, `F` for `LOSE` and `APOLOGY`, `P` otherwise; `CLOSED` is `Y` for the final ones.

Outgoing webhooks (`configure_handler(url)`): `create_deal` emits `ONCRMDEALADD`, `move_deal` and
`edit_deal` emit `ONCRMDEALUPDATE`, as a form-encoded POST shaped like Bitrix24's
(`event=ONCRMDEALUPDATE&event_handler_id=13&data%5BFIELDS%5D%5BID%5D=7&ts=...&auth%5Bdomain%5D=...`);
the deal's fields are not in it, the handler reads them with `crm.deal.get`. Each emission is
synchronous and returns the pipeline's answer as a `Delivery`; `resend_last()` posts the last
body again, byte for byte, as a retried delivery. `burst_moves` makes several moves within one
second, then posts one ONCRMDEALUPDATE per move (or one, `collapse`). Webhook faults (lost,
delayed): `local.fakes.webhook_faults`, `/_webhook_faults`.

Faults (`POST /_faults`, see `local.fakes.base`) apply to the REST calls only, answered with
Bitrix24's errors: 5xx `INTERNAL_SERVER_ERROR`, `rate_limit_next` and 503 `QUERY_LIMIT_EXCEEDED`
(503, no Retry-After), 429 `OPERATION_TIME_LIMIT`, 401 `INVALID_CREDENTIALS`. Control endpoints
for the portal (JSON bodies; a body it cannot follow is 400 with the reason; `created_at`, `at`:
unix seconds, `age_seconds`: that long ago, to date a change in the past, not in the future):

    POST /_contacts {"name", "phone", "last_name"?}            -> {"contact_id"}
    POST /_deals {"title", "stage_id"?, "category_id"?, "contact": {"name", "phone"}? | "contact_id"?,
                  "created_at"? | "age_seconds"?}             -> {"deal_id", "contact_id", "delivery"}
    POST /_deals/<id>/move {"stage_id", "at"? | "age_seconds"?} -> {"deal", "delivery"}
         (a move dated in the past dates its history record, MOVED_TIME and the webhook's `ts`;
         not before the deal's last stage change)
    POST /_deals/<id>/burst {"stage_ids": [...], "collapse"?} -> {"deal", "deliveries"}
    POST /_deals/<id>/edit {"TITLE": ..., "OPPORTUNITY": ...} -> {"deal", "delivery"}
    POST /_deals/<id>/resend                                  -> {"delivery"}
    GET  /_deals/<id>                                         -> the deal as crm.deal.get has it
    POST /_webhook/revoke, POST /_webhook/restore; GET /_portal (the REST URL, the handler, the
    options), POST /_portal {"omit_moved_time": true|false}
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from local.fakes import crm_access
from local.fakes.base import FakeRequest, FakeResponse
from local.fakes.bitrix24_model import (
    PORTAL_REFUSALS,
    RestError,
    copy_contact,
    deal_stages,
    field_strings,
    full_stage_id,
    injected_error,
    invalid_credentials,
    list_page,
    nested_param,
    new_contact,
    new_deal,
    portal_time,
    rest_error,
    rest_id,
    rest_params,
    rest_timing,
    stage_semantic,
)
from local.fakes.crm_history import StageHistory, change_time, not_after
from local.fakes.emitting import (
    ControlInputError,
    EmittingFake,
    WebhookDelivery,
    check_contact,
    control_contact,
    json_object,
    php_form,
    text_field,
)

DEFAULT_WEBHOOK_CODE = "localbitrixcode"
DEFAULT_DOMAIN = "local.bitrix24.test"
DEFAULT_APPLICATION_TOKEN = "localBitrixAppToken0123456789"  # noqa: S105 - a fake's token
SERVER_ENDPOINT = "https://oauth.bitrix.info/rest/"
USER_AGENT = "Bitrix24 Webhook Engine"
EVENT_ADD = "ONCRMDEALADD"
EVENT_UPDATE = "ONCRMDEALUPDATE"
# One outgoing-webhook binding per event, each with its own handler id, as event.bind makes them.
EVENT_HANDLER_IDS = {EVENT_ADD: 11, EVENT_UPDATE: 13}
# The fields move_deal owns, or the portal sets itself: edit_deal refuses them.
SYSTEM_FIELDS = frozenset(
    {
        "ID",
        "STAGE_ID",
        "CATEGORY_ID",
        "STAGE_SEMANTIC_ID",
        "CLOSED",
        "IS_NEW",
        "MOVED_BY_ID",
        "MOVED_TIME",
        "DATE_CREATE",
        "DATE_MODIFY",
        "CREATED_BY_ID",
        "MODIFY_BY_ID",
    }
)
_REST_PATH = re.compile(
    r"^/rest/(?P<user>\d+)/(?P<code>[^/]+)/(?P<method>[A-Za-z0-9_.]+?)(?:\.(?:json|xml))?$"
)
_DEAL_ROUTE = re.compile(r"^/_deals/(?P<id>\d+)(?:/(?P<action>move|edit|resend|burst))?$")


@dataclass(frozen=True)
class Delivery(WebhookDelivery):
    """The pipeline's answer to one ONCRMDEALADD / ONCRMDEALUPDATE about `deal_id`."""

    deal_id: int


class Bitrix24PortalFake(EmittingFake):
    name: ClassVar[str] = "bitrix24"
    credential: ClassVar[str] = "webhook"
    webhooks: ClassVar[str] = "outgoing webhooks"

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        user_id: int = 1,
        webhook_code: str = DEFAULT_WEBHOOK_CODE,
        domain: str = DEFAULT_DOMAIN,
        application_token: str = DEFAULT_APPLICATION_TOKEN,
        handler_url: str | None = None,
        clock: Callable[[], float] = time.time,
        omit_moved_time: bool = False,
    ) -> None:
        super().__init__(host, port, handler_url=handler_url, clock=clock)
        self.user_id = user_id
        # As some portals do: crm.deal.get (and crm.deal.list, deal()) without MOVED_TIME.
        self.omit_moved_time = omit_moved_time
        self.stage_history = StageHistory()
        self.access = crm_access.ReadAccess()  # what the inbound webhook's user may not read
        self.webhook_code = webhook_code
        self.domain = domain
        self.application_token = application_token
        self.member_id = hashlib.sha256(domain.encode()).hexdigest()[:32]
        self._contacts: dict[int, dict[str, Any]] = {}
        self._deals: dict[int, dict[str, Any]] = {}
        self._contact_ids = itertools.count(1)
        self._deal_ids = itertools.count(1)
        self._multifield_ids = itertools.count(1)
        # The last emitted (event, deal id, form body): overall and per deal, for resend_last.
        self._last_sent: tuple[str, int, str] | None = None
        self._last_sent_by_deal: dict[int, tuple[str, int, str]] = {}

    # -- configuration -----------------------------------------------------------------------------
    def configure_handler(self, url: str, application_token: str | None = None) -> None:
        """Where the outgoing webhooks go (the pipeline's URL, known once it has started)."""
        with self._state_lock:
            self.handler_url = url
            if application_token is not None:
                self.application_token = application_token

    def rest_url(self) -> str:
        """The inbound webhook's base URL: the consumer appends the method (`crm.deal.get`)."""
        return f"{self.url}/rest/{self.user_id}/{self.webhook_code}/"

    def revoke_webhook(self) -> None:
        """Every REST call is refused with 401 INVALID_CREDENTIALS, as after deleting the webhook."""
        self._set_revoked(True)

    def restore_webhook(self) -> None:
        self._set_revoked(False)

    @property
    def webhook_revoked(self) -> bool:
        return self._revoked

    def account_refusals(self) -> Mapping[str, Callable[[], FakeResponse]]:
        return PORTAL_REFUSALS

    def rotate_credential(self, value: str) -> None:
        """A new inbound webhook code: the old URL is refused (401) from now on."""
        self.webhook_code = value

    # -- the portal ----------------------------------------------------------------------------------
    def create_contact(self, name: str, phone: str | None, last_name: str | None = None) -> int:
        check_contact(name, phone)
        now = self._clock.tick()
        with self._state_lock:
            contact_id = next(self._contact_ids)
            contact = new_contact(
                contact_id,
                name,
                phone,
                last_name,
                now,
                user_id=self.user_id,
                phone_entry_id=next(self._multifield_ids) if phone else 0,
            )
            self._contacts[contact_id] = contact
        return contact_id

    def set_contact_phone(self, contact_id: int, phone: str) -> None:
        """A manager corrects the contact's mobile number (no deal event: the handler is bound to
        deal events; the deal's next event reads the new number)."""
        check_contact("-", phone)
        with self._state_lock:
            contact = self._contacts[contact_id]
            entries = contact.setdefault("PHONE", [])
            if not entries:
                entries.append({"ID": str(next(self._multifield_ids)), "VALUE_TYPE": "MOBILE"})
            entries[0].update(VALUE=phone, TYPE_ID="PHONE")
            contact.update(HAS_PHONE="Y", DATE_MODIFY=portal_time(self._clock.now()))

    def create_deal(
        self,
        title: str,
        stage_id: str = "NEW",
        category_id: int = 0,
        contact_id: int | None = None,
        emit: bool = True,
        created_at: int | None = None,
    ) -> Delivery:
        """A new deal; with `emit`, ONCRMDEALADD goes to the handler (else the Delivery says so).

        `created_at` (unix seconds, not in the future) dates it and its history record in the past.
        """
        if not isinstance(title, str) or not title.strip():
            raise ValueError("a deal needs a title")
        if isinstance(category_id, bool) or not isinstance(category_id, int) or category_id < 0:
            raise ValueError("category_id must be an integer >= 0")
        stage = full_stage_id(stage_id, category_id)
        if emit:
            self._handler()
        now = self._clock.tick()
        at = not_after(created_at, now, "created_at")
        with self._state_lock:
            if contact_id is not None and contact_id not in self._contacts:
                raise ValueError(f"no contact {contact_id}")
            deal_id = next(self._deal_ids)
            self._deals[deal_id] = new_deal(
                deal_id, title, stage, category_id, contact_id, at, user_id=self.user_id
            )
            self.stage_history.created(deal_id, at, category_id, stage)
            if not emit:
                return Delivery(None, None, "not emitted (emit=False)", EVENT_ADD, deal_id)
            payload = self._record_payload(EVENT_ADD, deal_id, at)
        return self._deliver(EVENT_ADD, deal_id, payload)

    def move_deal(self, deal_id: int, stage_id: str, at: int | None = None) -> Delivery:
        """The deal moves to another stage of its category (`WON` or `C2:WON`): ONCRMDEALUPDATE.

        A move to the stage it is in is a re-save: DATE_MODIFY changes, MOVED_TIME does not, and
        the stage history has no new record. `at` (unix seconds) dates the move in the past: its
        history record, MOVED_TIME and the webhook's `ts`; not before the deal's last stage change.
        """
        handler_checked = self._handler()
        now = self._clock.tick()
        with self._state_lock:
            deal = self._existing_deal(deal_id)
            stage = full_stage_id(stage_id, int(deal["CATEGORY_ID"]))
            when = self._move_time(deal_id, at, now)
            if stage != deal["STAGE_ID"]:
                self._apply_move(deal, stage, when)
            self._touch(deal, when)
            payload = self._record_payload(EVENT_UPDATE, deal_id, when)
        return self._deliver(EVENT_UPDATE, deal_id, payload, handler_checked)

    def burst_moves(self, deal_id: int, stage_ids: Sequence[str], collapse: bool = False) -> list[Delivery]:
        """Several moves of one deal within the same second, each in the stage history.

        Each move emits its own ONCRMDEALUPDATE (byte-identical: same deal, same `ts`), posted
        once all the moves are made, so a handler reading the deal sees the last stage each time;
        with `collapse`, one ONCRMDEALUPDATE after the last move, as a portal that coalesces events.
        """
        if isinstance(stage_ids, str) or len(stage_ids) < 2:
            raise ValueError('a burst needs at least two stage ids, e.g. ["PREPARATION", "WON"]')
        handler_checked = self._handler()
        now = self._clock.tick()
        with self._state_lock:
            deal = self._existing_deal(deal_id)
            category = int(deal["CATEGORY_ID"])
            stages = [full_stage_id(str(stage_id), category) for stage_id in stage_ids]
            for before, stage in zip([deal["STAGE_ID"], *stages], stages, strict=False):
                if stage == before:
                    raise ValueError(f"a burst moves the deal each time: {stage} follows {stage}")
            for stage in stages:
                self._apply_move(deal, stage, now)
            self._touch(deal, now)
            payload = self._record_payload(EVENT_UPDATE, deal_id, now)
        return [
            self._deliver(EVENT_UPDATE, deal_id, payload, handler_checked)
            for _ in range(1 if collapse else len(stages))
        ]

    def edit_deal(self, deal_id: int, **fields: str) -> Delivery:
        """Other fields change (TITLE, OPPORTUNITY, COMMENTS, UF_CRM_...): ONCRMDEALUPDATE.

        Only DATE_MODIFY moves; the stage and MOVED_TIME stay as they were.
        """
        if not fields:
            raise ValueError("edit_deal needs at least one field")
        refused = sorted(set(fields) & SYSTEM_FIELDS)
        if refused:
            raise ValueError(f"{', '.join(refused)} cannot be edited (the stage changes with move_deal)")
        for key, value in fields.items():
            if not re.fullmatch(r"[A-Z][A-Z0-9_]*", key):
                raise ValueError(f"{key!r} is not a Bitrix24 field name (upper case, like TITLE)")
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{key} must be a string, as Bitrix24 has it")
        handler_checked = self._handler()
        now = self._clock.tick()
        with self._state_lock:
            deal = self._existing_deal(deal_id)
            deal.update(fields)
            self._touch(deal, now)
            payload = self._record_payload(EVENT_UPDATE, deal_id, now)
        return self._deliver(EVENT_UPDATE, deal_id, payload, handler_checked)

    def resend_last(self, deal_id: int | None = None) -> Delivery:
        """The last emitted body (for `deal_id`, or any) posted again, byte for byte."""
        handler_checked = self._handler()
        with self._state_lock:
            last = self._last_sent if deal_id is None else self._last_sent_by_deal.get(deal_id)
        if last is None:
            raise LookupError(
                "nothing emitted yet" if deal_id is None else f"nothing emitted for deal {deal_id}"
            )
        event, sent_deal_id, payload = last
        return self._deliver(event, sent_deal_id, payload, handler_checked)

    def deal(self, deal_id: int) -> dict[str, Any]:
        """The deal as crm.deal.get returns it (a copy); KeyError if there is none."""
        with self._state_lock:
            return self._deal_view(self._existing_deal(deal_id))

    def contact(self, contact_id: int) -> dict[str, Any]:
        with self._state_lock:
            if contact_id not in self._contacts:
                raise KeyError(f"no contact {contact_id}")
            return copy_contact(self._contacts[contact_id])

    # -- records (under the portal lock) ----------------------------------------------------------------
    def _touch(self, deal: dict[str, Any], now: int) -> None:
        # A backdated change leaves a later DATE_MODIFY as it is (same zone: strings compare as times).
        deal["DATE_MODIFY"] = max(deal["DATE_MODIFY"], portal_time(now))
        deal["MODIFY_BY_ID"] = str(self.user_id)

    def _apply_move(self, deal: dict[str, Any], stage: str, when: int) -> None:
        semantic = stage_semantic(stage)
        deal.update(
            STAGE_ID=stage,
            STAGE_SEMANTIC_ID=semantic,
            CLOSED="N" if semantic == "P" else "Y",
            IS_NEW="Y" if stage.endswith("NEW") else "N",
            MOVED_BY_ID=str(self.user_id),
            MOVED_TIME=portal_time(when),
        )
        self.stage_history.moved(int(deal["ID"]), when, int(deal["CATEGORY_ID"]), stage)

    def _move_time(self, deal_id: int, at: int | None, now: int) -> int:
        when = not_after(at, now, "at")
        last = self.stage_history.last_time(deal_id)
        if at is not None and last is not None and when < last:
            raise ValueError(f"at ({when}) is before the deal's last stage change ({last})")
        return when

    def _deal_view(self, deal: dict[str, Any]) -> dict[str, Any]:
        """The deal as crm.deal.get answers it (a copy), without MOVED_TIME on such a portal."""
        view = dict(deal)
        if self.omit_moved_time:
            view.pop("MOVED_TIME", None)
        return view

    def _existing_deal(self, deal_id: int) -> dict[str, Any]:
        """Under the portal lock."""
        deal = self._deals.get(deal_id)
        if deal is None:
            raise KeyError(f"no deal {deal_id}")
        return deal

    # -- emission --------------------------------------------------------------------------------------
    def _record_payload(self, event: str, deal_id: int, ts: int) -> str:
        """Under the portal lock: the form body Bitrix24's outgoing webhook posts for a deal event,
        remembered for resend_last."""
        payload = php_form(
            [
                ("event", event),
                ("event_handler_id", EVENT_HANDLER_IDS[event]),
                ("data[FIELDS][ID]", deal_id),
                ("ts", ts),
                ("auth[domain]", self.domain),
                ("auth[client_endpoint]", f"https://{self.domain}/rest/"),
                ("auth[server_endpoint]", SERVER_ENDPOINT),
                ("auth[member_id]", self.member_id),
                ("auth[application_token]", self.application_token),
            ]
        )
        self._last_sent = self._last_sent_by_deal[deal_id] = (event, deal_id, payload)
        return payload

    def _deliver(self, event: str, deal_id: int, payload: str, url: str | None = None) -> Delivery:
        """Outside the portal lock: the handler may call crm.deal.get while it answers."""
        build = functools.partial(Delivery, event=event, deal_id=deal_id, payload=payload)
        return self._send(url or self._handler(), payload, {"User-Agent": USER_AGENT}, build)

    # -- REST --------------------------------------------------------------------------------------------
    def redact_path(self, path: str) -> str:
        return _REST_PATH.sub(lambda m: f"/rest/{m['user']}/<code>/{m['method']}", path)

    def error_response(self, status: int, retry_after: int | None = None) -> FakeResponse:
        return injected_error(status, retry_after)

    def answer(self, request: FakeRequest) -> FakeResponse:
        started = time.time()
        match = _REST_PATH.match(request.path)
        if match is None:
            if request.path.startswith("/rest/"):
                return rest_error(401, "NO_AUTH_FOUND", "Wrong authorization data")
            return FakeResponse(404, {"error": "not found"})
        if request.method not in ("GET", "POST"):
            return FakeResponse(405, {"error": "method not allowed"})
        if self._revoked or match["user"] != str(self.user_id) or match["code"] != self.webhook_code:
            return invalid_credentials()
        if (refused := self.account.refusal()) is not None:
            return refused
        method = match["method"].lower()
        handler = self._methods().get(method)
        if handler is None:
            return rest_error(404, "ERROR_METHOD_NOT_FOUND", "Method not found!")
        try:
            result, extra = handler(rest_params(request))
        except RestError as error:
            return rest_error(400, error.code, str(error))
        return FakeResponse(
            200,
            {"result": result, **extra, "time": rest_timing(started)},
            {"Content-Type": "application/json; charset=utf-8"},
        )

    def _methods(self) -> dict[str, Callable[[dict[str, Any]], tuple[Any, dict[str, Any]]]]:
        return {
            "crm.deal.get": self._rest_deal_get,
            "crm.contact.get": self._rest_contact_get,
            "crm.deal.list": self._rest_deal_list,
            "crm.status.list": self._rest_status_list,
            "crm.stagehistory.list": self._rest_stage_history,
        }

    def _rest_deal_get(self, params: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        with self._state_lock:
            if not self._readable(rest_id(params)):
                raise RestError("Access denied")
        return self._rest_get(self._deals, params, self._deal_view)

    def _readable(self, deal_id: int) -> bool:
        """Under the portal lock: whether the webhook's user may read the deal (a missing one: yes)."""
        deal = self._deals.get(deal_id)
        return deal is None or self.access.may_read(deal_id, int(deal["CATEGORY_ID"]))

    def _rest_contact_get(self, params: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        return self._rest_get(self._contacts, params, copy_contact)

    def _rest_get(
        self,
        records: Mapping[int, dict[str, Any]],
        params: dict[str, Any],
        copy: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> tuple[Any, dict[str, Any]]:
        """`crm.<entity>.get`: a copy of the record `id` names, or 400 "Not found"."""
        record_id = rest_id(params)
        with self._state_lock:
            record = records.get(record_id)
            if record is None:
                raise RestError("Not found")
            return copy(record), {}

    def _rest_deal_list(self, params: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        conditions = {key.lstrip("="): str(value) for key, value in nested_param(params, "filter").items()}
        with self._state_lock:
            deals = [
                self._deal_view(deal)
                for deal_id, deal in sorted(self._deals.items())
                if self._readable(deal_id)
                and all(str(deal.get(field)) == value for field, value in conditions.items())
            ]
        return list_page(deals, params)

    def _rest_stage_history(self, params: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        with self._state_lock:
            return self.stage_history.query(params, self._readable)

    def _rest_status_list(self, params: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        items = deal_stages(nested_param(params, "filter").get("ENTITY_ID", "DEAL_STAGE"))
        return items, {"total": len(items)}

    # -- control endpoints ---------------------------------------------------------------------------------
    def _control(self, request: FakeRequest) -> FakeResponse | None:
        route = (request.method, request.path)
        if route == ("GET", "/_portal"):
            return FakeResponse(200, self._portal_state())
        if route == ("POST", "/_portal"):
            return self._control_options(json_object(request))
        if (answer := crm_access.control(self, request)) is not None:
            return answer
        if route == ("POST", "/_contacts"):
            document = json_object(request)
            contact_id = self._contact_from(document)
            return FakeResponse(201, {"contact_id": contact_id})
        if route == ("POST", "/_deals"):
            return self._control_create_deal(json_object(request))
        match = _DEAL_ROUTE.match(request.path)
        if match is None:
            return None
        deal_id, action = int(match["id"]), match["action"]
        if action is None and request.method == "GET":
            return FakeResponse(200, self.deal(deal_id))
        if action is None or request.method != "POST":
            return None
        self.deal(deal_id)  # 404 before anything else for a deal that does not exist
        if action == "resend":
            return FakeResponse(200, {"delivery": self.resend_last(deal_id).as_dict()})
        document = json_object(request)
        if action == "burst":
            return self._control_burst(deal_id, document)
        if action == "move":
            stage_id = text_field(document, "stage_id")
            unknown = set(document) - {"stage_id", "at", "age_seconds"}
            if unknown:
                raise ControlInputError(
                    f"unknown keys {sorted(unknown)}; a move takes stage_id, and at or age_seconds"
                )
            at = change_time(document, self._clock.now())
            delivery = self.move_deal(deal_id, str(stage_id), at)
        else:
            if not document:
                raise ControlInputError('expected the fields to change, e.g. {"TITLE": "Order 42"}')
            delivery = self.edit_deal(deal_id, **field_strings(document))
        return FakeResponse(200, {"deal": self.deal(deal_id), "delivery": delivery.as_dict()})

    def _control_create_deal(self, document: dict[str, Any]) -> FakeResponse:
        known = ["title", "stage_id", "category_id", "contact", "contact_id", "created_at", "age_seconds"]
        unknown = set(document) - set(known)
        if unknown:
            raise ControlInputError(f"unknown keys {sorted(unknown)}; known: {', '.join(known)}")
        created_at = change_time(document, self._clock.now(), names=("created_at",))
        title = str(text_field(document, "title"))
        stage_id = text_field(document, "stage_id", required=False) or "NEW"
        category = document.get("category_id", 0)
        if isinstance(category, bool) or not isinstance(category, int) or category < 0:
            raise ControlInputError("category_id must be an integer >= 0")
        full_stage_id(stage_id, category)  # a bad stage is refused before anything is created
        if "contact" in document and "contact_id" in document:
            raise ControlInputError("give either contact or contact_id, not both")
        self._handler()
        contact_id = control_contact(document, self.contact, self._contact_from)
        delivery = self.create_deal(title, stage_id, category, contact_id, created_at=created_at)
        return FakeResponse(
            201, {"deal_id": delivery.deal_id, "contact_id": contact_id, "delivery": delivery.as_dict()}
        )

    def _control_burst(self, deal_id: int, document: dict[str, Any]) -> FakeResponse:
        unknown = set(document) - {"stage_ids", "collapse"}
        if unknown:
            raise ControlInputError(f"unknown keys {sorted(unknown)}; a burst takes stage_ids, collapse")
        stage_ids, collapse = document.get("stage_ids"), document.get("collapse", False)
        if not isinstance(stage_ids, list) or not all(isinstance(stage, str) for stage in stage_ids):
            raise ControlInputError('stage_ids must be a list of stage ids, e.g. ["PREPARATION", "WON"]')
        if not isinstance(collapse, bool):
            raise ControlInputError("collapse must be true or false")
        deliveries = self.burst_moves(deal_id, stage_ids, collapse)
        return FakeResponse(
            200, {"deal": self.deal(deal_id), "deliveries": [delivery.as_dict() for delivery in deliveries]}
        )

    def _control_options(self, document: dict[str, Any]) -> FakeResponse:
        unknown = set(document) - {"omit_moved_time"}
        if unknown or not document:
            raise ControlInputError(f"unknown keys {sorted(unknown)}; the portal's options: omit_moved_time")
        if not isinstance(document["omit_moved_time"], bool):
            raise ControlInputError("omit_moved_time must be true or false")
        with self._state_lock:
            self.omit_moved_time = document["omit_moved_time"]
        return FakeResponse(200, self._portal_state())

    def _contact_from(self, document: Mapping[str, Any]) -> int:
        unknown = set(document) - {"name", "phone", "last_name"}
        if unknown:
            raise ControlInputError(f"unknown keys {sorted(unknown)}; a contact has name, phone, last_name")
        return self.create_contact(
            str(text_field(document, "name")),
            text_field(document, "phone", required=False),
            text_field(document, "last_name", required=False),
        )

    def _portal_state(self) -> dict[str, Any]:
        with self._state_lock:
            deals, contacts = len(self._deals), len(self._contacts)
        return {
            "rest_url": self.rest_url(),
            "domain": self.domain,
            "handler_url": self.handler_url,
            "webhook_revoked": self.webhook_revoked,
            "omit_moved_time": self.omit_moved_time,
            "deals": deals,
            "contacts": contacts,
        }
