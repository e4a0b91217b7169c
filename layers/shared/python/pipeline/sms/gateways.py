"""SMS gateways behind one interface, each saying clearly what happened to a send.

`send` either returns `Accepted` (the gateway took the message), or raises:

- `GatewayRefused`: the gateway certainly did *not* take it (throttled, quota, invalid number,
  never connected). `transient` refusals may be retried later; others never will succeed;
  `account` (a `pipeline.errors.ACCOUNT_CAUSES` cause) says the gateway refused the whole
  account (out of balance, spend limit reached, credential refused, account disabled): no
  message of ours will go until a person acts, and this one is paused, not failed;
- `GatewayOutcomeUnknown`: it may or may not have taken it (timeout after the request left, a
  dropped connection, a 5xx). The caller records `unknown` and never resends blindly.

`lookup` asks the gateway about an earlier send by client reference (the notification key) or
message id: FOUND, NOT_FOUND (proven not received), or UNKNOWN (cannot tell). It never raises.
Error details are masked (`mask_phones`): gateways like to quote the number they refused.
"""

from __future__ import annotations

import http.client
import json
import os
import threading
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

from botocore.exceptions import BotoCoreError, ClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from pipeline import aws
from pipeline.errors import UNAUTHORIZED, PermanentError, TransientError
from pipeline.http import JsonResponse, retry_after_seconds, tls_context
from pipeline.observability import mask_phones
from pipeline.registry import secret_env_var
from pipeline.sms.settings import SmsSettings

# The `Context` entry of End User Messaging that carries our key to its delivery events.
CONTEXT_KEY = "notification_key"
HTTP_SECRET = "sms_gateway"  # noqa: S105 - the registry name of the secret, not a value


@dataclass(frozen=True)
class OutgoingSms:
    key: str
    phone: str
    body: str
    # How long the gateway may still deliver it (its rule's maximum age left); None: its default.
    ttl_seconds: int | None = None


@dataclass(frozen=True)
class Accepted:
    message_id: str | None


class GatewayRefused(Exception):
    """The gateway did not take the message. Nothing was sent."""

    def __init__(
        self,
        code: str,
        detail: str = "",
        *,
        transient: bool,
        retry_after: float | None = None,
        account: str | None = None,
        opted_out: bool = False,
    ) -> None:
        self.code = code
        self.opted_out = opted_out  # the number is on the gateway's opt-out list: suppressed
        self.detail = mask_phones(detail)[:300]
        self.transient = transient
        self.retry_after = retry_after
        self.account = account
        super().__init__(f"{code}: {self.detail}" if self.detail else code)


class GatewayOutcomeUnknown(Exception):
    """The request may have been taken: it must not be repeated without asking first."""

    def __init__(self, code: str, detail: str = "") -> None:
        self.code = code
        self.detail = mask_phones(detail)[:300]
        super().__init__(f"{code}: {self.detail}" if self.detail else code)


class LookupStatus(StrEnum):
    FOUND = "found"
    NOT_FOUND = "not_found"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class LookupResult:
    status: LookupStatus
    message_id: str | None = None
    detail: str = ""


class SmsGateway(Protocol):
    name: str

    def send(self, sms: OutgoingSms) -> Accepted: ...

    def lookup(self, key: str, message_id: str | None) -> LookupResult: ...


# -- AWS End User Messaging SMS -----------------------------------------------------------------
class EndUserMessagingGateway:
    """`pinpoint-sms-voice-v2` `SendTextMessage`, with the notification key in `Context`.

    SendTextMessage has no idempotency token (no `ClientToken`, unlike the API's Create* calls):
    a repeated request is a second SMS. So the client never retries by itself
    (`aws.non_retrying_client`), and anything after the request may have left is `unknown`.
    The API cannot look a message up either: `lookup` answers UNKNOWN, and unknowns are closed
    by the delivery events the configuration set's event destination publishes (they carry
    `Context`, hence the key; see `pipeline.sms.delivery`) or by a person.
    """

    name = "end_user_messaging"
    SERVICE = "pinpoint-sms-voice-v2"
    # Refusals that say "not now": the request was rejected before anything was queued.
    TRANSIENT_REFUSALS = frozenset({"ThrottlingException", "ServiceQuotaExceededException"})
    # Refusals that will not change by retrying (bad number, opted out, wrong identity, IAM).
    PERMANENT_REFUSALS = frozenset(
        {"ValidationException", "AccessDeniedException", "ResourceNotFoundException", "ConflictException"}
    )
    # The ConflictException `Reason` of a number on the account's opt-out list (a STOP reply).
    OPTED_OUT = "DESTINATION_PHONE_NUMBER_OPTED_OUT"
    # Refusals of the whole account (error code, its `Reason`; None: any or none), per the API's
    # SendTextMessage errors: the month's spend limit reached (the account's money for SMS, raised
    # by a person), the account disabled or held for its reputation, or the role denied the call.
    ACCOUNT_REFUSALS: dict[tuple[str, str | None], str] = {
        ("ServiceQuotaExceededException", "MONTHLY_SPEND_LIMIT_REACHED_FOR_TEXT"): "out_of_balance",
        ("AccessDeniedException", "ACCOUNT_DISABLED"): "blocked",
        ("AccessDeniedException", "INSUFFICIENT_ACCOUNT_REPUTATION"): "blocked",
        ("AccessDeniedException", None): UNAUTHORIZED,
    }

    def __init__(
        self,
        *,
        origination_identity: str | None = None,
        configuration_set: str | None = None,
        message_type: str = "TRANSACTIONAL",
        max_price: str | None = None,
    ) -> None:
        self.origination_identity = origination_identity
        self.configuration_set = configuration_set
        self.message_type = message_type
        self.max_price = max_price

    @property
    def client(self) -> Any:
        return aws.non_retrying_client(self.SERVICE)

    def request(self, sms: OutgoingSms) -> dict[str, Any]:
        params: dict[str, Any] = {
            "DestinationPhoneNumber": sms.phone,
            "MessageBody": sms.body,
            "MessageType": self.message_type,
            "Context": {CONTEXT_KEY: sms.key},
        }
        if self.origination_identity:
            params["OriginationIdentity"] = self.origination_identity
        if self.configuration_set:
            params["ConfigurationSetName"] = self.configuration_set
        if sms.ttl_seconds is not None:
            params["TimeToLive"] = sms.ttl_seconds
        if self.max_price:
            params["MaxPrice"] = self.max_price
        return params

    def send(self, sms: OutgoingSms) -> Accepted:
        try:
            response = self.client.send_text_message(**self.request(sms))
        except ClientError as error:
            kind = aws.error_code(error) or "ClientError"
            message = str(error.response.get("Error", {}).get("Message", ""))
            # e.g. "ConflictException:DESTINATION_PHONE_NUMBER_OPTED_OUT": what an operator needs.
            reason = error.response.get("Reason")
            code = f"{kind}:{reason}" if isinstance(reason, str) and reason else kind
            account = self.ACCOUNT_REFUSALS.get((kind, reason if isinstance(reason, str) else None))
            if account is None and kind == "AccessDeniedException":
                account = self.ACCOUNT_REFUSALS[(kind, None)]
            if account is not None:
                transient = kind in self.TRANSIENT_REFUSALS  # the spend limit: a new month sends again
                raise GatewayRefused(code, message, transient=transient, account=account) from None
            if kind in self.TRANSIENT_REFUSALS:
                raise GatewayRefused(code, message, transient=True) from None
            if kind in self.PERMANENT_REFUSALS:
                opted_out = kind == "ConflictException" and reason == self.OPTED_OUT
                raise GatewayRefused(code, message, transient=False, opted_out=opted_out) from None
            # InternalServerException and anything new: the request arrived; maybe it was queued.
            raise GatewayOutcomeUnknown(code, message) from None
        except BotoConnectionError as error:
            # Could not connect (DNS, refused, connect timeout, TLS handshake): nothing left.
            raise GatewayRefused(type(error).__name__, transient=True) from None
        except BotoCoreError as error:
            # Read timeout, connection closed mid-answer: the request may have been taken.
            raise GatewayOutcomeUnknown(type(error).__name__) from None
        return Accepted(message_id=response.get("MessageId"))

    def lookup(self, key: str, message_id: str | None) -> LookupResult:
        return LookupResult(LookupStatus.UNKNOWN, message_id, "End User Messaging has no message lookup")


# -- a generic HTTP gateway -----------------------------------------------------------------------
class HttpGateway:
    """A generic HTTP SMS gateway that deduplicates on a client reference and can look it up.

    Contract (JSON both ways, `Authorization: Bearer <token>` when the `sms_gateway` secret is set;
    its SecretString is the token, or a JSON object with "token"):

    - `POST {base}/messages` `{"to", "text", "client_reference"}` (also sent as `Idempotency-Key`)
      -> 200/201/202 `{"message_id"}`; 409 = that client reference was already taken (accepted);
      429/503 = refused for now (`Retry-After` honoured); 402 = out of balance and 401 (after
      the token was re-read) = the account refused; other 4xx = refused for good; other 5xx =
      unknown.
    - `GET {base}/messages?client_reference=<key>` -> 200 `{"message_id", "status"}` found,
      404 not received; anything else unknown.

    The gateway's own deduplication makes a resend with the same key safe, but the reconciler
    still asks first. `pipeline.http` is not used for sending: it cannot tell "never connected"
    (safe to retry) from "sent, no answer" (unknown), which http.client's two steps can.
    """

    name = "http"
    TRANSIENT_STATUSES = frozenset({429, 503})
    # Statuses refusing the account, not the message (`send` re-reads the token after a 401 first).
    ACCOUNT_STATUSES = {402: "out_of_balance", 401: UNAUTHORIZED}

    def __init__(self, base_url: str, *, timeout: float = 5.0, secret: str | None = HTTP_SECRET) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("the SMS gateway URL must be http(s)://host[:port][/path]")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port
        self.base_path = parts.path.rstrip("/")
        self.timeout = timeout
        self.secret = secret

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.secret and os.environ.get(secret_env_var(self.secret)):
            # Imported by the HTTP gateway alone: the reconciler and `sms_events` on End User
            # Messaging read no secret (the `sms` consumer's init imports it: `service.prepare`).
            from pipeline import secrets

            value = secrets.secret_string(self.secret)
            try:
                parsed = json.loads(value)
            except ValueError:
                parsed = value
            token = parsed.get("token") if isinstance(parsed, dict) else parsed
            if not isinstance(token, str) or not token:
                raise PermanentError("secret SMS_GATEWAY_SECRET_ID has no token")
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _connection(self) -> http.client.HTTPConnection:
        if self.scheme == "https":
            # One TLS context for every send: a connection without one loads the CA store each time.
            context = tls_context()
            return http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=context)
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    @staticmethod
    def _read(response: http.client.HTTPResponse) -> JsonResponse:
        raw = response.read(65_536)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        headers = {name.lower(): value for name, value in response.getheaders()}
        return JsonResponse(response.status, body, headers)

    def _token_renewed(self) -> bool:
        """After a 401: whether the token, re-read past the cache (`pipeline.secrets.refresh_secret`,
        at most once a minute), changed, so the call is worth making once more."""
        if not self.secret or not os.environ.get(secret_env_var(self.secret)):
            return False
        from pipeline import secrets  # as in _headers

        try:
            return secrets.refresh_secret(self.secret)
        except (TransientError, PermanentError):
            return False

    def send(self, sms: OutgoingSms) -> Accepted:
        """One send; a 401 re-reads the token and, if it changed, sends once more (the gateway
        deduplicates on the key, so the repeat is safe)."""
        try:
            return self._send(sms)
        except GatewayRefused as refusal:
            if refusal.code != "HTTP 401" or not self._token_renewed():
                raise
        return self._send(sms)

    def _send(self, sms: OutgoingSms) -> Accepted:
        try:
            headers = self._headers()
        except (TransientError, PermanentError) as error:
            raise GatewayRefused(
                "credentials", error.reason, transient=isinstance(error, TransientError)
            ) from None
        payload = json.dumps({"to": sms.phone, "text": sms.body, "client_reference": sms.key}).encode()
        connection = self._connection()
        try:
            try:
                connection.connect()
            except OSError as error:
                raise GatewayRefused(f"connect {type(error).__name__}", transient=True) from None
            try:
                connection.request(
                    "POST",
                    f"{self.base_path}/messages",
                    body=payload,
                    headers={**headers, "Idempotency-Key": sms.key},
                )
                response = self._read(connection.getresponse())
            except (OSError, http.client.HTTPException) as error:
                raise GatewayOutcomeUnknown(f"no answer {type(error).__name__}") from None
        finally:
            connection.close()
        detail = _detail(response)
        if response.ok or response.status == 409:
            message_id = response.body.get("message_id") if isinstance(response.body, dict) else None
            return Accepted(message_id=str(message_id) if message_id else None)
        if response.status in self.TRANSIENT_STATUSES:
            raise GatewayRefused(
                f"HTTP {response.status}", detail, transient=True, retry_after=retry_after_seconds(response)
            )
        if 400 <= response.status < 500:
            account = self.ACCOUNT_STATUSES.get(response.status)
            raise GatewayRefused(f"HTTP {response.status}", detail, transient=False, account=account)
        raise GatewayOutcomeUnknown(f"HTTP {response.status}", detail)

    def lookup(self, key: str, message_id: str | None) -> LookupResult:
        connection = self._connection()
        try:
            connection.request(
                "GET", f"{self.base_path}/messages?client_reference={quote(key)}", headers=self._headers()
            )
            response = self._read(connection.getresponse())
        except (OSError, http.client.HTTPException, TransientError, PermanentError) as error:
            return LookupResult(LookupStatus.UNKNOWN, message_id, f"lookup failed: {type(error).__name__}")
        finally:
            connection.close()
        if response.status == 404:
            return LookupResult(LookupStatus.NOT_FOUND, message_id)
        if response.ok and isinstance(response.body, dict):
            found = response.body.get("message_id")
            return LookupResult(LookupStatus.FOUND, str(found) if found else message_id)
        return LookupResult(LookupStatus.UNKNOWN, message_id, f"lookup HTTP {response.status}")


def _detail(response: JsonResponse) -> str:
    body = response.body
    if isinstance(body, dict):
        for name in ("error", "message", "detail"):
            if isinstance(body.get(name), str):
                return str(body[name])
    return ""


# -- the fake ---------------------------------------------------------------------------------------
class FakeBehaviour(StrEnum):
    ACCEPT = "accept"
    REFUSE = "refuse"  # transient refusal (throttled)
    REFUSE_PERMANENTLY = "refuse_permanently"  # e.g. an invalid number
    REFUSE_ACCOUNT = "refuse_account"  # the account out of balance (a 402), restored at the next send
    TIMEOUT_AFTER_ACCEPT = "timeout_after_accept"  # took it, the answer was lost
    TIMEOUT_BEFORE_ACCEPT = "timeout_before_accept"  # the request was lost on the way
    CRASH_AFTER_ACCEPT = "crash_after_accept"  # took it, then the worker process died


class SimulatedCrash(BaseException):
    """The worker process dying mid-call (a Lambda timeout or OOM): nothing in it runs further."""


@dataclass
class FakeGateway:
    """In-memory gateway for tests and local runs, scripted one behaviour per send.

    It does *not* deduplicate: every accepted send is a text on the phone (`delivered`), so a
    test sees each duplicate the journal failed to stop. `lookup_unknown` makes lookups
    inconclusive, as with a gateway that has no lookup API.
    """

    name = "fake"
    script: deque[FakeBehaviour] = field(default_factory=deque)
    default: FakeBehaviour = FakeBehaviour.ACCEPT
    lookup_unknown: bool = False
    delay_seconds: float = 0.0
    calls: list[OutgoingSms] = field(default_factory=list)
    delivered: list[tuple[str, OutgoingSms]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def then(self, *behaviours: FakeBehaviour | str) -> FakeGateway:
        self.script.extend(FakeBehaviour(behaviour) for behaviour in behaviours)
        return self

    def texts_to(self, phone: str) -> list[str]:
        return [sms.body for _, sms in self.delivered if sms.phone == phone]

    def _take(self, sms: OutgoingSms) -> str:
        message_id = f"fake-{uuid.uuid4()}"
        self.delivered.append((message_id, sms))
        return message_id

    def send(self, sms: OutgoingSms) -> Accepted:
        if self.delay_seconds:
            threading.Event().wait(self.delay_seconds)
        with self._lock:
            self.calls.append(sms)
            behaviour = self.script.popleft() if self.script else self.default
            if behaviour is FakeBehaviour.REFUSE:
                raise GatewayRefused("Throttled", f"slow down sending to {sms.phone}", transient=True)
            if behaviour is FakeBehaviour.REFUSE_ACCOUNT:
                raise GatewayRefused(
                    "HTTP 402", "insufficient_balance", transient=False, account="out_of_balance"
                )
            if behaviour is FakeBehaviour.REFUSE_PERMANENTLY:
                raise GatewayRefused("InvalidNumber", f"cannot deliver to {sms.phone}", transient=False)
            if behaviour is FakeBehaviour.TIMEOUT_BEFORE_ACCEPT:
                raise GatewayOutcomeUnknown("ReadTimeout")
            message_id = self._take(sms)
        if behaviour is FakeBehaviour.TIMEOUT_AFTER_ACCEPT:
            raise GatewayOutcomeUnknown("ReadTimeout")
        if behaviour is FakeBehaviour.CRASH_AFTER_ACCEPT:
            raise SimulatedCrash("worker died while waiting for the gateway")
        return Accepted(message_id)

    def lookup(self, key: str, message_id: str | None) -> LookupResult:
        if self.lookup_unknown:
            return LookupResult(LookupStatus.UNKNOWN, message_id, "scripted: cannot tell")
        with self._lock:
            found = [mid for mid, sms in self.delivered if sms.key == key]
        if found:
            return LookupResult(LookupStatus.FOUND, found[0])
        return LookupResult(LookupStatus.NOT_FOUND, message_id)


_fake: FakeGateway | None = None


def fake_gateway(script: Iterable[str] | None = None) -> FakeGateway:
    """The process-wide fake (the local runtime's workers and reconciler share it)."""
    global _fake
    if _fake is None:
        configured = os.environ.get("SMS_FAKE_SCRIPT", "")
        _fake = FakeGateway().then(*(part.strip() for part in configured.split(",") if part.strip()))
    if script is not None:
        _fake.then(*script)
    return _fake


def reset_fake_gateway() -> None:
    global _fake
    _fake = None


def build_gateway(settings: SmsSettings, max_price: str | None = None) -> SmsGateway:
    """The configured gateway; `max_price` (the rules' `max_price`) caps End User Messaging's."""
    if settings.gateway == "fake":
        return fake_gateway()
    if settings.gateway == "http":
        assert settings.http_base_url is not None  # checked by SmsSettings
        return HttpGateway(settings.http_base_url, timeout=settings.http_timeout_seconds)
    return EndUserMessagingGateway(
        origination_identity=settings.origination_identity,
        configuration_set=settings.configuration_set,
        message_type=settings.message_type,
        max_price=max_price,
    )
