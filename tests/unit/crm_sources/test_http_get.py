"""`JsonHttpClient.get` and `refused` against a real HTTP server on loopback."""

from __future__ import annotations

import pytest

from pipeline.errors import PermanentError, RemoteRefused, TransientError
from pipeline.http import REDACTED, JsonHttpClient
from tests.unit.consumers.conftest import FakeHttpServer, Scripted

TOKEN = "amo-long-lived-token-7f3a9c"


def test_get_sends_no_body_and_returns_the_parsed_answer(http_fake: FakeHttpServer) -> None:
    http_fake.respond(Scripted(200, {"id": 7, "name": "Lead"}))
    client = JsonHttpClient("amocrm lead", secrets=(TOKEN,))

    response = client.get(f"{http_fake.base_url}/api/v4/leads/7?with=contacts", {"Authorization": TOKEN})

    assert (response.status, response.body, response.ok) == (200, {"id": 7, "name": "Lead"}, True)
    [request] = http_fake.requests
    assert (request.method, request.path, request.body) == ("GET", "/api/v4/leads/7?with=contacts", None)
    assert request.headers["authorization"] == TOKEN
    assert request.headers["accept"] == "application/json"
    assert "content-type" not in request.headers and "content-length" not in request.headers


def test_get_returns_a_204_without_body(http_fake: FakeHttpServer) -> None:
    http_fake.respond(Scripted(204, None))

    response = JsonHttpClient("amocrm lead").get(f"{http_fake.base_url}/api/v4/leads/1")

    assert (response.status, response.body, response.ok) == (204, None, True)


def test_get_with_no_answer_in_time_is_transient_and_redacted(http_fake: FakeHttpServer) -> None:
    http_fake.respond(Scripted(200, {"ok": True}, delay_seconds=1.0))
    client = JsonHttpClient("amocrm lead", secrets=(TOKEN,), timeout=0.2)

    with pytest.raises(TransientError) as caught:
        client.get(f"{http_fake.base_url}/{TOKEN}/slow")
    assert caught.value.reason.startswith("amocrm lead: ")
    assert TOKEN not in caught.value.reason


def test_get_does_not_follow_redirects(http_fake: FakeHttpServer) -> None:
    http_fake.respond(Scripted(302, None, {"Location": f"{http_fake.base_url}/elsewhere"}))
    client = JsonHttpClient("amocrm lead")

    response = client.get(f"{http_fake.base_url}/api/v4/leads/1")

    assert response.status == 302
    assert [r.path for r in http_fake.requests] == ["/api/v4/leads/1"]


def test_get_refuses_a_url_that_is_not_http_without_quoting_it() -> None:
    with pytest.raises(PermanentError) as caught:
        JsonHttpClient("amocrm lead", secrets=(TOKEN,)).get(f"ftp://host/{TOKEN}")
    assert TOKEN not in caught.value.reason


def test_refused_is_permanent_redacted_and_carries_its_kind() -> None:
    client = JsonHttpClient("amocrm lead", secrets=(TOKEN,))

    refusal = client.refused(f"HTTP 401 token {TOKEN} revoked", "unauthorized")

    assert isinstance(refusal, PermanentError)
    assert refusal.kind == "unauthorized"
    assert refusal.reason == f"amocrm lead: HTTP 401 token {REDACTED} revoked"


def test_a_refusal_kind_outside_the_three_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="kind must be one of"):
        RemoteRefused("x", "forbidden")
