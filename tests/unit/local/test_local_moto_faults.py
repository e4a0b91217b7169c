"""Fault points at moto's door (`local.moto_faults`): what each kind does to a request."""

from __future__ import annotations

import io
import json
from typing import Any

from local.moto_faults import PATH, FaultyAws


class Backend:
    """A WSGI app standing in for moto: counts the requests that reached it."""

    def __init__(self) -> None:
        self.reached: list[str] = []

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        self.reached.append(environ.get("HTTP_X_AMZ_TARGET", ""))
        start_response("200 OK", [("Content-Type", "application/x-amz-json-1.0")])
        return [b"{}"]


def call(
    app: FaultyAws, target: str = "", path: str = "/", method: str = "POST", body: Any = None
) -> tuple[int, Any]:
    raw = json.dumps(body).encode() if body is not None else b""
    environ = {
        "PATH_INFO": path,
        "REQUEST_METHOD": method,
        "CONTENT_LENGTH": str(len(raw)),
        "wsgi.input": io.BytesIO(raw),
        "HTTP_X_AMZ_TARGET": target,
    }
    status: list[int] = []
    answer = b"".join(app(environ, lambda line, headers: status.append(int(line.split()[0]))))
    return status[0], json.loads(answer)


def test_a_throttle_answers_the_services_throttling_error_and_never_reaches_moto() -> None:
    backend = Backend()
    app = FaultyAws(backend)
    assert call(app, path=PATH, body={"target": "DynamoDB", "kind": "throttle", "count": 2})[0] == 200

    first = call(app, "DynamoDB_20120810.PutItem")
    second = call(app, "DynamoDB_20120810.GetItem")
    third = call(app, "DynamoDB_20120810.GetItem")

    assert first[0] == second[0] == 400
    assert first[1]["__type"].endswith("#ProvisionedThroughputExceededException")
    assert third == (200, {}) and backend.reached == ["DynamoDB_20120810.GetItem"]


def test_a_lost_answer_does_the_request_then_answers_500() -> None:
    backend = Backend()
    app = FaultyAws(backend)
    call(app, path=PATH, body={"target": "DynamoDB_20120810.UpdateItem", "kind": "lost_answer"})

    assert call(app, "AmazonSQS.ReceiveMessage") == (200, {})  # another operation: untouched
    status, body = call(app, "DynamoDB_20120810.UpdateItem")

    assert status == 500 and body["__type"] == "InternalFailure"
    assert backend.reached == ["AmazonSQS.ReceiveMessage", "DynamoDB_20120810.UpdateItem"]
    assert call(app, path=PATH, method="GET")[1]["applied"] == {"DynamoDB_20120810.UpdateItem lost_answer": 1}


def test_an_error_fault_is_cleared_by_delete_and_a_bad_request_is_refused_with_the_reason() -> None:
    backend = Backend()
    app = FaultyAws(backend)
    call(app, path=PATH, body={"target": "AmazonSQS.DeleteMessage", "kind": "error", "count": 3})
    assert call(app, "AmazonSQS.DeleteMessage")[0] == 500
    assert call(app, path=PATH, method="DELETE")[1]["pending"] == []
    assert call(app, "AmazonSQS.DeleteMessage")[0] == 200

    status, body = call(app, path=PATH, body={"target": "DynamoDB", "kind": "explode"})
    assert status == 400 and "kind must be one of" in body["error"]
