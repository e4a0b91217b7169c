"""Faults at moto's door: DynamoDB throttling and lost answers, SQS receive and delete failures.

`FaultyAws` wraps the moto server's WSGI application (`local.moto_process`). A campaign
(`local.chaos`) or a test asks for faults over HTTP on moto's own port:

    POST   /_aws_faults {"target": "DynamoDB_20120810.UpdateItem", "kind": "throttle", "count": 2}
    GET    /_aws_faults  -> {"pending": [...], "applied": {"<target> <kind>": n}}
    DELETE /_aws_faults  -> the pending faults forgotten

`target` is a substring of the request's `X-Amz-Target` header (the JSON protocol's operation:
`DynamoDB_20120810.PutItem`, `AmazonSQS.ReceiveMessage`, or just `DynamoDB` for every DynamoDB
call); a query-protocol request (SNS) has none, its target is `<service>.<Action>` from its
signature's scope and its form (`sns.Publish`), and its error answers are the query protocol's
XML. `after` (default 0) lets that many matching requests through before the fault applies
(a create interrupted after N pages). Kinds: `throttle` answers 400 with the service's throttling
error and does nothing; `error` answers 500 and does nothing; `lost_answer` does the request,
then answers 500 as if the answer had been lost on the way (botocore sends the same request
again, as it would on AWS).
"""

from __future__ import annotations

import io
import json
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import parse_qs

PATH = "/_aws_faults"
KINDS = ("throttle", "error", "lost_answer")
# The throttling error each service's JSON protocol answers with.
THROTTLE_TYPES = {
    "DynamoDB": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
    "AmazonSQS": "com.amazonaws.sqs#RequestThrottled",
}
# The service in a SigV4 Authorization header's credential scope (`.../eu-central-1/sns/aws4_request`).
_SCOPE_SERVICE = re.compile(r"Credential=[^/]+/\d{8}/[^/]+/([^/]+)/aws4_request")

StartResponse = Callable[..., Any]


@dataclass
class AwsFault:
    target: str
    kind: str
    count: int
    after: int = 0

    @classmethod
    def parse(cls, document: Any) -> AwsFault:
        if not isinstance(document, dict):
            raise ValueError('expected {"target": "...", "kind": "throttle", "count": 1}')
        target, kind, count = document.get("target"), document.get("kind"), document.get("count", 1)
        after = document.get("after", 0)
        if not isinstance(target, str) or not target:
            raise ValueError("target must be a non-empty substring of X-Amz-Target")
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {list(KINDS)}")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError("count must be a positive integer")
        if not isinstance(after, int) or isinstance(after, bool) or after < 0:
            raise ValueError("after must be a non-negative integer")
        return cls(target, kind, count, after)


class FaultyAws:
    """A WSGI application: `app`, with the pending faults applied to the requests they match."""

    def __init__(self, app: Callable[[dict[str, Any], StartResponse], Iterable[bytes]]) -> None:
        self.app = app
        self._lock = threading.Lock()
        self._pending: list[AwsFault] = []
        self.applied: Counter[str] = Counter()

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == PATH:
            return self._control(environ, start_response)
        target = str(environ.get("HTTP_X_AMZ_TARGET", ""))
        query = not target
        if query:
            target = _query_target(environ)
        fault = self._take(target) if target else None
        if fault is None:
            return self.app(environ, start_response)
        if query:
            return self._query_fault(fault, environ, start_response)
        if fault.kind == "lost_answer":
            self._serve_unheard(environ)
            return _json(start_response, 500, _error("InternalFailure", "answer lost (injected fault)"))
        if fault.kind == "throttle":
            service = target.split(".", 1)[0].split("_", 1)[0]
            kind = THROTTLE_TYPES.get(service, "ThrottlingException")
            return _json(start_response, 400, _error(kind, "Rate exceeded (injected fault)"))
        return _json(start_response, 500, _error("InternalFailure", "internal error (injected fault)"))

    def _serve_unheard(self, environ: dict[str, Any]) -> None:
        """The request happens (moto serves it); only its answer is lost."""
        answer = self.app(environ, lambda *args, **kwargs: None)
        b"".join(answer)
        close = getattr(answer, "close", None)
        if close is not None:
            close()

    def _query_fault(
        self, fault: AwsFault, environ: dict[str, Any], start_response: StartResponse
    ) -> Iterable[bytes]:
        """A query-protocol service's answer to a fault (its XML error)."""
        if fault.kind == "lost_answer":
            self._serve_unheard(environ)
        if fault.kind == "throttle":
            return _xml(start_response, 400, "Throttling", "Rate exceeded (injected fault)")
        return _xml(start_response, 500, "InternalFailure", "internal error (injected fault)")

    def _take(self, target: str) -> AwsFault | None:
        with self._lock:
            for fault in self._pending:
                if fault.target in target:
                    if fault.after:
                        fault.after -= 1
                        return None
                    fault.count -= 1
                    self._pending = [f for f in self._pending if f.count > 0]
                    self.applied[f"{target} {fault.kind}"] += 1
                    return fault
        return None

    def _control(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD")
        if method == "POST":
            length = int(environ.get("CONTENT_LENGTH") or 0)
            try:
                fault = AwsFault.parse(json.loads(environ["wsgi.input"].read(length) or b"null"))
            except ValueError as error:
                return _json(start_response, 400, {"error": str(error)})
            with self._lock:
                self._pending.append(fault)
        elif method == "DELETE":
            with self._lock:
                self._pending.clear()
        with self._lock:
            state = {"pending": [asdict(f) for f in self._pending], "applied": dict(self.applied)}
        return _json(start_response, 200, state)


def _query_target(environ: dict[str, Any]) -> str:
    """`<service>.<Action>` of a query-protocol request ("" when it is none); its body is read
    and put back for the application."""
    found = _SCOPE_SERVICE.search(str(environ.get("HTTP_AUTHORIZATION", "")))
    if found is None or "x-www-form-urlencoded" not in str(environ.get("CONTENT_TYPE", "")):
        return ""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    action = (parse_qs(body.decode("utf-8", "replace")).get("Action") or [""])[0]
    return f"{found.group(1)}.{action}" if action else ""


def _xml(start_response: StartResponse, status: int, code: str, message: str) -> list[bytes]:
    """The query protocol's error document (what SNS answers)."""
    kind = "Sender" if status < 500 else "Receiver"
    body = (
        f"<ErrorResponse><Error><Type>{kind}</Type><Code>{code}</Code><Message>{message}</Message>"
        "</Error><RequestId>injected-fault</RequestId></ErrorResponse>"
    ).encode()
    phrase = {400: "Bad Request", 500: "Internal Server Error"}[status]
    start_response(f"{status} {phrase}", [("Content-Type", "text/xml"), ("Content-Length", str(len(body)))])
    return [body]


def _error(kind: str, message: str) -> dict[str, str]:
    return {"__type": kind, "message": message}


def _json(start_response: StartResponse, status: int, document: Any) -> list[bytes]:
    body = json.dumps(document).encode()
    phrase = {200: "OK", 400: "Bad Request", 500: "Internal Server Error"}[status]
    start_response(
        f"{status} {phrase}",
        [("Content-Type", "application/x-amz-json-1.0"), ("Content-Length", str(len(body)))],
    )
    return [body]
