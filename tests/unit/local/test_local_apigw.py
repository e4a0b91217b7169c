"""The local API Gateway builds the HTTP API 2.0 event and answers by API Gateway's rules.

Oracles: Powertools' parser model of the 2.0 event, and the same `APIGatewayHttpResolver` the
webhook routes with.
"""

from __future__ import annotations

import base64
import json
from typing import Any, cast

import pytest
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.utilities.parser.models import APIGatewayProxyEventV2Model
from aws_lambda_powertools.utilities.typing import LambdaContext

from local.apigw import ROUTES, http_api_event, http_response, match_route, route_match
from local.lambda_host import LocalLambdaContext

UPDATE = {"update_id": 5, "message": {"message_id": 1, "date": 1, "chat": {"id": 1, "type": "private"}}}


def event(body: bytes = b"", headers: list[tuple[str, str]] | None = None, query: str = "") -> dict[str, Any]:
    return http_api_event(
        method="POST",
        raw_path="/telegram/webhook",
        raw_query=query,
        headers=headers if headers is not None else [("Content-Type", "application/json")],
        body=body,
        route_key="POST /telegram/webhook",
        request_id="abc123=",
        now=1_700_000_000.5,
    )


def test_event_is_a_valid_http_api_v2_event() -> None:
    raw = json.dumps(UPDATE).encode()
    parsed = APIGatewayProxyEventV2Model.model_validate(
        event(
            raw,
            [("Content-Type", "application/json"), ("X-Telegram-Bot-Api-Secret-Token", "s")],
            "a=1&a=2&b=",
        )
    )

    assert parsed.version == "2.0"
    assert parsed.routeKey == "POST /telegram/webhook"
    assert parsed.rawPath == "/telegram/webhook"
    assert parsed.requestContext.http.method == "POST"
    assert parsed.requestContext.requestId == "abc123="
    assert parsed.requestContext.timeEpoch.timestamp() == pytest.approx(1_700_000_000.5)
    assert parsed.headers is not None and parsed.headers["x-telegram-bot-api-secret-token"] == "s"
    assert parsed.queryStringParameters == {"a": "1,2", "b": ""}
    assert parsed.isBase64Encoded is False
    assert parsed.body == raw.decode()


def test_header_names_are_lowercased_repeats_joined_and_cookies_moved() -> None:
    built = event(b"", [("X-Thing", "1"), ("x-thing", "2"), ("Cookie", "a=1; b=2")])

    assert built["headers"]["x-thing"] == "1,2"
    assert built["cookies"] == ["a=1", "b=2"]
    assert "cookie" not in built["headers"]
    assert "body" not in built  # API Gateway leaves out an empty body


def test_binary_body_arrives_base64_encoded() -> None:
    raw = b"\x00\xffbinary"
    built = event(raw, [("Content-Type", "application/octet-stream")])

    assert built["isBase64Encoded"] is True
    assert base64.b64decode(built["body"]) == raw


def test_only_the_stack_routes_match() -> None:
    assert ROUTES == ("POST /telegram/webhook", "POST /crm/events", "POST /crm/events/{token}")
    assert match_route("post", "/crm/events") == "POST /crm/events"
    assert match_route("GET", "/telegram/webhook") is None
    assert match_route("POST", "/telegram/webhook/") is None


def test_the_token_route_matches_one_non_empty_segment_and_gives_it_as_a_path_parameter() -> None:
    assert route_match("POST", "/crm/events/abc123") == ("POST /crm/events/{token}", {"token": "abc123"})
    assert route_match("POST", "/crm/events/a%2Fb") == ("POST /crm/events/{token}", {"token": "a/b"})
    assert route_match("POST", "/crm/events") == ("POST /crm/events", {})
    for path in ("/crm/events/", "/crm/events/a/b", "/telegram/webhook/abc"):
        assert route_match("POST", path) is None, path
    assert route_match("GET", "/crm/events/abc123") is None


def test_the_event_of_the_token_route_carries_the_route_key_and_path_parameters() -> None:
    built = http_api_event(
        method="POST",
        raw_path="/crm/events/abc123",
        raw_query="",
        headers=[("Content-Type", "application/json")],
        body=b"{}",
        route_key="POST /crm/events/{token}",
        path_parameters={"token": "abc123"},
    )
    parsed = APIGatewayProxyEventV2Model.model_validate(built)

    assert parsed.routeKey == parsed.requestContext.routeKey == "POST /crm/events/{token}"
    assert parsed.pathParameters == {"token": "abc123"}


def test_the_webhooks_resolver_routes_the_event_and_the_answer_comes_back() -> None:
    app = APIGatewayHttpResolver()

    @app.post("/telegram/webhook")
    def webhook() -> Response:
        request = app.current_event
        echoed = {
            "update_id": request.json_body["update_id"],
            "token": request.headers["x-telegram-bot-api-secret-token"],
        }
        return Response(status_code=200, content_type="application/json", body=json.dumps(echoed))

    result = app.resolve(
        event(
            json.dumps(UPDATE).encode(),
            [("Content-Type", "application/json"), ("X-Telegram-Bot-Api-Secret-Token", "t")],
        ),
        cast(LambdaContext, LocalLambdaContext("webhook", 256, 10, "eu-central-1")),
    )
    status, headers, body = http_response(result)

    assert status == 200
    assert headers["content-type"] == "application/json"
    assert json.loads(body) == {"update_id": 5, "token": "t"}


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        # No statusCode: API Gateway answers 200 with the result as JSON.
        ({"ok": True}, (200, {"content-type": "application/json"}, b'{"ok": true}')),
        ("text", (200, {"content-type": "application/json"}, b'"text"')),
        (
            {"statusCode": 201, "headers": {"X-A": "1"}, "body": "aGk=", "isBase64Encoded": True},
            (201, {"x-a": "1"}, b"hi"),
        ),
        ({"statusCode": 204}, (204, {}, b"")),
        (
            {"statusCode": 200, "cookies": ["a=1", "b=2"], "body": "x"},
            (200, {"set-cookie": "a=1, b=2"}, b"x"),
        ),
        (
            {"statusCode": "nope"},
            (500, {"content-type": "application/json"}, b'{"message": "Internal Server Error"}'),
        ),
    ],
)
def test_function_results_become_http_answers_by_payload_2_0_rules(
    result: Any, expected: tuple[int, dict[str, str], bytes]
) -> None:
    assert http_response(result) == expected
