"""A stand-in for a generic HTTP SMS gateway, with the contract of `pipeline.sms.gateways.HttpGateway`:

- `POST /messages` `{"to", "text", "client_reference"}` with `Authorization: Bearer <token>`
  -> 201 `{"message_id", "status": "accepted"}`; a client reference seen before -> 409 with the
  first message's id (the gateway deduplicates, as the contract says);
- `GET /messages?client_reference=<key>` -> 200 `{"message_id", "status"}` or 404.

The account refused (`local.fakes.accounts`): `POST /_account/block {"cause": "out_of_balance"}`
answers every send 402 `{"error": "insufficient_balance", ...}`, as HTTP gateways answer an empty
balance; `POST /_credential/rotate {"value"}` accepts only a new token.

Inbound messages, as gateways call back: the operator pastes the pipeline's inbound URL into the
gateway's console (`configure_inbound(url)`); `POST /_inbound {"from", "text"}` is a customer's
reply reaching the gateway (`POST /_inbound_url {"url"}` sets the URL as its console does),
which then posts `{"from", "to", "text", "message_id",
"received_at"}` (JSON) to that URL and answers with the pipeline's answer (`{"status",
"body"}`); 409 when no URL is configured. The gateway keeps no opt-out list of its own: a STOP
is the pipeline's to honour (`webhook.sms_inbound`).

`GET /_messages` lists what "reached phones" (one entry per accepted send). With
`{"drop_answer_next": 1}` a send is stored and its answer lost: the SMS worker records an
unknown outcome and the reconciler's lookup then finds the message.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
import urllib.error
import urllib.request
from typing import Any, ClassVar

from local.fakes.accounts import AccountSwitch
from local.fakes.base import FakeRequest, FakeResponse, FakeService, status_phrase

DEFAULT_TOKEN = "local-sms-gateway-token"  # noqa: S105 - a fake's token
MESSAGES_PATH = "/messages"
_E164 = re.compile(r"^\+[1-9]\d{6,14}$")
MAX_TEXT_LENGTH = 1600
# The sender id inbound messages are addressed to (the shop's number at the gateway).
SENDER_ID = "+10000000000"
CALLBACK_TIMEOUT_SECONDS = 5.0


class SmsGatewayFake(FakeService):
    name: ClassVar[str] = "sms"

    def __init__(self, host: str = "127.0.0.1", port: int = 0, token: str | None = DEFAULT_TOKEN) -> None:
        """`token=None` accepts calls without an Authorization header (a gateway without auth)."""
        super().__init__(host, port)
        self.token = token
        self._ids = itertools.count(1)
        self._messages: list[dict[str, Any]] = []
        self._by_reference: dict[str, dict[str, Any]] = {}
        self._messages_lock = threading.Lock()
        self.inbound_url: str | None = None
        self._inbound_ids = itertools.count(1)
        # The account out of money ("out_of_balance": 402 to every send), or a new token issued.
        self.account = AccountSwitch({"out_of_balance": _out_of_balance}, self._new_token)

    def _new_token(self, value: str) -> None:
        self.token = value

    def configure_inbound(self, url: str | None) -> None:
        """Where inbound messages are posted (the gateway console's callback URL)."""
        self.inbound_url = url

    def messages(self) -> list[dict[str, Any]]:
        """Every accepted message, in order (what reached phones)."""
        with self._messages_lock:
            return [dict(message) for message in self._messages]

    def control(self, request: FakeRequest) -> FakeResponse:
        if (request.method, request.path) == ("GET", "/_messages"):
            return FakeResponse(200, self.messages())
        if (request.method, request.path) == ("POST", "/_inbound"):
            return self._inbound(request.json())
        if (request.method, request.path) == ("POST", "/_inbound_url"):
            document = request.json()
            url = document.get("url") if isinstance(document, dict) else None
            if url is not None and (not isinstance(url, str) or not url.startswith(("http://", "https://"))):
                return FakeResponse(400, {"error": "url must be an http(s) URL or null"})
            self.configure_inbound(url)
            return FakeResponse(200, {"url": url})
        if (switched := self.account.control(request)) is not None:
            return switched
        return super().control(request)

    def _inbound(self, document: Any) -> FakeResponse:
        """A customer's reply: posted to the configured callback URL, as the gateway does."""
        sender = document.get("from") if isinstance(document, dict) else None
        text = document.get("text") if isinstance(document, dict) else None
        if not isinstance(sender, str) or not _E164.fullmatch(sender) or not isinstance(text, str):
            return FakeResponse(400, {"error": "expected {from: E.164, text}"})
        url = self.inbound_url
        if url is None:
            return FakeResponse(409, {"error": "no inbound URL configured"})
        message = {
            "from": sender,
            "to": SENDER_ID,
            "text": text,
            "message_id": f"in-{next(self._inbound_ids)}",
            "received_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        request = urllib.request.Request(  # noqa: S310 - the configured callback (loopback)
            url,
            data=json.dumps(message).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=CALLBACK_TIMEOUT_SECONDS) as answer:  # noqa: S310
                status, raw = answer.status, answer.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
        except (OSError, TimeoutError) as error:
            return FakeResponse(200, {"status": None, "error": type(error).__name__})
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        return FakeResponse(200, {"status": status, "body": body})

    def error_response(self, status: int, retry_after: int | None = None) -> FakeResponse:
        if status == 429:
            after = retry_after if retry_after is not None else 1
            return FakeResponse(
                429, {"error": "rate limited", "retry_after": after}, {"Retry-After": str(after)}
            )
        return FakeResponse(status, {"error": status_phrase(status)})

    def answer(self, request: FakeRequest) -> FakeResponse:
        if request.path != MESSAGES_PATH:
            return FakeResponse(404, {"error": "not found"})
        if self.token is not None and request.headers.get("authorization") != f"Bearer {self.token}":
            return FakeResponse(401, {"error": "unauthorized"})
        if request.method == "POST":
            refused = self.account.refusal()
            return refused if refused is not None else self._send(request)
        if request.method == "GET":
            return self._lookup(request.query.get("client_reference", ""))
        return FakeResponse(405, {"error": "method not allowed"})

    def _send(self, request: FakeRequest) -> FakeResponse:
        document = request.json()
        if not isinstance(document, dict):
            return FakeResponse(400, {"error": "expected a JSON object"})
        to, text, reference = document.get("to"), document.get("text"), document.get("client_reference")
        if not isinstance(to, str) or not _E164.fullmatch(to):
            return FakeResponse(400, {"error": "to must be an E.164 phone number"})
        if not isinstance(text, str) or not text or len(text) > MAX_TEXT_LENGTH:
            return FakeResponse(400, {"error": f"text must be 1..{MAX_TEXT_LENGTH} characters"})
        if not isinstance(reference, str) or not reference:
            return FakeResponse(400, {"error": "client_reference is required"})
        with self._messages_lock:
            existing = self._by_reference.get(reference)
            if existing is not None:
                return FakeResponse(
                    409, {"error": "client_reference already used", "message_id": existing["message_id"]}
                )
            message = {
                "message_id": f"sms-{next(self._ids)}",
                "to": to,
                "text": text,
                "client_reference": reference,
                "status": "delivered",
                "accepted_at": time.time(),
            }
            self._messages.append(message)
            self._by_reference[reference] = message
        return FakeResponse(201, {"message_id": message["message_id"], "status": "accepted"})

    def _lookup(self, reference: str) -> FakeResponse:
        with self._messages_lock:
            message = self._by_reference.get(reference)
        if message is None:
            return FakeResponse(404, {"error": "no message with this client_reference"})
        return FakeResponse(200, {"message_id": message["message_id"], "status": message["status"]})


def _out_of_balance() -> FakeResponse:
    return FakeResponse(402, {"error": "insufficient_balance", "message": "Not enough balance to send"})
