"""Fault points at moto's door for a query-protocol service (SNS): its target is `<service>.<Action>`
from the signature's scope and the form, its error is the query protocol's XML, the form reaches
moto whole, and `after` lets that many matching requests through first."""

from __future__ import annotations

import io
import json
from typing import Any
from urllib.parse import parse_qs

from local.moto_faults import PATH, FaultyAws

AUTHORIZATION = (
    "AWS4-HMAC-SHA256 Credential=testing/20261206/eu-central-1/sns/aws4_request, SignedHeaders=host"
)


class Backend:
    """moto's stand-in: the Action of each form that reached it."""

    def __init__(self) -> None:
        self.reached: list[str] = []

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0)).decode()
        self.reached.append(parse_qs(body)["Action"][0])
        start_response("200 OK", [("Content-Type", "text/xml")])
        return [b"<PublishResponse/>"]


def publish(app: FaultyAws, action: str = "Publish") -> tuple[int, bytes]:
    raw = f"Action={action}&TopicArn=arn%3Aaws%3Asns%3Aeu-central-1%3A1%3At&Message=hi".encode()
    environ = {
        "PATH_INFO": "/",
        "REQUEST_METHOD": "POST",
        "CONTENT_TYPE": "application/x-www-form-urlencoded; charset=utf-8",
        "CONTENT_LENGTH": str(len(raw)),
        "HTTP_AUTHORIZATION": AUTHORIZATION,
        "wsgi.input": io.BytesIO(raw),
    }
    status: list[int] = []
    answer = b"".join(app(environ, lambda line, headers: status.append(int(line.split()[0]))))
    return status[0], answer


def ask(app: FaultyAws, fault: dict[str, Any]) -> int:
    raw = json.dumps(fault).encode()
    environ = {
        "PATH_INFO": PATH,
        "REQUEST_METHOD": "POST",
        "CONTENT_LENGTH": str(len(raw)),
        "wsgi.input": io.BytesIO(raw),
    }
    status: list[int] = []
    b"".join(app(environ, lambda line, headers: status.append(int(line.split()[0]))))
    return status[0]


def test_an_sns_publish_fails_after_the_first_ones_with_the_query_protocol_s_error() -> None:
    backend = Backend()
    app = FaultyAws(backend)
    assert ask(app, {"target": "sns.Publish", "kind": "error", "count": 2, "after": 2}) == 200

    answers = [publish(app) for _ in range(5)]

    assert [status for status, _ in answers] == [200, 200, 500, 500, 200]
    assert b"<Code>InternalFailure</Code>" in answers[2][1]
    assert backend.reached == ["Publish", "Publish", "Publish"]  # the failed two never reached it
    assert publish(app, "ListTopics")[0] == 200


def test_a_bad_after_is_refused() -> None:
    assert ask(FaultyAws(Backend()), {"target": "sns.Publish", "kind": "error", "after": -1}) == 400
