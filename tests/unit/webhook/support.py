"""Test helpers of the webhook: event factories, constants, and readers of what was published/printed.

A plain module (not the conftest) so test modules import it under one name.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pipeline import aws
from pipeline.crm import contract

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
TELEGRAM_FIXTURES = sorted((FIXTURES / "telegram").glob("*.json"))
# Every Telegram fixture must be a valid Bot API update; the CRM folder also holds other kinds.
CRM_ORDER_FIXTURES = sorted((FIXTURES / "crm").glob("order_*.json"))
CRM_ORDER_EVENT = FIXTURES / "crm" / "order_status_changed.json"
TELEGRAM_START = FIXTURES / "telegram" / "private_start.json"

BOT_ID = "testbot"
TELEGRAM_TOKEN = "tg_Secret-Token_8f3a2c91d4e6b7a0"
CRM_KEY = "crm-signing-key-6b1e9d04a7c35f28"
# The static CRM token (A-Za-z0-9, as the stack generates it).
CRM_TOKEN = "crmToken4f7A1c9E2b8D6a0F3e5C7b9A1d3F5e7G9h"
TELEGRAM_PATH = "/telegram/webhook"
CRM_PATH = "/crm/events"
TOKEN_HEADER = "x-telegram-bot-api-secret-token"

Invoke = Callable[[dict[str, Any]], dict[str, Any]]


def load_fixture(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def http_event(
    path: str = TELEGRAM_PATH,
    *,
    method: str = "POST",
    body: str | bytes | None = None,
    headers: dict[str, str] | None = None,
    base64_encoded: bool = False,
    request_id: str | None = None,
) -> dict[str, Any]:
    """An API Gateway HTTP API payload-2.0 event as API Gateway sends it (header names lowercased)."""
    if isinstance(body, bytes):
        body, base64_encoded = base64.b64encode(body).decode(), True
    request_id = request_id or f"{uuid.uuid4().hex[:16]}="
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": "",
        "headers": {
            "content-type": "application/json",
            "host": "abc123.execute-api.eu-central-1.amazonaws.com",
            "user-agent": "test",
            **{name.lower(): value for name, value in (headers or {}).items()},
        },
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "abc123",
            "domainName": "abc123.execute-api.eu-central-1.amazonaws.com",
            "domainPrefix": "abc123",
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "149.154.167.220",
                "userAgent": "test",
            },
            "requestId": request_id,
            "routeKey": "$default",
            "stage": "$default",
            "time": "15/Jan/2026:09:30:12 +0000",
            "timeEpoch": 1768469412000,
        },
        "body": body,
        "isBase64Encoded": base64_encoded,
    }


def telegram_event(update: Any, token: str | None = TELEGRAM_TOKEN, **kwargs: Any) -> dict[str, Any]:
    headers = dict(kwargs.pop("headers", None) or {})
    if token is not None:
        headers[TOKEN_HEADER] = token
    body = update if isinstance(update, str | bytes) else json.dumps(update)
    return http_event(TELEGRAM_PATH, body=body, headers=headers, **kwargs)


def crm_event(
    payload: Any, key: str | None = CRM_KEY, timestamp: int | None = None, **kwargs: Any
) -> dict[str, Any]:
    raw = (
        payload
        if isinstance(payload, bytes)
        else (payload if isinstance(payload, str) else json.dumps(payload))
    )
    raw_bytes = raw.encode() if isinstance(raw, str) else raw
    headers = dict(kwargs.pop("headers", None) or {})
    if key is not None:
        headers["x-signature"] = contract.sign(key, raw_bytes, timestamp)
    return http_event(CRM_PATH, body=raw, headers=headers, **kwargs)


def crm_token_event(payload: Any, token: str | None = CRM_TOKEN, *, where: str = "bearer") -> dict[str, Any]:
    """An unsigned CRM event presenting `token`: `where` is "bearer" (Authorization), "header"
    (X-Crm-Token) or "path" (POST /crm/events/<token>, with pathParameters as API Gateway sends)."""
    body = payload if isinstance(payload, str) else json.dumps(payload)
    headers: dict[str, str] = {}
    if token is not None and where == "bearer":
        headers["authorization"] = f"Bearer {token}"
    elif token is not None and where == "header":
        headers[contract.TOKEN_HEADER] = token
    if where != "path" or token is None:
        return http_event(CRM_PATH, body=body, headers=headers)
    event = http_event(f"{CRM_PATH}/{token}", body=body)
    event["routeKey"] = event["requestContext"]["routeKey"] = f"POST {CRM_PATH}/{{token}}"
    event["pathParameters"] = {"token": token}
    return event


@dataclass
class Published:
    envelope: dict[str, Any]
    attributes: dict[str, str]


@dataclass
class Pipeline:
    """The moto resources the webhook talks to, and a way to read what reached the queue."""

    topic_arn: str
    queue_url: str
    telegram_secret_id: str
    crm_secret_id: str
    calls: Counter[str]
    crm_token_secret_id: str = ""
    # The parameters of every Publish call, in order (MessageGroupId, MessageDeduplicationId...).
    publishes: list[dict[str, Any]] = field(default_factory=list)

    def published(self) -> list[Published]:
        sqs = aws.client("sqs")
        messages: list[Published] = []
        while True:
            batch = sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10).get("Messages", [])
            if not batch:
                return messages
            for message in batch:
                notification = json.loads(message["Body"])
                attributes = {k: v["Value"] for k, v in notification.get("MessageAttributes", {}).items()}
                messages.append(Published(json.loads(notification["Message"]), attributes))
                sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])

    def rotate(self, secret_id: str, new_value: str) -> None:
        aws.client("secretsmanager").put_secret_value(SecretId=secret_id, SecretString=new_value)


def response_json(response: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(response["body"])
    return body


@dataclass
class CapturedOutput:
    capsys: pytest.CaptureFixture[str]

    def text(self) -> str:
        captured = self.capsys.readouterr()
        return captured.out + captured.err

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.text().splitlines() if line.startswith("{")]

    @staticmethod
    def log_lines(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [line for line in lines if "level" in line]

    @staticmethod
    def metric_lines(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [line for line in lines if "_aws" in line]


def metrics_emitted(lines: list[dict[str, Any]]) -> list[tuple[str, dict[str, str]]]:
    """(metric name, dimensions) of every EMF metric in `lines`, service dimension left out."""
    found: list[tuple[str, dict[str, str]]] = []
    for line in CapturedOutput.metric_lines(lines):
        for directive in line["_aws"]["CloudWatchMetrics"]:
            dimensions = {name: line[name] for names in directive["Dimensions"] for name in names}
            dimensions.pop("service", None)
            found.extend((metric["Name"], dimensions) for metric in directive["Metrics"])
    return found


def leaked(text: str, **secret_values: str) -> list[str]:
    """Names (never values) of the secrets that occur in `text`: safe in an assertion message."""
    return [name for name, value in secret_values.items() if value in text]


def valid_event(path: str) -> dict[str, Any]:
    """A request each route accepts: a Telegram /start, a signed CRM status change."""
    if path == TELEGRAM_PATH:
        return telegram_event(load_fixture(TELEGRAM_START))
    return crm_event(load_fixture(CRM_ORDER_EVENT))


def oversized_event(path: str) -> dict[str, Any]:
    """A correctly authenticated request whose envelope exceeds the SNS size limit."""
    padding = "x" * 300_000
    if path == TELEGRAM_PATH:
        update = load_fixture(TELEGRAM_START)
        update["message"]["text"] = "/start " + padding
        return telegram_event(update)
    event = load_fixture(CRM_ORDER_EVENT)
    event["order"]["notes"] = padding
    return crm_event(event)


def assert_crm_unauthorized(
    response: dict[str, Any], pipeline: Pipeline, output: CapturedOutput, detail: str
) -> None:
    """A CRM request refused as the webhook refuses them: 401, nothing published, one warning
    with `detail`, and the `EventsRejected{source=crm, reason=unauthorized}` metric."""
    assert response["statusCode"] == 401
    assert response_json(response)["error"] == "unauthorized"
    assert pipeline.published() == []
    lines = output.lines()
    [warning] = [line for line in CapturedOutput.log_lines(lines) if line["level"] == "WARNING"]
    assert warning["detail"] == detail
    assert ("EventsRejected", {"source": "crm", "reason": "unauthorized"}) in metrics_emitted(lines)
