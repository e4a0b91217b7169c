"""The ai consumer's real handler, with Bedrock's Converse API stubbed (moto does not implement it)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from ai.extraction import parse_extraction
from botocore.stub import ANY, Stubber

from pipeline import aws
from tests.unit.consumer_support import (
    CONVERSATIONS_TABLE,
    Output,
    conversation_items,
    telegram_envelope,
    telegram_update,
)
from tests.unit.consumers.conftest import DeployedConsumer

MODEL_ID = "anthropic.claude-3-haiku-20240307-v1:0"
JONAS_KEY = {"pk": "chat#987654321", "sk": "update#000810000007"}  # the business_message fixture
JACKET = "Hello, is the red jacket still available?"


def converse_response(text: str, stop_reason: str = "end_turn") -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
        "stopReason": stop_reason,
        "usage": {"inputTokens": 120, "outputTokens": 40, "totalTokens": 160},
        "metrics": {"latencyMs": 420},
    }


def expected_request(text: str) -> dict[str, Any]:
    return {
        "modelId": MODEL_ID,
        "system": ANY,
        "messages": [{"role": "user", "content": [{"text": text}]}],
        "inferenceConfig": {"maxTokens": ANY, "temperature": 0},
    }


@pytest.fixture
def bedrock(moto_aws: None) -> Iterator[Stubber]:
    """The process-wide bedrock-runtime client, stubbed: an unexpected call fails the record."""
    with Stubber(aws.client("bedrock-runtime")) as stubber:
        yield stubber
        stubber.assert_no_pending_responses()


@pytest.fixture
def ai(run_consumer: Callable[[str], DeployedConsumer], monkeypatch: pytest.MonkeyPatch) -> DeployedConsumer:
    monkeypatch.setenv("BEDROCK_MODEL_ID", MODEL_ID)
    return run_consumer("ai")


def ai_attribute() -> dict[str, Any]:
    item = aws.resource("dynamodb").Table(CONVERSATIONS_TABLE).get_item(Key=JONAS_KEY)["Item"]
    result: dict[str, Any] = item["ai"]
    return result


def test_the_analysis_is_stored_on_the_conversation_item(ai: DeployedConsumer, bedrock: Stubber) -> None:
    update = telegram_envelope(telegram_update("business_message"))
    answer = {"intent": "Purchase", "name": None, "phone": "", "product": "red jacket", "urgency": "medium"}
    bedrock.add_response(
        "converse", converse_response(f"```json\n{json.dumps(answer)}\n```"), expected_request(JACKET)
    )

    assert ai.deliver(update).failed == []

    stored = ai_attribute()
    assert stored.pop("analyzed_at")
    assert stored == {
        "status": "parsed",
        "intent": "purchase",
        "product": "red jacket",
        "urgency": "medium",
        "model_id": MODEL_ID,
        "event_id": update.envelope.event_id,
        "stop_reason": "end_turn",
    }


def test_the_store_consumers_item_keeps_its_attributes(ai: DeployedConsumer, bedrock: Stubber) -> None:
    table = aws.resource("dynamodb").Table(CONVERSATIONS_TABLE)
    table.put_item(Item={**JONAS_KEY, "type": "business_message", "text": JACKET, "payload": "{}"})
    bedrock.add_response("converse", converse_response('{"intent": "purchase"}'), expected_request(JACKET))

    assert ai.deliver(telegram_envelope(telegram_update("business_message"))).failed == []

    [item] = conversation_items()
    assert (item["type"], item["text"], item["payload"]) == ("business_message", JACKET, "{}")
    assert item["ai"]["intent"] == "purchase"


@pytest.mark.parametrize(
    "answer",
    [
        "This looks like a purchase inquiry about a jacket.",
        '{"intent": "buy", "product": "jacket"}',  # not one of the intents
        '{"intent": "purchase", "product": "jack',  # cut at the token limit
    ],
)
def test_invalid_model_output_is_stored_unparsed_with_the_raw_text(
    ai: DeployedConsumer, bedrock: Stubber, answer: str
) -> None:
    bedrock.add_response("converse", converse_response(answer), expected_request(JACKET))

    assert ai.deliver(telegram_envelope(telegram_update("business_message"))).failed == []

    stored = ai_attribute()
    assert (stored["status"], stored["raw"]) == ("unparsed", answer)
    assert "intent" not in stored


def test_disabled_without_a_model_id_and_bedrock_is_not_called(
    run_consumer: Callable[[str], DeployedConsumer],
    bedrock: Stubber,
    monkeypatch: pytest.MonkeyPatch,
    output: Callable[[Any], Output],
) -> None:
    monkeypatch.setenv("BEDROCK_MODEL_ID", "")
    consumer = run_consumer("ai")
    out = output(consumer.app.worker)

    # No response is stubbed: any Bedrock call would raise and fail the record.
    assert consumer.deliver(telegram_envelope(telegram_update("business_message"))).failed == []

    assert len(out.logs("ai disabled")) == 1
    assert conversation_items() == []


def test_messages_without_text_are_skipped(ai: DeployedConsumer, bedrock: Stubber) -> None:
    assert ai.deliver(telegram_envelope(telegram_update("contact"))).failed == []
    assert conversation_items() == []


def test_bare_commands_are_not_sent_to_bedrock(
    ai: DeployedConsumer, bedrock: Stubber, output: Callable[[Any], Output]
) -> None:
    out = output(ai.app.worker)
    bare_in_group = telegram_update("group_command")
    bare_in_group["message"]["text"] = "/help@MyShopBot "
    bare_in_group["update_id"] += 100  # another update
    with_a_question = telegram_update("group_command")  # "/help@MyShopBot shipping to Austria?"
    bedrock.add_response(
        "converse",
        converse_response('{"intent": "question"}'),
        expected_request(with_a_question["message"]["text"]),
    )

    # Only one response is stubbed: a Bedrock call for a bare command would fail its record.
    delivered = ai.deliver(
        telegram_envelope(telegram_update("private_start")),  # "/start"
        telegram_envelope(bare_in_group),
        telegram_envelope(with_a_question),
    )

    assert delivered.failed == []
    assert len(out.logs("bare command, not analyzed")) == 2
    assert [item["sk"] for item in conversation_items()] == ["update#000810000003"]


@pytest.mark.parametrize(
    "code", ["ThrottlingException", "ServiceUnavailableException", "ModelTimeoutException"]
)
def test_throttling_and_unavailability_are_retried(ai: DeployedConsumer, bedrock: Stubber, code: str) -> None:
    bedrock.add_client_error(
        "converse", service_error_code=code, service_message="try later", http_status_code=429
    )

    delivery = ai.deliver(telegram_envelope(telegram_update("business_message")))

    assert delivery.failed == delivery.message_ids
    assert ai.queues.dead_letters() == []
    assert conversation_items() == []


@pytest.mark.parametrize("code", ["ValidationException", "AccessDeniedException"])
def test_refused_requests_are_dead_lettered(ai: DeployedConsumer, bedrock: Stubber, code: str) -> None:
    bedrock.add_client_error(
        "converse", service_error_code=code, service_message="You don't have access", http_status_code=400
    )

    assert ai.deliver(telegram_envelope(telegram_update("business_message"))).failed == []

    assert ai.dead_letter_reasons() == [f"bedrock converse: {code}: You don't have access"]


@pytest.mark.parametrize(
    ("text", "intent"),
    [
        ('Sure! Here is the JSON: {"intent": "support", "urgency": "HIGH"} Hope it helps.', "support"),
        ('{"intent": " Pricing ", "email": "anna@example.com"}', "pricing"),
        ('{"intent": "other", "email": "not an email"}', None),
        ('["intent", "other"]', None),
        ("", None),
    ],
)
def test_parse_extraction_accepts_only_a_valid_object(text: str, intent: str | None) -> None:
    parsed = parse_extraction(text)
    assert (parsed.intent if parsed else None) == intent
