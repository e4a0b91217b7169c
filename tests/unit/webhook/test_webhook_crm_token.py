"""POST /crm/events with a static token (`crm_auth` token / signature_or_token): senders that cannot sign.

The token is presented as `Authorization: Bearer <token>`, `X-Crm-Token: <token>` or in the URL
path (`POST /crm/events/<token>`), compared in constant time with the `crm_token` secret
(AWSCURRENT, and AWSPREVIOUS during the rotation grace period), and never shown anywhere.
"""

from __future__ import annotations

import hmac
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import pytest

from pipeline import secrets
from pipeline.envelope import Envelope
from tests.unit.webhook.support import (
    CRM_ORDER_EVENT,
    CRM_TOKEN,
    CapturedOutput,
    Invoke,
    Pipeline,
    assert_crm_unauthorized,
    crm_event,
    crm_token_event,
    leaked,
    load_fixture,
    response_json,
)

PLACES = ["bearer", "header", "path"]
TOKEN_MODES = ["token", "signature_or_token"]
ROTATED_TOKEN = "crmRotated9b8C7d6E5f4A3b2C1d0E9f8A7b6C5d4E"


@pytest.fixture
def crm_auth(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Set the deployment's `crm_auth` (the CRM_AUTH variable the stack gives the webhook)."""

    def set_mode(mode: str) -> None:
        monkeypatch.setenv("CRM_AUTH", mode)

    return set_mode


def _event(event_id: str = "evt-token-1") -> dict[str, Any]:
    event = load_fixture(CRM_ORDER_EVENT)
    event["event_id"] = event_id
    return event


@pytest.mark.parametrize("mode", TOKEN_MODES)
@pytest.mark.parametrize("where", PLACES)
def test_the_token_is_accepted_and_the_event_published_once(
    invoke: Invoke, pipeline: Pipeline, crm_auth: Any, mode: str, where: str
) -> None:
    crm_auth(mode)
    event = _event()

    response = invoke(crm_token_event(event, where=where))

    assert response["statusCode"] == 200
    assert response_json(response) == {"ok": True, "event_id": f"crm:{event['event_id']}"}
    [published] = pipeline.published()
    envelope = Envelope.parse(published.envelope)
    assert (envelope.event_id, envelope.source) == (f"crm:{event['event_id']}", "crm")
    assert envelope.payload == event
    assert published.attributes["status"] == event["order"]["status"]


@pytest.mark.parametrize("where", PLACES)
def test_a_wrong_token_is_401_and_publishes_nothing(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput, crm_auth: Any, where: str
) -> None:
    crm_auth("signature_or_token")

    response = invoke(crm_token_event(_event(), token=CRM_TOKEN[:-1] + "x", where=where))

    assert_crm_unauthorized(response, pipeline, output, "mismatch")


@pytest.mark.parametrize(
    "headers",
    [{}, {"authorization": "Bearer "}, {"x-crm-token": ""}, {"authorization": f"Basic {CRM_TOKEN}"}],
    ids=["none", "empty-bearer", "empty-header", "other-scheme"],
)
def test_a_missing_token_is_401_in_token_mode(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput, crm_auth: Any, headers: dict[str, str]
) -> None:
    crm_auth("token")
    event = crm_token_event(_event(), token=None)
    event["headers"].update(headers)

    response = invoke(event)

    assert_crm_unauthorized(response, pipeline, output, "missing")


@pytest.mark.parametrize("where", PLACES)
def test_the_token_is_refused_when_the_deployment_accepts_only_signatures(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput, where: str
) -> None:
    # No CRM_AUTH: the stack's default, signatures only.
    response = invoke(crm_token_event(_event(), where=where))

    assert_crm_unauthorized(response, pipeline, output, "token_disabled")


def test_a_signature_is_refused_when_the_deployment_accepts_only_the_token(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput, crm_auth: Any
) -> None:
    crm_auth("token")

    response = invoke(crm_event(_event()))

    assert_crm_unauthorized(response, pipeline, output, "signature_disabled")


def test_either_is_accepted_with_signature_or_token_and_a_signed_request_is_judged_by_its_signature(
    invoke: Invoke, pipeline: Pipeline, crm_auth: Any
) -> None:
    crm_auth("signature_or_token")

    assert invoke(crm_event(_event("evt-signed")))["statusCode"] == 200
    assert invoke(crm_token_event(_event("evt-token")))["statusCode"] == 200
    # A valid signature next to a wrong token: the signature decides.
    signed = crm_event(_event("evt-both"), headers={"x-crm-token": "not-the-token"})
    assert invoke(signed)["statusCode"] == 200

    assert [p.envelope["event_id"] for p in pipeline.published()] == [
        "crm:evt-signed",
        "crm:evt-token",
        "crm:evt-both",
    ]


def _later(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    moved = datetime.now(UTC) + timedelta(seconds=seconds)
    monkeypatch.setattr(secrets, "_now", lambda: moved)


@pytest.mark.parametrize("where", ["bearer", "path"])
def test_the_previous_token_is_accepted_inside_the_grace_period_and_refused_after(
    invoke: Invoke, pipeline: Pipeline, crm_auth: Any, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    crm_auth("token")
    pipeline.rotate(pipeline.crm_token_secret_id, ROTATED_TOKEN)

    assert invoke(crm_token_event(_event("evt-1"), token=ROTATED_TOKEN, where=where))["statusCode"] == 200
    assert invoke(crm_token_event(_event("evt-2"), token=CRM_TOKEN, where=where))["statusCode"] == 200

    _later(monkeypatch, 3600 + 1)
    assert invoke(crm_token_event(_event("evt-3"), token=CRM_TOKEN, where=where))["statusCode"] == 401
    assert invoke(crm_token_event(_event("evt-4"), token=ROTATED_TOKEN, where=where))["statusCode"] == 200
    assert [p.envelope["event_id"] for p in pipeline.published()] == ["crm:evt-1", "crm:evt-2", "crm:evt-4"]


def test_the_token_is_compared_in_constant_time(
    invoke: Invoke, pipeline: Pipeline, crm_auth: Any, monkeypatch: pytest.MonkeyPatch, webhook: ModuleType
) -> None:
    crm_auth("token")
    compared: list[bool] = []
    original = hmac.compare_digest

    def compare_digest(given: bytes, expected: bytes) -> bool:
        compared.append(True)
        return original(given, expected)

    ingest = webhook.ingest
    monkeypatch.setattr(ingest.hmac, "compare_digest", compare_digest)

    assert invoke(crm_token_event(_event()))["statusCode"] == 200
    assert compared, "the token must be compared with hmac.compare_digest"


def test_the_token_never_appears_in_logs_responses_or_errors(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput, crm_auth: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    near_miss = CRM_TOKEN[:-1] + "x"
    invalid = _event("evt-invalid")
    invalid["order"].pop("status")
    responses = []
    crm_auth("signature_or_token")
    for where in PLACES:
        responses.append(invoke(crm_token_event(_event(f"evt-{where}"), where=where)))
        responses.append(invoke(crm_token_event(_event(), token=near_miss, where=where)))
        responses.append(invoke(crm_token_event(invalid, where=where)))
    monkeypatch.setenv("CRM_AUTH", "signature")
    responses.append(invoke(crm_token_event(_event(), where="path")))

    assert [r["statusCode"] for r in responses] == [200, 401, 422] * len(PLACES) + [401]
    text = output.text()
    assert "Request rejected" in text and "Event published" in text, "the logs hold the run"
    shown = text + "".join(r["body"] for r in responses) + "".join(str(r.get("headers")) for r in responses)
    assert leaked(shown, token=CRM_TOKEN, near_miss=near_miss) == []
