"""Faults at moto's door: DynamoDB throttling and lost answers, SQS receive and delete failures.

`FaultyAws` wraps the moto server's WSGI application (`local.moto_process`). A campaign
(`local.chaos`) or a test asks for faults over HTTP on moto's own port:

    POST   /_aws_faults {"target": "DynamoDB_20120810.UpdateItem", "kind": "throttle", "count": 2}
    GET    /_aws_faults  -> {"pending": [...], "applied": {"<target> <kind>": n}}
    DELETE /_aws_faults  -> the pending faults forgotten

`target` is a substring of the request's `X-Amz-Target` header (the JSON protocol's operation:
`DynamoDB_20120810.PutItem`, `AmazonSQS.ReceiveMessage`, or just `DynamoDB` for every DynamoDB
call). Kinds: `throttle` answers 400 with the service's throttling error and does nothing;
`error` answers 500 and does nothing; `lost_answer` does the request, then answers 500 as if the
answer had been lost on the way (botocore sends the same request again, as it would on AWS).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

PATH = "/_aws_faults"
KINDS = ("throttle", "error", "lost_answer")
# The throttling error each service's JSON protocol answers with.
THROTTLE_TYPES = {
    "DynamoDB": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
    "AmazonSQS": "com.amazonaws.sqs#RequestThrottled",
}

StartResponse = Callable[..., Any]


@dataclass
class AwsFault:
    target: str
    kind: str
    count: int

    @classmethod
    def parse(cls, document: Any) -> AwsFault:
        if not isinstance(document, dict):
            raise ValueError('expected {"target": "...", "kind": "throttle", "count": 1}')
        target, kind, count = document.get("target"), document.get("kind"), document.get("count", 1)
        if not isinstance(target, str) or not target:
            raise ValueError("target must be a non-empty substring of X-Amz-Target")
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {list(KINDS)}")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError("count must be a positive integer")
        return cls(target, kind, count)


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
        fault = self._take(target) if target else None
        if fault is None:
            return self.app(environ, start_response)
        if fault.kind == "lost_answer":
            # The request happens; only its answer is lost.
            answer = self.app(environ, lambda *args, **kwargs: None)
            b"".join(answer)
            close = getattr(answer, "close", None)
            if close is not None:
                close()
            return _json(start_response, 500, _error("InternalFailure", "answer lost (injected fault)"))
        if fault.kind == "throttle":
            service = target.split(".", 1)[0].split("_", 1)[0]
            kind = THROTTLE_TYPES.get(service, "ThrottlingException")
            return _json(start_response, 400, _error(kind, "Rate exceeded (injected fault)"))
        return _json(start_response, 500, _error("InternalFailure", "internal error (injected fault)"))

    def _take(self, target: str) -> AwsFault | None:
        with self._lock:
            for fault in self._pending:
                if fault.target in target:
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
