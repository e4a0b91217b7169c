"""TELEGRAM_IP_ALLOWLIST: the optional source-IP check of the Telegram route.

HTTP APIs have no resource policies, so the webhook itself refuses Telegram-route calls from
outside the listed networks (the stack sets Telegram's ranges when `telegram_ip_allowlist` is
on), before it reads any secret or publishes anything. Empty means no IP check.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.webhook.support import (
    CRM_ORDER_EVENT,
    TELEGRAM_START,
    CapturedOutput,
    Invoke,
    Pipeline,
    crm_event,
    load_fixture,
    metrics_emitted,
    response_json,
    telegram_event,
)

# What the stack sets (infra.settings.TELEGRAM_CIDRS).
TELEGRAM_RANGES = "149.154.160.0/20,91.108.4.0/22"


def _from(event: dict[str, Any], source_ip: str) -> dict[str, Any]:
    event["requestContext"]["http"]["sourceIp"] = source_ip
    return event


@pytest.fixture
def allowlist(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_IP_ALLOWLIST", TELEGRAM_RANGES)


@pytest.mark.parametrize("source_ip", ["149.154.167.220", "149.154.160.1", "91.108.6.50"])
def test_a_call_from_telegrams_networks_is_accepted(
    allowlist: None, invoke: Invoke, pipeline: Pipeline, source_ip: str
) -> None:
    response = invoke(_from(telegram_event(load_fixture(TELEGRAM_START)), source_ip))

    assert response["statusCode"] == 200
    assert len(pipeline.published()) == 1


@pytest.mark.parametrize("source_ip", ["203.0.113.7", "149.154.176.1", "91.108.8.1", "2001:db8::1"])
def test_a_call_from_elsewhere_is_403_before_any_secret_is_read_and_publishes_nothing(
    allowlist: None, invoke: Invoke, pipeline: Pipeline, output: CapturedOutput, source_ip: str
) -> None:
    # Even with the right secret token: the network is checked first.
    response = invoke(_from(telegram_event(load_fixture(TELEGRAM_START)), source_ip))

    assert response["statusCode"] == 403
    assert response_json(response)["error"] == "forbidden_ip"
    assert pipeline.published() == []
    assert pipeline.calls["Publish"] == 0
    assert pipeline.calls["GetSecretValue"] == 0
    lines = output.lines()
    [warning] = [line for line in CapturedOutput.log_lines(lines) if line["level"] == "WARNING"]
    assert (warning["reason"], warning["detail"]) == ("forbidden_ip", source_ip)
    assert ("EventsRejected", {"source": "telegram", "reason": "forbidden_ip"}) in metrics_emitted(lines)


def test_without_an_allowlist_any_caller_with_the_token_is_accepted(
    invoke: Invoke, pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TELEGRAM_IP_ALLOWLIST", "")
    response = invoke(_from(telegram_event(load_fixture(TELEGRAM_START)), "203.0.113.7"))

    assert response["statusCode"] == 200
    assert len(pipeline.published()) == 1


def test_the_crm_route_is_not_limited_to_telegrams_networks(
    allowlist: None, invoke: Invoke, pipeline: Pipeline
) -> None:
    response = invoke(_from(crm_event(load_fixture(CRM_ORDER_EVENT)), "203.0.113.7"))

    assert response["statusCode"] == 200
    assert len(pipeline.published()) == 1
