"""A fault point in front of moto's SNS: a pass-through proxy with the fakes' `/_calls` and `/_faults`.

SNS itself is moto's; this proxy only stands between the webhook and it (the webhook process
alone gets `AWS_ENDPOINT_URL_SNS` pointing here), so a rehearsal can make `Publish` fail without
touching what the workers and the tests see of moto. Calls are forwarded untouched and answered
with moto's answer; an injected failure is answered in SNS's own query-protocol XML error format,
so botocore classifies it as it would a real one (a 5xx or throttle is retried by the client
before the webhook gives up with 503).

`match` compares with `/<Action>` (e.g. `"match": "Publish"`): every SNS call is `POST /`.

`on_publish`, when given, hears each message moto accepted (`Publish`, `PublishBatch`): the local
runtime explains its routing (`local.routing`).

It also plays what moto lacks of an SNS FIFO topic: deduplication at the topic. A `Publish` to a
`.fifo` topic repeating a `MessageDeduplicationId` of the same topic published within the last
five minutes is answered as SNS answers it (success, the first message's id) and not forwarded,
so no subscriber, standard queue or FIFO, sees the repeat (moto dedupes only inside FIFO queues).
"""

from __future__ import annotations

import http.client
import re
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import ClassVar
from xml.sax.saxutils import escape

from local.fakes.base import FakeRequest, FakeResponse, FakeService, status_phrase
from local.routing import Publish, parse_form, publishes

SNS_XML_NAMESPACE = "http://sns.amazonaws.com/doc/2010-03-31/"
# SNS FIFO topics drop a repeated MessageDeduplicationId for five minutes from the first publish.
FIFO_DEDUPLICATION_SECONDS = 300.0
_MESSAGE_ID = re.compile(rb"<MessageId>([^<]+)</MessageId>")
UPSTREAM_TIMEOUT_SECONDS = 30.0
# Request headers not passed on: hop-by-hop ones, and those http.client sets itself.
_NOT_FORWARDED = frozenset({"host", "content-length", "connection", "keep-alive", "transfer-encoding"})
# SNS's error code per injected status (query protocol: `Sender` faults are the caller's).
_ERROR_CODES: dict[int, str] = {
    400: "InvalidParameter",
    403: "AuthorizationError",
    404: "NotFound",
    429: "Throttled",
    500: "InternalError",
    503: "ServiceUnavailable",
}


class SnsFaultProxy(FakeService):
    """Forwards every call to `upstream()` (moto's URL, known once moto listens)."""

    name: ClassVar[str] = "sns"

    def __init__(
        self,
        upstream: Callable[[], str],
        host: str = "127.0.0.1",
        port: int = 0,
        on_publish: Callable[[list[Publish]], None] | None = None,
    ) -> None:
        super().__init__(host, port)
        self.upstream = upstream
        self.on_publish = on_publish
        # (topic ARN, deduplication id) -> (when first published, its message id).
        self._published: dict[tuple[str, str], tuple[float, str]] = {}
        # One lock per key: copies published at the same moment are one check-and-publish, as
        # in SNS, where a concurrent copy never slips past the first.
        self._key_locks: dict[tuple[str, str], threading.Lock] = {}
        self._dedup_lock = threading.Lock()
        self.deduplicated = 0

    def _fifo_key(self, request: FakeRequest) -> tuple[str, str] | None:
        params = request.params()
        topic, dedup = params.get("TopicArn"), params.get("MessageDeduplicationId")
        if params.get("Action") != "Publish" or not isinstance(topic, str) or not topic.endswith(".fifo"):
            return None
        return (topic, dedup) if isinstance(dedup, str) and dedup else None

    def _repeat_of(self, key: tuple[str, str]) -> str | None:
        """The message id of an earlier publish with this key within the window, if any."""
        now = time.monotonic()
        with self._dedup_lock:
            for old, (at, _) in list(self._published.items()):
                if now - at >= FIFO_DEDUPLICATION_SECONDS:
                    del self._published[old]
                    self._key_locks.pop(old, None)
            first = self._published.get(key)
            return first[1] if first else None

    def _remember(self, key: tuple[str, str], body: bytes) -> None:
        found = _MESSAGE_ID.search(body)
        with self._dedup_lock:
            self._published.setdefault(key, (time.monotonic(), found.group(1).decode() if found else ""))

    def _deduplicated_answer(self, message_id: str) -> FakeResponse:
        self.deduplicated += 1
        body = (
            f'<PublishResponse xmlns="{SNS_XML_NAMESPACE}"><PublishResult><MessageId>{escape(message_id)}'
            f"</MessageId></PublishResult><ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId>"
            "</ResponseMetadata></PublishResponse>"
        ).encode()
        return FakeResponse(200, body, {"Content-Type": "text/xml"})

    def fault_target(self, request: FakeRequest) -> str:
        action = request.params().get("Action")
        return f"/{action}" if isinstance(action, str) and action else request.path

    def error_response(self, status: int, retry_after: int | None = None) -> FakeResponse:
        code = _ERROR_CODES.get(status, "InternalError" if status >= 500 else "InvalidParameter")
        fault_type = "Receiver" if status >= 500 or status == 429 else "Sender"
        body = (
            f'<ErrorResponse xmlns="{SNS_XML_NAMESPACE}"><Error><Type>{fault_type}</Type>'
            f"<Code>{code}</Code><Message>{escape(status_phrase(status))} (injected fault)</Message>"
            f"</Error><RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>"
        ).encode()
        headers = {"Content-Type": "text/xml"}
        if retry_after is not None:
            headers["Retry-After"] = str(retry_after)
        return FakeResponse(status, body, headers)

    def answer(self, request: FakeRequest) -> FakeResponse:
        fifo_key = self._fifo_key(request)
        if fifo_key is None:
            return self._forward(request)
        with self._dedup_lock:
            key_lock = self._key_locks.setdefault(fifo_key, threading.Lock())
        with key_lock:
            repeat = self._repeat_of(fifo_key)
            if repeat is not None:
                if self.on_publish is not None:
                    self.on_publish(
                        [replace(p, deduplicated=True) for p in publishes(parse_form(request.body))]
                    )
                return self._deduplicated_answer(repeat)
            response = self._forward(request)
            if response.status == 200:
                self._remember(fifo_key, response.body)
            return response

    def _forward(self, request: FakeRequest) -> FakeResponse:
        target = urllib.parse.urlsplit(self.upstream())
        path = request.path + (f"?{urllib.parse.urlencode(request.query)}" if request.query else "")
        headers = {name: value for name, value in request.headers.items() if name not in _NOT_FORWARDED}
        connection = http.client.HTTPConnection(
            target.hostname or "127.0.0.1", target.port, timeout=UPSTREAM_TIMEOUT_SECONDS
        )
        try:
            connection.request(request.method, path, body=request.body, headers=headers)
            response = connection.getresponse()
            body = response.read()
            content_type = response.getheader("Content-Type") or "text/xml"
            if self.on_publish is not None and 200 <= response.status < 300:
                accepted = publishes(parse_form(request.body))
                if accepted:
                    self.on_publish(accepted)
            return FakeResponse(response.status, body, {"Content-Type": content_type})
        except OSError:
            # moto unreachable: what SNS says when it cannot serve a request.
            return self.error_response(503)
        finally:
            connection.close()
