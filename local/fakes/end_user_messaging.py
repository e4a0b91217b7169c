"""A stand-in for AWS End User Messaging SMS (`pinpoint-sms-voice-v2`), for what the pipeline calls.

The protocol is AWS JSON 1.0, as botocore's service model describes it: `POST /` with
`X-Amz-Target: PinpointSMSVoiceV2.<Operation>`, `Content-Type: application/x-amz-json-1.0`, a
SigV4 `Authorization` header signed for `sms-voice`, a JSON body; errors as
`{"__type": "<Code>", "message": ...}` plus the error shape's members (`Reason` for
ValidationException, ConflictException, ServiceQuotaExceededException, which
`pipeline.sms.gateways.EndUserMessagingGateway` reads). Only `SendTextMessage` is served:

- it checks what a real send needs: `DestinationPhoneNumber` in E.164, a `MessageBody` of 1..1600
  characters (not only blanks), `MessageType` TRANSACTIONAL/PROMOTIONAL, at most 5 `Context`
  entries within the model's limits, an `OriginationIdentity` of the model's form, and a
  `ConfigurationSetName` (name or ARN) this stand-in knows (`add_configuration_set`), else
  ResourceNotFoundException; it answers `{"MessageId": "<uuid>"}`;
- after an accepted send it publishes, asynchronously, the configuration set's SMS events to its
  SNS event destination (`publish(topic_arn, message)`): `TEXT_SUCCESSFUL` (carrier took it),
  then `TEXT_DELIVERED` (`isFinal`), shaped as End User Messaging documents them, with the send's
  `Context`. A send without a configuration set, or with one that has no destination, has none.

Faults (`POST /_faults`, see `local.fakes.base`), answered with End User Messaging's own errors:
`fail_next` with 400 ValidationException, 402 ServiceQuotaExceededException, 403
AccessDeniedException, 404 ResourceNotFoundException, 409 ConflictException
(`DESTINATION_PHONE_NUMBER_OPTED_OUT`), 5xx InternalServerException; `rate_limit_next` is a
ThrottlingException (End User Messaging sends no Retry-After: `retry_after` is not used);
`hang_next`, `drop_answer_next` (the message is sent and its events published, the answer lost),
`down_for`. `match` compares with `/<Operation>`, e.g. `"match": "SendTextMessage"`. Besides,
for the delivery events of the next N accepted sends:

- `{"drop_events_next": N}`: no delivery event at all (an `unknown` stays unknown);
- `{"delay_events_next": N, "events_after": 30}`: their first event only after 30 s.

The account refused (`local.fakes.accounts`), with the errors SendTextMessage documents for it:
`POST /_account/block {"cause": ...}` answers every send `out_of_balance` 402
ServiceQuotaExceededException `MONTHLY_SPEND_LIMIT_REACHED_FOR_TEXT` (the month's spend limit),
`blocked` 403 AccessDeniedException `ACCOUNT_DISABLED`, `unauthorized` 403 AccessDeniedException
(the caller's role denied); `/_account/unblock` ends it. It has no credential of its own to rotate
(SigV4 with the caller's role).

The account's opt-out list (End User Messaging's default `Default` list; STOP handled by AWS):
`POST /_inbound {"from": "+E164", "text": "STOP"}` is a customer's reply, as the carrier hands it
to AWS: a STOP keyword puts the number on the list, START/UNSTOP takes it off; a send to a
listed number is refused with 409 ConflictException `DESTINATION_PHONE_NUMBER_OPTED_OUT`
(`ResourceType` opt-out-list), nothing sent. `GET /_opted_out` lists the numbers (tests only).
A send's `TimeToLive` (seconds, 5..259,200) is checked and kept with the message.

`GET /_messages` lists what "reached phones" (one entry per accepted send, with its parts), `GET
/_events` the delivery events published (or dropped).

Price: each part costs `price_per_part` USD (0 unless set, or `POST /_price {"per_part": 0.05}`);
a send whose `MaxPrice` (2..8 characters, `[0-9]{0,2}.[0-9]{1,5}`, else ValidationException
FIELD_VALIDATION_FAILED) is below a part's price is refused with ValidationException
`PRICE_OVER_THRESHOLD`, nothing sent. Parts are counted as End User Messaging counts them
(`pipeline.sms.encoding`); the events carry `totalMessageParts` and `totalMessagePrice`.
"""

from __future__ import annotations

import heapq
import itertools
import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from local.fakes.accounts import AccountSwitch
from local.fakes.base import FakeRequest, FakeResponse, FakeService, FaultRequestError, status_phrase
from pipeline.sms.encoding import size
from pipeline.sms.suppression import inbound_keyword

TARGET_PREFIX = "PinpointSMSVoiceV2."
SIGNING_NAME = "sms-voice"
JSON_CONTENT_TYPE = "application/x-amz-json-1.0"
E164 = re.compile(r"^\+[1-9]\d{6,14}$")
MAX_BODY_LENGTH = 1600  # TextMessageBody
MAX_CONTEXT_ENTRIES = 5  # ContextMap
CONTEXT_KEY = re.compile(r"^\S{1,100}$")
CONTEXT_VALUE = re.compile(r"^(?!\s)[\s\S]{1,800}(?<!\s)$")
ORIGINATION_IDENTITY = re.compile(r"^[A-Za-z0-9_:/+-]{1,256}$")
CONFIGURATION_SET = re.compile(r"^[A-Za-z0-9_:/-]{1,256}$")
MESSAGE_TYPES = frozenset({"TRANSACTIONAL", "PROMOTIONAL"})
TIME_TO_LIVE = (5, 259_200)  # SendTextMessage's TimeToLive bounds, seconds
OPT_OUT_LIST = "Default"
MAX_PRICE = re.compile(r"^[0-9]{0,2}\.[0-9]{1,5}$")  # MaxPrice: 2..8 characters of this form
# The origination number in events when the send names no phone number (End User Messaging then
# picks one of the account's; 555-01xx numbers are reserved for fiction).
LOCAL_ORIGINATION_NUMBER = "+12065550152"
# When the carrier (TEXT_SUCCESSFUL) and then the phone (TEXT_DELIVERED) take a message, after the send.
SUCCESSFUL_AFTER_SECONDS = 1.0
DELIVERED_AFTER_SECONDS = 2.0
# The injected error per HTTP status: (code, Reason or None).
INJECTED_ERRORS: dict[int, tuple[str, str | None]] = {
    400: ("ValidationException", "INVALID_PARAMETER"),
    402: ("ServiceQuotaExceededException", "MONTHLY_SPEND_LIMIT_REACHED_FOR_TEXT"),
    403: ("AccessDeniedException", None),
    404: ("ResourceNotFoundException", None),
    409: ("ConflictException", "DESTINATION_PHONE_NUMBER_OPTED_OUT"),
    429: ("ThrottlingException", None),
}
EVENT_FAULT_KEYS = frozenset({"drop_events_next", "delay_events_next", "events_after"})

Publish = Callable[[str, str], None]


def _account_error(status: int, code: str, message: str, reason: str | None) -> Callable[[], FakeResponse]:
    def answer() -> FakeResponse:
        error = AwsError(status, code, message)
        if reason is not None:
            error.members["Reason"] = reason
        return EndUserMessagingFake._error(error)

    return answer


# The account's refusals of every send (`local.fakes.accounts`), as SendTextMessage documents them.
ACCOUNT_REFUSALS = {
    "out_of_balance": _account_error(
        402,
        "ServiceQuotaExceededException",
        "The monthly spend limit for text messages has been reached",
        "MONTHLY_SPEND_LIMIT_REACHED_FOR_TEXT",
    ),
    "blocked": _account_error(403, "AccessDeniedException", "The account is disabled", "ACCOUNT_DISABLED"),
    "unauthorized": _account_error(
        403, "AccessDeniedException", "User is not authorized to perform sms-voice:SendTextMessage", None
    ),
}


def _no_credential(value: str) -> None:
    raise ValueError("End User Messaging has no credential of its own to rotate: calls are signed by a role")


@dataclass
class EventFault:
    kind: str  # "drop" or "delay"
    remaining: int
    events_after: float = 0.0


class AwsError(Exception):
    def __init__(self, status: int, code: str, message: str, **members: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.members = status, code, members


def validation_error(name: str, message: str, reason: str = "FIELD_VALIDATION_FAILED") -> AwsError:
    return AwsError(
        400, "ValidationException", message, Reason=reason, Fields=[{"Name": name, "Message": message}]
    )


def message_parts(body: str) -> tuple[str, int]:
    """(encoding, parts) as End User Messaging's events name them: GSM-7 160/153 septets (the
    extension table's characters two each), UCS-2 70/67 (`pipeline.sms.encoding`)."""
    counted = size(body)
    return ("GSM" if counted.encoding == "GSM-7" else "UCS2"), counted.parts


class EndUserMessagingFake(FakeService):
    name: ClassVar[str] = "end_user_messaging"

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        publish: Publish | None = None,
        successful_after: float = SUCCESSFUL_AFTER_SECONDS,
        delivered_after: float = DELIVERED_AFTER_SECONDS,
        price_per_part: float = 0.0,
    ) -> None:
        super().__init__(host, port)
        self.publish = publish
        # What a part costs to any destination (USD): `MaxPrice` below it refuses the send.
        self.price_per_part = price_per_part
        self.successful_after = successful_after
        self.delivered_after = delivered_after
        self._configuration_sets: dict[str, str | None] = {}  # name -> SNS event destination topic
        self._messages: list[dict[str, Any]] = []
        self._events: list[dict[str, Any]] = []
        self._event_faults: list[EventFault] = []
        self._data_lock = threading.Lock()
        self._due: list[tuple[float, int, str, dict[str, Any]]] = []  # (at, seq, topic, event)
        self._sequence = itertools.count()
        self._wakeup = threading.Condition()
        self._scheduler: threading.Thread | None = None
        self.account = AccountSwitch(ACCOUNT_REFUSALS, _no_credential)
        self._opted_out: set[str] = set()

    # -- configuration ---------------------------------------------------------------------------
    def add_configuration_set(self, name: str, event_topic_arn: str | None) -> None:
        """A configuration set sends may name, with its SNS event destination (None: no events)."""
        with self._data_lock:
            self._configuration_sets[name] = event_topic_arn

    def messages(self) -> list[dict[str, Any]]:
        """Every accepted message, in order (what reached phones)."""
        with self._data_lock:
            return [dict(message) for message in self._messages]

    def events(self) -> list[dict[str, Any]]:
        with self._data_lock:
            return [dict(event) for event in self._events]

    # -- lifecycle: the event publisher ------------------------------------------------------------
    def start(self) -> EndUserMessagingFake:
        super().start()
        if self._scheduler is None or not self._scheduler.is_alive():
            self._scheduler = threading.Thread(target=self._publish_due, name="eum-events", daemon=True)
            self._scheduler.start()
        return self

    def stop(self) -> None:
        super().stop()
        with self._wakeup:
            self._due.clear()
            self._wakeup.notify_all()
        if self._scheduler is not None:
            self._scheduler.join(2)
            self._scheduler = None

    def _publish_due(self) -> None:
        while not self._stopping.is_set():
            with self._wakeup:
                now = time.monotonic()
                if not self._due or self._due[0][0] > now:
                    self._wakeup.wait(min(0.5, self._due[0][0] - now) if self._due else 0.5)
                    continue
                _, _, topic, event = heapq.heappop(self._due)
            self._publish(topic, event)

    def _publish(self, topic: str, event: dict[str, Any]) -> None:
        entry = {
            "event_type": event["eventType"],
            "message_id": event["messageId"],
            "topic_arn": topic,
            "published": False,
            "time": time.time(),
        }
        try:
            if self.publish is None:
                raise RuntimeError("no SNS publisher")
            self.publish(topic, json.dumps(event))
            entry["published"] = True
        except Exception as error:  # the destination failing loses the event, as with a broken one
            entry["error"] = type(error).__name__
        with self._data_lock:
            self._events.append(entry)

    # -- faults: the base's, plus delivery-event faults ----------------------------------------------
    def add_faults(self, document: Any) -> dict[str, Any]:
        own = (
            {k: v for k, v in document.items() if k in EVENT_FAULT_KEYS} if isinstance(document, dict) else {}
        )
        event_faults = self._event_faults_from(own)
        rest = {k: v for k, v in document.items() if k not in EVENT_FAULT_KEYS} if own else document
        state = super().add_faults(rest) if rest or not own else self.fault_state()
        with self._data_lock:
            self._event_faults.extend(event_faults)
            state["events"] = [asdict(fault) for fault in self._event_faults if fault.remaining > 0]
        return state

    @staticmethod
    def _event_faults_from(own: dict[str, Any]) -> list[EventFault]:
        def count(key: str, minimum: float) -> float:
            value = own[key]
            if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
                raise FaultRequestError(f"{key} must be a number >= {minimum}")
            return float(value)

        faults = []
        if "drop_events_next" in own:
            faults.append(EventFault("drop", int(count("drop_events_next", 1))))
        if "delay_events_next" in own:
            after = count("events_after", 0) if "events_after" in own else 30.0
            faults.append(EventFault("delay", int(count("delay_events_next", 1)), after))
        elif "events_after" in own:
            raise FaultRequestError("events_after goes with delay_events_next")
        return faults

    def fault_state(self, down_for: float | None = None) -> dict[str, Any]:
        state = super().fault_state(down_for)
        with self._data_lock:
            state["events"] = [asdict(fault) for fault in self._event_faults if fault.remaining > 0]
        return state

    def clear_faults(self) -> None:
        with self._data_lock:
            self._event_faults.clear()
        super().clear_faults()

    def _take_event_fault(self) -> EventFault | None:
        with self._data_lock:
            for fault in self._event_faults:
                if fault.remaining > 0:
                    fault.remaining -= 1
                    taken = EventFault(**asdict(fault))
                    break
            else:
                return None
            self._event_faults = [fault for fault in self._event_faults if fault.remaining > 0]
            return taken

    # -- the API -----------------------------------------------------------------------------------
    def fault_target(self, request: FakeRequest) -> str:
        target = request.headers.get("x-amz-target", "")
        return f"/{target.removeprefix(TARGET_PREFIX)}" if target.startswith(TARGET_PREFIX) else request.path

    def control(self, request: FakeRequest) -> FakeResponse:
        if (request.method, request.path) == ("GET", "/_messages"):
            return FakeResponse(200, self.messages())
        if (request.method, request.path) == ("GET", "/_events"):
            return FakeResponse(200, self.events())
        if (request.method, request.path) == ("POST", "/_price"):
            document = request.json()
            price = document.get("per_part") if isinstance(document, dict) else None
            if isinstance(price, bool) or not isinstance(price, int | float) or price < 0:
                return FakeResponse(400, {"error": "per_part must be a number of USD >= 0"})
            self.price_per_part = float(price)
            return FakeResponse(200, {"per_part": self.price_per_part})
        if (switched := self.account.control(request)) is not None:
            return switched
        if (request.method, request.path) == ("POST", "/_inbound"):
            return self._inbound(request.json())
        if (request.method, request.path) == ("GET", "/_opted_out"):
            with self._data_lock:
                return FakeResponse(200, sorted(self._opted_out))
        return super().control(request)

    def _inbound(self, document: Any) -> FakeResponse:
        """A customer's reply: AWS handles the opt-out keywords itself (the account's list)."""
        sender = document.get("from") if isinstance(document, dict) else None
        text = document.get("text") if isinstance(document, dict) else None
        if not isinstance(sender, str) or not E164.fullmatch(sender) or not isinstance(text, str):
            return FakeResponse(400, {"error": "expected {from: E.164, text}"})
        keyword = inbound_keyword(text)
        with self._data_lock:
            if keyword == "stop":
                self._opted_out.add(sender)
            elif keyword == "start":
                self._opted_out.discard(sender)
        return FakeResponse(200, {"keyword": keyword})

    def error_response(self, status: int, retry_after: int | None = None) -> FakeResponse:
        if status >= 500:
            error = AwsError(status, "InternalServerException", f"{status_phrase(status)} (injected fault)")
            error.members["RequestId"] = str(uuid.uuid4())
        else:
            code, reason = INJECTED_ERRORS.get(status, ("ValidationException", "OTHER"))
            # End User Messaging answers a throttle with 400 (AWS JSON), and no Retry-After.
            error = AwsError(400 if status == 429 else status, code, "injected fault")
            if reason is not None:
                error.members["Reason"] = reason
        return self._error(error)

    @staticmethod
    def _error(error: AwsError) -> FakeResponse:
        body = {"__type": error.code, "message": str(error), **error.members}
        headers = {
            "Content-Type": JSON_CONTENT_TYPE,
            "x-amzn-RequestId": str(uuid.uuid4()),
            "x-amzn-ErrorType": error.code,
        }
        return FakeResponse(error.status, json.dumps(body).encode(), headers)

    def answer(self, request: FakeRequest) -> FakeResponse:
        try:
            operation, document = self._read(request)
            if operation != "SendTextMessage":
                raise AwsError(
                    400, "UnknownOperationException", f"{operation} is not served by this stand-in"
                )
            refused = self.account.refusal()
            if refused is not None:
                return refused
            result = self._send_text_message(document)
        except AwsError as error:
            return self._error(error)
        headers = {"Content-Type": JSON_CONTENT_TYPE, "x-amzn-RequestId": str(uuid.uuid4())}
        return FakeResponse(200, json.dumps(result).encode(), headers)

    @staticmethod
    def _read(request: FakeRequest) -> tuple[str, dict[str, Any]]:
        target = request.headers.get("x-amz-target", "")
        if request.method != "POST" or request.path != "/" or not target.startswith(TARGET_PREFIX):
            raise AwsError(400, "UnknownOperationException", "expected POST / with X-Amz-Target")
        if request.headers.get("content-type", "").split(";")[0].strip() != JSON_CONTENT_TYPE:
            raise AwsError(400, "SerializationException", f"Content-Type must be {JSON_CONTENT_TYPE}")
        authorization = request.headers.get("authorization", "")
        if not authorization.startswith("AWS4-HMAC-SHA256 "):
            raise AwsError(403, "MissingAuthenticationTokenException", "Missing Authentication Token")
        if f"/{SIGNING_NAME}/aws4_request" not in authorization:
            raise AwsError(403, "InvalidSignatureException", f"Credential should be scoped to {SIGNING_NAME}")
        document = request.json()
        if not isinstance(document, dict):
            raise AwsError(400, "SerializationException", "the body must be a JSON object")
        return target.removeprefix(TARGET_PREFIX), document

    def _send_text_message(self, document: dict[str, Any]) -> dict[str, Any]:
        destination = document.get("DestinationPhoneNumber")
        if destination is None:
            raise validation_error(
                "DestinationPhoneNumber", "DestinationPhoneNumber is required", "MISSING_PARAMETER"
            )
        if not isinstance(destination, str) or not E164.fullmatch(destination):
            raise validation_error("DestinationPhoneNumber", "the destination must be an E.164 phone number")
        body = document.get("MessageBody")
        if not isinstance(body, str) or not body.strip() or len(body) > MAX_BODY_LENGTH:
            raise validation_error(
                "MessageBody", f"MessageBody must be 1..{MAX_BODY_LENGTH} characters, not blank"
            )
        message_type = document.get("MessageType", "TRANSACTIONAL")
        if message_type not in MESSAGE_TYPES:
            raise validation_error("MessageType", "MessageType must be TRANSACTIONAL or PROMOTIONAL")
        context = document.get("Context", {})
        if not isinstance(context, dict) or len(context) > MAX_CONTEXT_ENTRIES:
            raise validation_error(
                "Context", f"Context must be a map of at most {MAX_CONTEXT_ENTRIES} entries"
            )
        for key, value in context.items():
            if (
                not CONTEXT_KEY.fullmatch(key)
                or not isinstance(value, str)
                or not CONTEXT_VALUE.fullmatch(value)
            ):
                raise validation_error("Context", "Context keys are 1..100 and values 1..800 characters")
        identity = document.get("OriginationIdentity")
        if identity is not None and (
            not isinstance(identity, str) or not ORIGINATION_IDENTITY.fullmatch(identity)
        ):
            raise validation_error("OriginationIdentity", "OriginationIdentity is not an identity")
        ttl = document.get("TimeToLive")
        if ttl is not None and (
            isinstance(ttl, bool) or not isinstance(ttl, int) or not TIME_TO_LIVE[0] <= ttl <= TIME_TO_LIVE[1]
        ):
            raise validation_error("TimeToLive", f"TimeToLive must be {TIME_TO_LIVE[0]}..{TIME_TO_LIVE[1]}")
        max_price = document.get("MaxPrice")
        if max_price is not None and (
            not isinstance(max_price, str)
            or not 2 <= len(max_price) <= 8
            or not MAX_PRICE.fullmatch(max_price)
        ):
            raise validation_error("MaxPrice", "MaxPrice must be a price in USD such as 0.10")
        _, parts = message_parts(body)
        # Per part, as the pipeline's setting is (`SmsSettings.max_price`).
        if max_price is not None and self.price_per_part > float(max_price):
            raise validation_error(
                "MaxPrice",
                f"the price of a part ({self.price_per_part:.5f} USD) is over MaxPrice",
                "PRICE_OVER_THRESHOLD",
            )
        topic = self._event_destination(document.get("ConfigurationSetName"))
        with self._data_lock:
            opted_out = destination in self._opted_out
        if opted_out:
            raise AwsError(
                409,
                "ConflictException",
                "The destination phone number is opted out",
                Reason="DESTINATION_PHONE_NUMBER_OPTED_OUT",
                ResourceType="opt-out-list",
                ResourceId=OPT_OUT_LIST,
            )

        message_id = str(uuid.uuid4())
        requested_at = int(time.time() * 1000)
        with self._data_lock:
            self._messages.append(
                {
                    "message_id": message_id,
                    "to": destination,
                    "text": body,
                    "context": dict(context),
                    "configuration_set": document.get("ConfigurationSetName"),
                    "time_to_live": ttl,
                    "accepted_at": requested_at / 1000,
                    "parts": parts,
                    "max_price": max_price,
                }
            )
        if topic is not None:
            self._schedule_events(topic, message_id, document, requested_at)
        return {"MessageId": message_id}

    def _event_destination(self, name_or_arn: Any) -> str | None:
        if name_or_arn is None:
            return None
        if not isinstance(name_or_arn, str) or not CONFIGURATION_SET.fullmatch(name_or_arn):
            raise validation_error("ConfigurationSetName", "ConfigurationSetName is not a name or ARN")
        name = (
            name_or_arn.rpartition("configuration-set/")[2] if name_or_arn.startswith("arn:") else name_or_arn
        )
        with self._data_lock:
            if name not in self._configuration_sets:
                raise AwsError(
                    404,
                    "ResourceNotFoundException",
                    "the configuration set does not exist",
                    ResourceType="configuration-set",
                    ResourceId=name,
                )
            return self._configuration_sets[name]

    # -- delivery events ---------------------------------------------------------------------------
    def _schedule_events(
        self, topic: str, message_id: str, document: dict[str, Any], requested_at: int
    ) -> None:
        fault = self._take_event_fault()
        if fault is not None and fault.kind == "drop":
            with self._data_lock:
                self._events.append({"message_id": message_id, "dropped": True, "time": time.time()})
            return
        delay = fault.events_after if fault is not None else 0.0
        now = time.monotonic()
        events = [
            (now + delay + self.successful_after, "TEXT_SUCCESSFUL"),
            (now + delay + self.delivered_after, "TEXT_DELIVERED"),
        ]
        with self._wakeup:
            for at, event_type in events:
                event = self.delivery_event(event_type, message_id, document, requested_at, delay)
                heapq.heappush(self._due, (at, next(self._sequence), topic, event))
            self._wakeup.notify_all()

    def delivery_event(
        self,
        event_type: str,
        message_id: str,
        document: dict[str, Any],
        requested_at: int,
        delay: float = 0.0,
    ) -> dict[str, Any]:
        """An SMS event as End User Messaging publishes it to an SNS event destination."""
        delivered = event_type == "TEXT_DELIVERED"
        after = delay + (self.delivered_after if delivered else self.successful_after)
        identity = document.get("OriginationIdentity")
        origination = (
            identity if isinstance(identity, str) and E164.fullmatch(identity) else LOCAL_ORIGINATION_NUMBER
        )
        destination = str(document["DestinationPhoneNumber"])
        encoding, parts = message_parts(str(document["MessageBody"]))
        return {
            "eventType": event_type,
            "eventVersion": "1.0",
            "eventTimestamp": requested_at + int(after * 1000),
            "isFinal": delivered,
            "originationPhoneNumber": origination,
            "destinationPhoneNumber": destination,
            "isInternationalSend": origination[:2] != destination[:2],
            "messageId": message_id,
            "messageRequestTimestamp": requested_at,
            "messageEncoding": encoding,
            "messageType": document.get("MessageType", "TRANSACTIONAL"),
            "messageStatus": "DELIVERED" if delivered else "SUCCESSFUL",
            "messageStatusDescription": (
                "Message has been accepted by phone"
                if delivered
                else "Message has been accepted by phone carrier"
            ),
            "context": dict(document.get("Context") or {}),
            "totalMessageParts": parts,
            "totalMessagePrice": round(parts * self.price_per_part, 5),
            "totalCarrierFee": 0.0,
        }
