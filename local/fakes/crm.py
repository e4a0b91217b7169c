"""A stand-in for the CRM the `crm` consumer creates leads in.

Two dialects, matching the `crm_api` secret's `kind`:

- generic JSON webhook: `POST /leads` with `Authorization: <auth_header>` and a JSON object;
  answers 201 `{"id": "lead-<n>"}`. A repeated `Idempotency-Key` gets the first lead back (200).
- Bitrix24 inbound webhook: `POST /rest/<user>/<code>/crm.lead.add.json` with `{"fields": {...}}`
  (JSON or form-encoded `fields[TITLE]=...`); answers `{"result": <id>, "time": {...}}`.
  The webhook code in the path is the credential and is masked in `/_calls`.
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
_BITRIX_PATH = re.compile(r"^/rest/(?P<user>\d+)/(?P<code>[^/]+)/(?P<method>crm\.lead\.add)(?:\.json)?$")
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

    def answer(self, request: FakeRequest) -> FakeResponse:
        if request.path == LEADS_PATH:
            if request.method != "POST":
                return FakeResponse(405, {"error": "method not allowed"})
            return self._generic_lead(request)
        if _BITRIX_PATH.match(request.path):
            return self._bitrix_lead(request)
        return FakeResponse(404, {"error": "not found"})

    def _next_lead_id(self) -> int:
        with self._leads_lock:
            return next(self._lead_ids)

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
        return FakeResponse(201, {"id": lead_id})

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
        return FakeResponse(200, {"result": self._next_lead_id(), "time": timing})

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
