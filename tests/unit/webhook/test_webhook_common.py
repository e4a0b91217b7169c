"""Behaviour shared by both routes: size limit, SNS outages, secret rotation and caching, logs,
correlation ids, metrics, unknown routes and unexpected errors."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import pytest
from botocore.exceptions import ClientError, ConnectTimeoutError, EndpointConnectionError, ReadTimeoutError

from pipeline import aws, secrets
from tests.unit.webhook.support import (
    CRM_KEY,
    CRM_ORDER_EVENT,
    CRM_PATH,
    TELEGRAM_PATH,
    TELEGRAM_START,
    TELEGRAM_TOKEN,
    CapturedOutput,
    Invoke,
    Pipeline,
    crm_event,
    http_event,
    leaked,
    load_fixture,
    metrics_emitted,
    oversized_event,
    response_json,
    telegram_event,
    valid_event,
)

ROUTES = [TELEGRAM_PATH, CRM_PATH]
SOURCES = {TELEGRAM_PATH: "telegram", CRM_PATH: "crm"}


@pytest.mark.parametrize("path", ROUTES)
def test_envelope_too_big_for_sns_is_413_with_a_metric(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput, path: str
) -> None:
    response = invoke(oversized_event(path))

    assert response["statusCode"] == 413
    assert response_json(response)["error"] == "oversized"
    assert pipeline.published() == []
    assert pipeline.calls["Publish"] == 0
    assert ("EventsRejected", {"source": SOURCES[path], "reason": "oversized"}) in metrics_emitted(
        output.lines()
    )


def _client_error(**_: Any) -> None:
    raise ClientError({"Error": {"Code": "InternalError", "Message": "SNS is having a bad day"}}, "Publish")


def _unreachable(**_: Any) -> None:
    raise EndpointConnectionError(endpoint_url="https://sns.eu-central-1.amazonaws.com/")


def _read_timeout(**_: Any) -> None:
    raise ReadTimeoutError(endpoint_url="https://sns.eu-central-1.amazonaws.com/")


def _connect_timeout(**_: Any) -> None:
    raise ConnectTimeoutError(endpoint_url="https://sns.eu-central-1.amazonaws.com/")


@pytest.mark.parametrize("failure", [_client_error, _unreachable, _read_timeout, _connect_timeout])
@pytest.mark.parametrize("path", ROUTES)
def test_publish_failure_is_503_and_the_retry_is_published(
    invoke: Invoke,
    pipeline: Pipeline,
    output: CapturedOutput,
    monkeypatch: pytest.MonkeyPatch,
    path: str,
    failure: Any,
) -> None:
    event = valid_event(path)
    with monkeypatch.context() as outage:
        outage.setattr(aws.client("sns"), "publish", failure)
        response = invoke(event)

    assert response["statusCode"] == 503
    assert response_json(response)["error"] == "publish_failed"
    assert pipeline.published() == []
    lines = output.lines()
    [error] = [line for line in CapturedOutput.log_lines(lines) if line["level"] == "ERROR"]
    assert "exception" in error
    assert ("EventsRejected", {"source": SOURCES[path], "reason": "publish_failed"}) in metrics_emitted(lines)
    # The sender retries the same request once SNS is back: nothing was lost.
    assert invoke(event)["statusCode"] == 200
    assert len(pipeline.published()) == 1


def test_publish_to_a_missing_topic_is_503(
    invoke: Invoke, pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVENTS_TOPIC_ARN", pipeline.topic_arn + "-deleted")

    response = invoke(valid_event(TELEGRAM_PATH))

    assert response["statusCode"] == 503
    assert pipeline.published() == []


@pytest.mark.parametrize(
    ("path", "variable"), [(TELEGRAM_PATH, "TELEGRAM_SECRET_ID"), (CRM_PATH, "CRM_SECRET_ID")]
)
def test_unreadable_secret_is_503_and_publishes_nothing(
    invoke: Invoke, pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, path: str, variable: str
) -> None:
    monkeypatch.setenv(variable, "no-such-secret")

    response = invoke(valid_event(path))

    assert response["statusCode"] == 503
    assert response_json(response)["error"] == "secret_unavailable"
    assert pipeline.published() == []


# --- secret rotation -------------------------------------------------------------------------


def _later(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """Move the secrets module's clock forward (the rotation window and the refresh interval)."""
    moved = datetime.now(UTC) + timedelta(seconds=seconds)
    monkeypatch.setattr(secrets, "_now", lambda: moved)


def _update(update_id: int) -> dict[str, Any]:
    update = load_fixture(TELEGRAM_START)
    update["update_id"] = update_id
    return update


def test_previous_telegram_token_accepted_inside_the_window_rejected_after(
    invoke: Invoke, pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    new_token = "tg_rotated-token_1c2d3e4f5a6b7c8d"
    pipeline.rotate(pipeline.telegram_secret_id, new_token)

    assert invoke(telegram_event(_update(1), token=new_token))["statusCode"] == 200
    assert invoke(telegram_event(_update(2), token=TELEGRAM_TOKEN))["statusCode"] == 200

    _later(monkeypatch, 3600 + 1)
    assert invoke(telegram_event(_update(3), token=TELEGRAM_TOKEN))["statusCode"] == 401
    assert invoke(telegram_event(_update(4), token=new_token))["statusCode"] == 200
    assert [p.envelope["payload"]["update_id"] for p in pipeline.published()] == [1, 2, 4]


def test_previous_token_rejected_at_once_with_no_grace(
    invoke: Invoke, pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECRET_ROTATION_GRACE_SECONDS", "0")
    pipeline.rotate(pipeline.telegram_secret_id, "tg_rotated-token_1c2d3e4f5a6b7c8d")

    assert invoke(telegram_event(_update(1), token=TELEGRAM_TOKEN))["statusCode"] == 401
    assert pipeline.published() == []


def test_previous_crm_key_accepted_inside_the_window_rejected_after(
    invoke: Invoke, pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    new_key = "crm-rotated-key-9a8b7c6d5e4f3a2b"
    pipeline.rotate(pipeline.crm_secret_id, new_key)
    event = load_fixture(CRM_ORDER_EVENT)

    assert invoke(crm_event(event, key=new_key))["statusCode"] == 200
    assert invoke(crm_event(event, key=CRM_KEY))["statusCode"] == 200

    _later(monkeypatch, 3600 + 1)
    assert invoke(crm_event(event, key=CRM_KEY))["statusCode"] == 401
    assert invoke(crm_event(event, key=new_key))["statusCode"] == 200
    assert len(pipeline.published()) == 3


def test_warm_path_makes_no_secrets_manager_call(invoke: Invoke, pipeline: Pipeline) -> None:
    for path in ROUTES:
        assert invoke(valid_event(path))["statusCode"] == 200
    # Cold: AWSCURRENT and AWSPREVIOUS of each secret.
    assert pipeline.calls["GetSecretValue"] == 4

    for path in ROUTES * 3:
        assert invoke(valid_event(path))["statusCode"] == 200

    assert pipeline.calls["GetSecretValue"] == 4
    assert pipeline.calls["Publish"] == 8


def test_rotation_after_caching_is_picked_up_by_a_bounded_refresh(
    invoke: Invoke, pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert invoke(telegram_event(_update(1)))["statusCode"] == 200
    new_token = "tg_rotated-token_1c2d3e4f5a6b7c8d"
    pipeline.rotate(pipeline.telegram_secret_id, new_token)
    reads = pipeline.calls["GetSecretValue"]

    # Within a minute of the last read, wrong or newer tokens do not make us call Secrets Manager.
    for update_id in (2, 3, 4):
        assert invoke(telegram_event(_update(update_id), token=new_token))["statusCode"] == 401
    assert pipeline.calls["GetSecretValue"] == reads

    _later(monkeypatch, secrets.REFRESH_ON_MISMATCH_INTERVAL_SECONDS + 1)
    assert invoke(telegram_event(_update(5), token=new_token))["statusCode"] == 200
    assert pipeline.calls["GetSecretValue"] == reads + 2
    assert [p.envelope["payload"]["update_id"] for p in pipeline.published()] == [1, 5]


# --- logs, correlation ids, metrics ----------------------------------------------------------


def test_logs_and_responses_never_contain_secrets_or_phone_numbers(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput
) -> None:
    wrong_token = "tg_guessed-token_00000000deadbeef"
    crm_payload = load_fixture(CRM_ORDER_EVENT)
    bad_phone_payload = {**crm_payload, "customer": {"phone": "+0123456789", "name": "X"}}
    events = [
        telegram_event(_update(1)),
        telegram_event(_update(2), token=wrong_token),
        telegram_event("not json"),
        crm_event(crm_payload),
        crm_event(crm_payload, key="guessed-crm-key-0000"),
        crm_event(bad_phone_payload),
        oversized_event(TELEGRAM_PATH),
    ]
    bodies = [invoke(event)["body"] for event in events]

    text = output.text() + "\n".join(bodies)
    assert text.count('"level"') >= len(events)  # there were logs to check
    assert (
        leaked(
            text,
            telegram_token=TELEGRAM_TOKEN,
            wrong_token=wrong_token,
            crm_key=CRM_KEY,
            guessed_crm_key="guessed-crm-key-0000",
            customer_phone=crm_payload["customer"]["phone"],
            bad_phone="+0123456789",
        )
        == []
    )


@pytest.mark.parametrize("path", ROUTES)
def test_every_log_line_of_a_request_carries_its_correlation_id(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput, path: str
) -> None:
    cases = [
        (valid_event(path), None),  # accepted
        (http_event(path, body="{}", headers={"x-telegram-bot-api-secret-token": "wrong"}), None),  # 401
        (valid_event(path), "trace-7f3a_from-crm:42"),  # caller's id
    ]
    for index, (event, incoming) in enumerate(cases):
        event["requestContext"]["requestId"] = f"request-{index}"
        if incoming:
            event["headers"]["x-correlation-id"] = incoming
        expected = incoming or f"request-{index}"

        response = invoke(event)

        logs = CapturedOutput.log_lines(output.lines())
        assert logs, "each request logs at least one line"
        assert {line.get("correlation_id") for line in logs} == {expected}
        assert response["headers"]["X-Correlation-Id"] == expected
    assert [p.envelope["correlation_id"] for p in pipeline.published()] == [
        "request-0",
        "trace-7f3a_from-crm:42",
    ]


@pytest.mark.parametrize("incoming", ["", "has space", "x" * 200, "line\nbreak", "-starts-with-dash"])
def test_unsafe_incoming_correlation_id_is_replaced_by_the_request_id(
    invoke: Invoke, pipeline: Pipeline, incoming: str
) -> None:
    event = valid_event(TELEGRAM_PATH)
    event["headers"]["x-correlation-id"] = incoming
    event["requestContext"]["requestId"] = "api-request-1"

    response = invoke(event)

    assert response["headers"]["X-Correlation-Id"] == "api-request-1"
    assert [p.envelope["correlation_id"] for p in pipeline.published()] == ["api-request-1"]


@pytest.mark.parametrize(
    ("event", "metric"),
    [
        (lambda: valid_event(TELEGRAM_PATH), ("EventsAccepted", {"source": "telegram", "type": "message"})),
        (
            lambda: valid_event(CRM_PATH),
            ("EventsAccepted", {"source": "crm", "type": "order.status_changed"}),
        ),
        (
            lambda: telegram_event(_update(1), token="x"),
            ("EventsRejected", {"source": "telegram", "reason": "unauthorized"}),
        ),
        (lambda: telegram_event("[]"), ("EventsRejected", {"source": "telegram", "reason": "invalid"})),
        (lambda: crm_event({"event_id": "e"}), ("EventsRejected", {"source": "crm", "reason": "invalid"})),
        (lambda: http_event("/nope"), ("EventsRejected", {"source": "none", "reason": "not_found"})),
    ],
    ids=["telegram-accepted", "crm-accepted", "unauthorized", "invalid", "crm-invalid", "not-found"],
)
def test_each_request_emits_exactly_one_metric(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput, event: Any, metric: tuple[str, dict[str, str]]
) -> None:
    invoke(event())

    assert metrics_emitted(output.lines()) == [metric]


# --- routing and unexpected errors -----------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "method"),
    [
        ("/telegram/other", "POST"),
        ("/", "POST"),
        (TELEGRAM_PATH, "GET"),
        (CRM_PATH, "PUT"),
        (CRM_PATH, "DELETE"),
    ],
)
def test_unknown_route_or_method_is_404_and_publishes_nothing(
    invoke: Invoke, pipeline: Pipeline, path: str, method: str
) -> None:
    event = valid_event(TELEGRAM_PATH)
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["requestContext"]["http"]["method"] = method

    response = invoke(event)

    # Powertools' resolver answers 404 for a known path with another method too (it has no 405).
    assert response["statusCode"] == 404
    assert response_json(response)["error"] == "not_found"
    assert pipeline.published() == []


def test_unexpected_error_is_500_json_with_a_stack_trace_in_the_log(
    invoke: Invoke,
    pipeline: Pipeline,
    output: CapturedOutput,
    webhook: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(_: Any) -> str:
        raise RuntimeError("bug in update_type")

    monkeypatch.setattr(webhook.ingest.telegram, "update_type", broken)

    response = invoke(valid_event(TELEGRAM_PATH))

    assert response["statusCode"] == 500
    assert response_json(response) == {"ok": False, "error": "internal_error", "message": "Internal error"}
    assert pipeline.published() == []
    [error] = [line for line in CapturedOutput.log_lines(output.lines()) if line["level"] == "ERROR"]
    assert "RuntimeError: bug in update_type" in error["exception"]
    assert "Traceback" in error["exception"]
    assert error["correlation_id"]


@pytest.mark.parametrize("path", ROUTES)
def test_error_while_checking_the_secret_never_publishes(
    invoke: Invoke, pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    def broken(*_: Any, **__: Any) -> None:
        raise RuntimeError("secret check exploded")

    monkeypatch.setattr(secrets, "check_with_refresh", broken)

    response = invoke(valid_event(path))

    assert response["statusCode"] == 500
    assert pipeline.published() == []
    assert pipeline.calls["Publish"] == 0


def test_response_is_json(invoke: Invoke, pipeline: Pipeline) -> None:
    response = invoke(valid_event(TELEGRAM_PATH))

    assert response["headers"]["Content-Type"] == "application/json"
    assert json.loads(response["body"])["ok"] is True
