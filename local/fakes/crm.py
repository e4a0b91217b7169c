"""A stand-in for the CRM the `crm` consumer creates leads in.

Two dialects, matching the `crm_api` secret's `kind`:

- generic JSON webhook: `POST /leads` with `Authorization: <auth_header>` and a JSON object;
  answers 201 `{"id": "lead-<n>"}`. A repeated `Idempotency-Key` gets the first lead back (200).
  `PATCH /leads/<id>` with a JSON object sets those fields on the lead (200 `{"id": ...}`; 404
  for an unknown lead); a repeated `Idempotency-Key` is answered without applying it again.
- Bitrix24 inbound webhook: `POST /rest/<user>/<code>/crm.lead.add.json` with `{"fields": {...}}`
  (JSON or form-encoded `fields[TITLE]=...`); answers `{"result": <id>, "time": {...}}`.
  `crm.lead.get` `{"id"}` answers the lead (PHONE values with their ID); `crm.lead.update`
  `{"id", "fields"}` adds each PHONE value sent without an ID, as Bitrix24 does. The webhook
  code in the path is the credential and is masked in `/_calls`.

`GET /_leads` shows every lead as it stands now, by id (what a manager would see in the CRM).
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from datetime import UTC, datetime
from typing import Any, ClassVar

from local.fakes.base import FakeRequest, FakeResponse, FakeService, status_phrase

DEFAULT_AUTH_HEADER = "Bearer local"
LEADS_PATH = "/leads"
_BITRIX_PATH = re.compile(
    r"^/rest/(?P<user>\d+)/(?P<code>[^/]+)/(?P<method>crm\.lead\.(?:add|get|update))(?:\.json)?$"
)
_LEAD_PATH = re.compile(rf"^{LEADS_PATH}/(?P<id>[^/]+)$")
_BITRIX_FORM_FIELD = re.compile(r"^fields\[(?P<name>[^\]]+)\]$")


class CrmFake(FakeService):
    name: ClassVar[str] = "crm"

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, auth_header: str = DEFAULT_AUTH_HEADER
    ) -> None:
        super().__init__(host, port)
        self.auth_header = auth_header
        self._lead_ids = itertools.count(1)
        self._by_idempotency_key: dict[str, str] = {}
        self._leads_lock = threading.Lock()
        # Each lead as it stands now: the generic webhook's by "lead-<n>", Bitrix24's by "<n>".
        self._leads: dict[str, dict[str, Any]] = {}

    def leads_url(self) -> str:
        return f"{self.url}{LEADS_PATH}"

    def bitrix_webhook_url(self, user: int = 1, code: str = "localwebhookcode") -> str:
        """The base URL a Bitrix24 inbound webhook would have (the consumer appends the method)."""
        return f"{self.url}/rest/{user}/{code}/"

    def redact_path(self, path: str) -> str:
        return _BITRIX_PATH.sub(lambda m: f"/rest/{m['user']}/<code>/{m['method']}.json", path)

    def error_response(self, status: int, retry_after: int | None = None) -> FakeResponse:
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
        body: dict[str, Any] = {"error": "rate_limited" if status == 429 else status_phrase(status)}
        if retry_after is not None:
            body["retry_after"] = retry_after
        return FakeResponse(status, body, headers)

    def leads(self) -> dict[str, dict[str, Any]]:
        with self._leads_lock:
            return {lead_id: dict(lead) for lead_id, lead in self._leads.items()}

    def control(self, request: FakeRequest) -> FakeResponse:
        if (request.method, request.path) == ("GET", "/_leads"):
            return FakeResponse(200, self.leads())
        return super().control(request)

    def answer(self, request: FakeRequest) -> FakeResponse:
        if request.path == LEADS_PATH:
            if request.method != "POST":
                return FakeResponse(405, {"error": "method not allowed"})
            return self._generic_lead(request)
        if (lead_path := _LEAD_PATH.match(request.path)) is not None:
            if request.method != "PATCH":
                return FakeResponse(405, {"error": "method not allowed"})
            return self._generic_update(request, lead_path["id"])
        if (bitrix := _BITRIX_PATH.match(request.path)) is not None:
            if bitrix["method"] == "crm.lead.add":
                return self._bitrix_lead(request)
            return self._bitrix_lead_call(bitrix["method"], request)
        return FakeResponse(404, {"error": "not found"})

    def _generic_lead(self, request: FakeRequest) -> FakeResponse:
        if request.headers.get("authorization") != self.auth_header:
            return FakeResponse(401, {"error": "unauthorized"})
        lead = request.json()
        if not isinstance(lead, dict) or not lead:
            return FakeResponse(400, {"error": "expected a JSON object describing the lead"})
        key = request.headers.get("idempotency-key")
        with self._leads_lock:
            if key and key in self._by_idempotency_key:
                return FakeResponse(200, {"id": self._by_idempotency_key[key], "duplicate": True})
            lead_id = f"lead-{next(self._lead_ids)}"
            if key:
                self._by_idempotency_key[key] = lead_id
            self._leads[lead_id] = dict(lead)
        return FakeResponse(201, {"id": lead_id})

    def _generic_update(self, request: FakeRequest, lead_id: str) -> FakeResponse:
        if request.headers.get("authorization") != self.auth_header:
            return FakeResponse(401, {"error": "unauthorized"})
        fields = request.json()
        if not isinstance(fields, dict) or not fields:
            return FakeResponse(400, {"error": "expected a JSON object of the fields to change"})
        key = request.headers.get("idempotency-key")
        with self._leads_lock:
            if lead_id not in self._leads:
                return FakeResponse(404, {"error": "no such lead"})
            if key and key in self._by_idempotency_key:
                return FakeResponse(200, {"id": lead_id, "duplicate": True})
            if key:
                self._by_idempotency_key[key] = lead_id
            self._leads[lead_id].update(fields)
        return FakeResponse(200, {"id": lead_id})

    def _bitrix_lead(self, request: FakeRequest) -> FakeResponse:
        started = time.time()
        fields = self._bitrix_fields(request)
        if not fields:
            return FakeResponse(
                400, {"error": "ERROR_CORE", "error_description": "Parameter 'fields' must be array."}
            )
        finished = time.time()
        timing = {
            "start": started,
            "finish": finished,
            "duration": finished - started,
            "processing": finished - started,
            "date_start": datetime.fromtimestamp(started, UTC).isoformat(),
            "date_finish": datetime.fromtimestamp(finished, UTC).isoformat(),
        }
        with self._leads_lock:
            lead_id = next(self._lead_ids)
            self._leads[str(lead_id)] = {**fields, "ID": str(lead_id), "PHONE": self._numbered(fields, [])}
        return FakeResponse(200, {"result": lead_id, "time": timing})

    def _numbered(self, fields: dict[str, Any], phones: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`phones` with each PHONE value of `fields` sent without an ID added, numbered as Bitrix24 does."""
        added = [
            entry for entry in fields.get("PHONE") or [] if isinstance(entry, dict) and "ID" not in entry
        ]
        start = len(phones) + 1
        return [
            *phones,
            *({**entry, "ID": str(start + n), "TYPE_ID": "PHONE"} for n, entry in enumerate(added)),
        ]

    def _bitrix_lead_call(self, method: str, request: FakeRequest) -> FakeResponse:
        """`crm.lead.get` and `crm.lead.update` of a lead this stand-in created."""
        document = request.json()
        lead_id = str(document.get("id")) if isinstance(document, dict) else ""
        with self._leads_lock:
            lead = self._leads.get(lead_id)
            if lead is None:
                return FakeResponse(400, {"error": "", "error_description": "Not found"})
            if method == "crm.lead.get":
                return FakeResponse(200, {"result": dict(lead)})
            fields = document.get("fields") if isinstance(document, dict) else None
            if not isinstance(fields, dict) or not fields:
                return FakeResponse(
                    400, {"error": "ERROR_CORE", "error_description": "Parameter 'fields' must be array."}
                )
            lead.update({name: value for name, value in fields.items() if name != "PHONE"})
            lead["PHONE"] = self._numbered(fields, lead["PHONE"])
        return FakeResponse(200, {"result": True})

    @staticmethod
    def _bitrix_fields(request: FakeRequest) -> dict[str, Any]:
        document = request.json()
        if isinstance(document, dict):
            fields = document.get("fields")
            return fields if isinstance(fields, dict) else {}
        params = request.params()
        return {
            match["name"]: value
            for key, value in params.items()
            if (match := _BITRIX_FORM_FIELD.match(key)) is not None
        }
