"""The shared JSON-over-HTTP client against a real HTTP server on loopback."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from pipeline.errors import AccountRefused, PermanentError, TransientError
from pipeline.http import REDACTED, JsonHttpClient
from tests.unit.consumers.conftest import BOT_TOKEN, FakeHttpServer, Scripted


def test_posts_json_with_headers_and_returns_the_parsed_answer(http_fake: FakeHttpServer) -> None:
    http_fake.respond(Scripted(201, {"id": "lead-7"}))
    client = JsonHttpClient("crm webhook")

    response = client.post(f"{http_fake.base_url}/leads", {"name": "Anna", "n": 1}, {"X-Extra": "yes"})

    assert (response.status, response.body, response.ok) == (201, {"id": "lead-7"}, True)
    assert client.check(response) is response
    [request] = http_fake.requests
    assert (request.path, request.body) == ("/leads", {"name": "Anna", "n": 1})
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-extra"] == "yes"


@pytest.mark.parametrize("status", [500, 502, 503, 408])
def test_server_errors_and_request_timeouts_are_transient(http_fake: FakeHttpServer, status: int) -> None:
    http_fake.respond(Scripted(status, {"error": "busy"}))
    client = JsonHttpClient("crm webhook")
    response = client.post(f"{http_fake.base_url}/x", {})

    with pytest.raises(TransientError) as caught:
        client.check(response)
    assert caught.value.reason == f"crm webhook: HTTP {status}"
    assert caught.value.retry_after is None


@pytest.mark.parametrize("status", [400, 403, 404, 422])
def test_other_client_errors_are_permanent_with_the_remote_detail(
    http_fake: FakeHttpServer, status: int
) -> None:
    http_fake.respond(Scripted(status, {"description": "Bad Request: chat not found"}))
    client = JsonHttpClient("telegram sendMessage")
    response = client.post(f"{http_fake.base_url}/x", {})

    with pytest.raises(PermanentError) as caught:
        client.check(response, detail=response.body["description"])
    assert caught.value.reason == f"telegram sendMessage: HTTP {status} Bad Request: chat not found"


def test_401_is_a_refusal_of_the_credential_for_every_call(http_fake: FakeHttpServer) -> None:
    """Not this message's fault: the caller re-reads its secret, else the record pauses."""
    http_fake.respond(Scripted(401, {"ok": False, "error_code": 401, "description": "Unauthorized"}))
    client = JsonHttpClient("telegram sendMessage")
    response = client.post(f"{http_fake.base_url}/x", {})

    with pytest.raises(AccountRefused) as caught:
        client.check(response, detail=response.body["description"])
    assert (caught.value.cause, caught.value.reason) == (
        "unauthorized",
        "telegram sendMessage: HTTP 401 Unauthorized",
    )


@pytest.mark.parametrize(
    ("headers", "body", "expected"),
    [
        ({"Retry-After": "7"}, None, 7.0),
        ({}, {"ok": False, "error_code": 429, "parameters": {"retry_after": 7}}, 7.0),
        # The header wins over the body when both are present.
        ({"Retry-After": "3"}, {"parameters": {"retry_after": 30}}, 3.0),
        ({}, {"description": "Too Many Requests"}, None),
    ],
)
def test_429_carries_the_remote_wait(
    http_fake: FakeHttpServer, headers: dict[str, str], body: object, expected: float | None
) -> None:
    http_fake.respond(Scripted(429, body, headers))
    client = JsonHttpClient("telegram sendMessage")
    response = client.post(f"{http_fake.base_url}/x", {})

    with pytest.raises(TransientError) as caught:
        client.check(response)
    assert caught.value.retry_after == expected


def test_retry_after_as_an_http_date(http_fake: FakeHttpServer) -> None:
    when = datetime.now(UTC) + timedelta(seconds=30)
    http_fake.respond(Scripted(503, None, {"Retry-After": format_datetime(when, usegmt=True)}))
    client = JsonHttpClient("crm webhook")

    with pytest.raises(TransientError) as caught:
        client.check(client.post(f"{http_fake.base_url}/x", {}))
    assert caught.value.retry_after is not None
    assert 27 <= caught.value.retry_after <= 31


def test_an_answer_that_is_not_json_has_no_body_and_is_still_classified(http_fake: FakeHttpServer) -> None:
    http_fake.respond(Scripted(502, raw=b"<html>bad gateway</html>", headers={"Content-Type": "text/html"}))
    client = JsonHttpClient("crm webhook")
    response = client.post(f"{http_fake.base_url}/x", {})

    assert (response.status, response.body) == (502, None)
    with pytest.raises(TransientError, match=r"^crm webhook: HTTP 502$"):
        client.check(response)


def test_no_answer_in_time_is_transient(http_fake: FakeHttpServer) -> None:
    http_fake.respond(Scripted(200, {"ok": True}, delay_seconds=1.0))
    client = JsonHttpClient("crm webhook", timeout=0.2)

    with pytest.raises(TransientError) as caught:
        client.post(f"{http_fake.base_url}/slow", {})
    assert caught.value.reason.startswith("crm webhook: ")
    assert "timed out" in caught.value.reason or "no answer within 0.2s" in caught.value.reason


def test_a_refused_connection_is_transient_and_its_reason_has_no_token() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = JsonHttpClient("telegram sendMessage", secrets=(BOT_TOKEN,))

    with pytest.raises(TransientError) as caught:
        client.post(f"http://127.0.0.1:{port}/bot{BOT_TOKEN}/sendMessage", {})
    assert "connection failed" in caught.value.reason
    assert BOT_TOKEN not in caught.value.reason
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_redirects_are_not_followed(http_fake: FakeHttpServer) -> None:
    http_fake.respond(Scripted(302, None, {"Location": f"{http_fake.base_url}/elsewhere"}))
    client = JsonHttpClient("crm webhook")

    with pytest.raises(PermanentError, match=r"^crm webhook: HTTP 302$"):
        client.check(client.post(f"{http_fake.base_url}/hook", {"lead": 1}))
    assert [r.path for r in http_fake.requests] == ["/hook"]


def test_secrets_are_redacted_from_reasons_even_when_the_remote_echoes_them(
    http_fake: FakeHttpServer,
) -> None:
    http_fake.respond(Scripted(400, {"description": f"Bad Request: token {BOT_TOKEN} rejected"}))
    client = JsonHttpClient("telegram sendMessage", secrets=(BOT_TOKEN,))
    response = client.post(f"{http_fake.base_url}/bot{BOT_TOKEN}/sendMessage", {"chat_id": 1})

    with pytest.raises(PermanentError) as caught:
        client.check(response, detail=response.body["description"])
    assert BOT_TOKEN not in caught.value.reason
    assert f"token {REDACTED} rejected" in caught.value.reason


@pytest.mark.parametrize("url", ["file:///etc/passwd", f"ftp://host/bot{BOT_TOKEN}/x"])
def test_a_url_that_is_not_http_is_refused_without_quoting_it(url: str) -> None:
    client = JsonHttpClient("telegram sendMessage", secrets=(BOT_TOKEN,))
    with pytest.raises(PermanentError) as caught:
        client.post(url, {})
    assert url not in caught.value.reason and BOT_TOKEN not in caught.value.reason
