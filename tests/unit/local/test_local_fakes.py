"""The local fakes answer like the real services and take the faults users rehearse with.

Where the project has a client for a service, the client is the oracle: the fake's answers and
faults must be classified by it exactly as the real service's would be.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from ai.extraction import parse_extraction
from aiogram.types import Message
from botocore.config import Config
from botocore.exceptions import ClientError
from crm.leads import Lead
from crm.sinks import Bitrix24Config, Bitrix24Sink, WebhookConfig, WebhookSink

from local.fakes.base import FakeService
from local.fakes.bedrock import BedrockFake
from local.fakes.crm import CrmFake
from local.fakes.sms import SmsGatewayFake
from local.fakes.telegram import DEFAULT_BOT_TOKEN, TelegramFake
from pipeline.bot_api import BotApi
from pipeline.errors import AccountRefused, PermanentError, TransientError
from pipeline.http import JsonHttpClient
from pipeline.sms.gateways import (
    GatewayOutcomeUnknown,
    GatewayRefused,
    HttpGateway,
    LookupStatus,
    OutgoingSms,
)

MODEL_ID = "anthropic.claude-3-haiku-20240307-v1:0"


def request(
    fake: FakeService,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = 5,
) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(  # noqa: S310 - the fake's http URL
        f"{fake.url}{path}",
        data=data,
        method=method,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:  # noqa: S310 - the fake's http URL
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


@pytest.fixture
def telegram() -> Iterator[TelegramFake]:
    with TelegramFake() as fake:
        yield fake  # type: ignore[misc]


@pytest.fixture
def crm() -> Iterator[CrmFake]:
    with CrmFake() as fake:
        yield fake  # type: ignore[misc]


@pytest.fixture
def bedrock() -> Iterator[BedrockFake]:
    with BedrockFake() as fake:
        yield fake  # type: ignore[misc]


@pytest.fixture
def sms() -> Iterator[SmsGatewayFake]:
    with SmsGatewayFake(token=None) as fake:
        yield fake  # type: ignore[misc]


def bot(fake: TelegramFake) -> BotApi:
    return BotApi(DEFAULT_BOT_TOKEN, base_url=fake.url)


def lead(event_id: str = "telegram:default:7") -> Lead:
    return Lead(
        event_id=event_id,
        trigger="start",
        telegram_user_id=42,
        chat_id=42,
        first_name="Ann",
        text="/start",
    )


# -- Telegram -----------------------------------------------------------------------------------------
def test_send_message_returns_a_message_aiogram_accepts(telegram: TelegramFake) -> None:
    result = bot(telegram).call("sendMessage", {"chat_id": 42, "text": "Hello"})

    message = Message.model_validate(result)
    assert message.chat.id == 42
    assert message.text == "Hello"
    assert message.from_user is not None and message.from_user.is_bot


def test_wrong_token_is_unauthorized_like_telegram(telegram: TelegramFake) -> None:
    status, body = request(telegram, "POST", "/bot999:wrong-token-wrong-token-x/getMe", {})

    assert status == 401
    assert body == {"ok": False, "error_code": 401, "description": "Unauthorized"}


def test_empty_text_is_a_bad_request_the_client_dead_letters(telegram: TelegramFake) -> None:
    with pytest.raises(PermanentError, match="message text is empty"):
        bot(telegram).call("sendMessage", {"chat_id": 42, "text": " "})


def test_calls_are_recorded_without_token_or_auth_headers(telegram: TelegramFake) -> None:
    bot(telegram).call("sendMessage", {"chat_id": 42, "text": "Hi"})
    request(telegram, "POST", "/_calls", None)  # control paths are not recorded

    status, calls = request(telegram, "GET", "/_calls")

    assert status == 200
    assert [call["path"] for call in calls] == ["/bot<token>/sendMessage"]
    assert calls[0]["body"] == {"chat_id": 42, "text": "Hi"}
    assert DEFAULT_BOT_TOKEN not in json.dumps(calls)


def test_fail_next_fails_that_many_calls_then_recovers(telegram: TelegramFake) -> None:
    assert request(telegram, "POST", "/_faults", {"fail_next": 2, "status": 502})[0] == 200

    for _ in range(2):
        with pytest.raises(TransientError, match="HTTP 502"):
            bot(telegram).call("getMe", {})
    assert bot(telegram).call("getMe", {})["is_bot"] is True
    assert [call["fault"] for call in telegram.calls()] == ["fail", "fail", None]


def test_rate_limit_carries_retry_after_in_telegrams_shape(telegram: TelegramFake) -> None:
    request(telegram, "POST", "/_faults", {"rate_limit_next": 1, "retry_after": 7})

    status, body = request(
        telegram, "POST", f"/bot{DEFAULT_BOT_TOKEN}/sendMessage", {"chat_id": 1, "text": "x"}
    )
    assert (status, body["parameters"]) == (429, {"retry_after": 7})

    request(telegram, "POST", "/_faults", {"rate_limit_next": 1, "retry_after": 7})
    with pytest.raises(TransientError) as raised:
        bot(telegram).call("sendMessage", {"chat_id": 1, "text": "x"})
    assert raised.value.retry_after == 7


def test_faults_aim_at_matching_paths_only(telegram: TelegramFake) -> None:
    request(telegram, "POST", "/_faults", {"fail_next": 1, "match": "answerCallbackQuery"})

    assert bot(telegram).call("sendMessage", {"chat_id": 1, "text": "x"})["text"] == "x"
    with pytest.raises(TransientError):
        bot(telegram).call("answerCallbackQuery", {"callback_query_id": "1"})


def test_delete_faults_clears_pending_faults(telegram: TelegramFake) -> None:
    request(telegram, "POST", "/_faults", {"fail_next": 5})
    assert request(telegram, "GET", "/_faults")[1]["pending"][0]["remaining"] == 5

    status, state = request(telegram, "DELETE", "/_faults")

    assert status == 200 and state["pending"] == []
    assert bot(telegram).call("getMe", {})["is_bot"] is True


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"fail_nxt": 1}, "unknown keys"),
        ({"fail_next": 0}, "fail_next must be a number >= 1"),
        ({"fail_next": 1, "status": 200}, "HTTP error status"),
        ({"status": 500}, "no fault given"),
        ([1], "expected a JSON object"),
    ],
)
def test_a_fault_request_it_cannot_follow_is_refused_with_the_reason(
    telegram: TelegramFake, document: Any, message: str
) -> None:
    status, body = request(telegram, "POST", "/_faults", document)

    assert status == 400
    assert message in body["error"]
    assert request(telegram, "GET", "/_faults")[1]["pending"] == []


def test_hang_next_outlasts_the_client_timeout(telegram: TelegramFake) -> None:
    request(telegram, "POST", "/_faults", {"hang_next": 1, "seconds": 2})
    started = time.monotonic()

    client = JsonHttpClient("telegram getMe", timeout=0.5)

    with pytest.raises(TransientError, match=r"no answer|timed out"):
        client.post(f"{telegram.url}/bot{DEFAULT_BOT_TOKEN}/getMe", {})

    assert 0.4 < time.monotonic() - started < 1.9
    assert telegram.calls()[0]["fault"] == "hang"


def test_down_for_refuses_connections_then_comes_back(telegram: TelegramFake) -> None:
    assert request(telegram, "POST", "/_faults", {"down_for": 1})[0] == 200
    time.sleep(0.3)

    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", telegram.port), timeout=1).close()
    with pytest.raises(TransientError, match="connection failed"):
        bot(telegram).call("getMe", {})

    deadline = time.monotonic() + 3
    while telegram.is_down and time.monotonic() < deadline:
        time.sleep(0.05)
    assert bot(telegram).call("getMe", {})["is_bot"] is True


def test_clear_faults_in_process_ends_a_downtime_early(telegram: TelegramFake) -> None:
    telegram.go_down(60)
    telegram.clear_faults()

    assert bot(telegram).call("getMe", {})["is_bot"] is True


# -- CRM ---------------------------------------------------------------------------------------------
def test_webhook_sink_creates_a_lead_and_the_auth_header_is_not_recorded(crm: CrmFake) -> None:
    sink = WebhookSink(WebhookConfig(kind="webhook", url=crm.leads_url(), auth_header="Bearer local"))

    lead_id = sink.push(lead())

    assert lead_id == "lead-1"
    call = crm.calls()[0]
    assert call["headers"]["idempotency-key"] == "telegram:default:7"
    assert "authorization" not in call["headers"]
    assert call["body"]["telegram_user_id"] == 42


def test_wrong_auth_header_is_a_refusal_of_the_credential_not_of_the_lead(crm: CrmFake) -> None:
    """Every lead alike: the crm consumer re-reads its secret, then pauses (pipeline.worker)."""
    sink = WebhookSink(WebhookConfig(kind="webhook", url=crm.leads_url(), auth_header="Bearer nope"))

    with pytest.raises(AccountRefused, match="HTTP 401") as caught:
        sink.push(lead())
    assert caught.value.cause == "unauthorized"


def test_dropped_answer_still_creates_the_lead_and_the_retry_gets_the_same_one(crm: CrmFake) -> None:
    sink = WebhookSink(WebhookConfig(kind="webhook", url=crm.leads_url(), auth_header="Bearer local"))
    request(crm, "POST", "/_faults", {"drop_answer_next": 1})

    with pytest.raises(TransientError, match="connection failed"):
        sink.push(lead())
    assert sink.push(lead()) == "lead-1"  # the Idempotency-Key finds the lead the lost answer created

    assert [call["fault"] for call in crm.calls()] == ["drop_answer", None]


def test_bitrix24_dialect_answers_result_and_masks_the_webhook_code(crm: CrmFake) -> None:
    sink = Bitrix24Sink(Bitrix24Config(kind="bitrix24", url=crm.bitrix_webhook_url(code="s3cr3tcode")))

    assert sink.push(lead()) == "1"
    call = crm.calls()[0]
    assert call["path"] == "/rest/1/<code>/crm.lead.add.json"
    assert call["body"]["fields"]["ORIGIN_ID"] == "42"
    assert "s3cr3tcode" not in json.dumps(crm.calls())


def test_crm_rate_limit_sends_retry_after(crm: CrmFake) -> None:
    sink = WebhookSink(WebhookConfig(kind="webhook", url=crm.leads_url(), auth_header="Bearer local"))
    request(crm, "POST", "/_faults", {"rate_limit_next": 1, "retry_after": 9})

    with pytest.raises(TransientError) as raised:
        sink.push(lead())

    assert raised.value.retry_after == 9


# -- Bedrock -------------------------------------------------------------------------------------------
def bedrock_client(fake: BedrockFake) -> Any:
    return boto3.session.Session().client(
        "bedrock-runtime",
        endpoint_url=fake.url,
        region_name="eu-central-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"total_max_attempts": 1}),
    )


def test_converse_answer_parses_with_botocore_and_the_ai_consumers_reader(bedrock: BedrockFake) -> None:
    response = bedrock_client(bedrock).converse(
        modelId=MODEL_ID,
        system=[{"text": "classify"}],
        messages=[
            {"role": "user", "content": [{"text": "How much is the road bike? I'm Anna, +49 151 2345678"}]}
        ],
    )

    text = response["output"]["message"]["content"][0]["text"]
    extraction = parse_extraction(text)
    assert extraction is not None
    assert (extraction.intent, extraction.name, extraction.phone) == ("pricing", "Anna", "+491512345678")
    assert response["stopReason"] == "end_turn"
    assert bedrock.calls()[0]["path"] == f"/model/{MODEL_ID}/converse"


def test_converse_with_tools_answers_a_tool_use(bedrock: BedrockFake) -> None:
    tool = {"toolSpec": {"name": "record_lead", "inputSchema": {"json": {"type": "object"}}}}
    response = bedrock_client(bedrock).converse(
        modelId=MODEL_ID,
        messages=[{"role": "user", "content": [{"text": "hello"}]}],
        toolConfig={"tools": [tool]},
    )

    tool_use = response["output"]["message"]["content"][0]["toolUse"]
    assert (tool_use["name"], tool_use["input"]["intent"]) == ("record_lead", "greeting")
    assert response["stopReason"] == "tool_use"


def test_bedrock_faults_surface_as_aws_error_codes(bedrock: BedrockFake) -> None:
    request(bedrock, "POST", "/_faults", {"rate_limit_next": 1})
    request(bedrock, "POST", "/_faults", {"fail_next": 1, "status": 503})
    client = bedrock_client(bedrock)
    codes = []
    for _ in range(2):
        with pytest.raises(ClientError) as raised:
            client.converse(modelId=MODEL_ID, messages=[{"role": "user", "content": [{"text": "hi"}]}])
        codes.append(raised.value.response["Error"]["Code"])

    assert codes == ["ThrottlingException", "ServiceUnavailableException"]


# -- SMS gateway -----------------------------------------------------------------------------------------
def gateway(fake: SmsGatewayFake) -> HttpGateway:
    return HttpGateway(fake.url, timeout=1, secret=None)


OUTGOING = OutgoingSms(key="sms#evt-1#paid", phone="+4915123456789", body="Your order A-1 is paid")


def test_http_gateway_sends_and_looks_up_by_client_reference(sms: SmsGatewayFake) -> None:
    accepted = gateway(sms).send(OUTGOING)

    assert accepted.message_id == "sms-1"
    assert gateway(sms).lookup(OUTGOING.key, None).status is LookupStatus.FOUND
    assert gateway(sms).lookup("sms#other", None).status is LookupStatus.NOT_FOUND
    assert gateway(sms).send(OUTGOING).message_id == "sms-1"  # 409: the gateway deduplicates
    assert len(sms.messages()) == 1


def test_dropped_answer_is_an_unknown_outcome_the_lookup_resolves(sms: SmsGatewayFake) -> None:
    request(sms, "POST", "/_faults", {"drop_answer_next": 1})

    with pytest.raises(GatewayOutcomeUnknown):
        gateway(sms).send(OUTGOING)

    assert gateway(sms).lookup(OUTGOING.key, None).status is LookupStatus.FOUND
    assert [message["client_reference"] for message in sms.messages()] == [OUTGOING.key]


def test_sms_rate_limit_and_downtime_are_refusals_that_may_be_retried(sms: SmsGatewayFake) -> None:
    request(sms, "POST", "/_faults", {"rate_limit_next": 1, "retry_after": 7})
    with pytest.raises(GatewayRefused) as throttled:
        gateway(sms).send(OUTGOING)
    assert (throttled.value.transient, throttled.value.retry_after) == (True, 7)

    sms.go_down(30)
    with pytest.raises(GatewayRefused) as refused:
        gateway(sms).send(OUTGOING)
    assert refused.value.transient
    assert sms.messages() == []


def test_sms_gateway_requires_its_token_when_it_has_one() -> None:
    with SmsGatewayFake(token="t0ken") as fake:
        connection = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=2)
        body = json.dumps({"to": "+4915123456789", "text": "x", "client_reference": "k"})
        connection.request("POST", "/messages", body=body, headers={"Authorization": "Bearer wrong"})
        assert connection.getresponse().status == 401
        connection.close()
