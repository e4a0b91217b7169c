"""POST /telegram/webhook: authentication, validation, and what reaches SNS."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pipeline.envelope import Envelope, fifo_keys
from tests.unit.webhook.support import (
    BOT_ID,
    FIXTURES,
    TELEGRAM_START,
    TELEGRAM_TOKEN,
    CapturedOutput,
    Invoke,
    Pipeline,
    http_event,
    load_fixture,
    metrics_emitted,
    response_json,
    telegram_event,
)

# fixture file -> (type, chat_type, command) the webhook must publish for it.
EXPECTED_ROUTING: dict[str, tuple[str, str | None, str | None]] = {
    "business_message": ("business_message", "private", None),
    "callback_query": ("callback_query", "private", None),
    "channel_post": ("channel_post", "channel", None),
    "chat_join_request": ("chat_join_request", "supergroup", None),
    "contact": ("message", "private", None),
    "edited_message": ("edited_message", "private", None),
    "group_command": ("message", "group", "/help"),
    "group_message": ("message", "group", None),
    "inline_query": ("inline_query", "sender", None),
    "message_reaction": ("message_reaction", "supergroup", None),
    "my_chat_member": ("my_chat_member", "supergroup", None),
    "poll": ("poll", None, None),
    "private_start": ("message", "private", "/start"),
    "private_start_deeplink": ("message", "private", "/start"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED_ROUTING))
def test_accepted_update_publishes_one_envelope(invoke: Invoke, pipeline: Pipeline, name: str) -> None:
    update = load_fixture(FIXTURES / "telegram" / f"{name}.json")
    before = datetime.now(UTC)

    response = invoke(telegram_event(update, request_id="req-" + name))

    assert response["statusCode"] == 200
    event_id = f"telegram:{BOT_ID}:{update['update_id']}"
    assert response_json(response) == {"ok": True, "event_id": event_id}
    [published] = pipeline.published()
    envelope = Envelope.parse(published.envelope)
    kind, chat_type, command = EXPECTED_ROUTING[name]
    assert envelope.event_id == event_id
    assert (envelope.source, envelope.type) == ("telegram", kind)
    assert envelope.correlation_id == "req-" + name
    assert before - timedelta(seconds=1) <= envelope.received_at <= datetime.now(UTC)
    assert envelope.payload == update
    expected = {"source": "telegram", "type": kind, "chat_type": chat_type, "command": command}
    assert published.attributes == {name: value for name, value in expected.items() if value is not None}
    # One publish to the FIFO topic, in the update's group, deduplicated on the update.
    [request] = pipeline.publishes
    assert request["MessageGroupId"] == fifo_keys(envelope).group_id
    assert request["MessageGroupId"].startswith(f"telegram:{BOT_ID}:")
    assert request["MessageDeduplicationId"] == event_id


def test_unknown_future_kind_is_published_under_its_own_name(invoke: Invoke, pipeline: Pipeline) -> None:
    update = {"update_id": 910000001, "story_reaction": {"chat": {"id": 1, "type": "private"}, "emoji": "🔥"}}

    response = invoke(telegram_event(update))

    assert response["statusCode"] == 200
    [published] = pipeline.published()
    assert published.envelope["type"] == "story_reaction"
    assert published.envelope["payload"] == update
    assert published.attributes == {"source": "telegram", "type": "story_reaction"}


@pytest.mark.parametrize(
    "update",
    [{"update_id": 910000002}, {"update_id": 910000002, "Not A Kind!": {}}],
    ids=["no-kind", "unnamable-key"],
)
def test_update_without_a_recognisable_kind_is_published_as_unknown(
    invoke: Invoke, pipeline: Pipeline, update: dict[str, Any]
) -> None:
    response = invoke(telegram_event(update))

    assert response["statusCode"] == 200
    [published] = pipeline.published()
    assert published.attributes == {"source": "telegram", "type": "unknown"}


def test_payload_is_the_body_as_received_not_the_model(invoke: Invoke, pipeline: Pipeline) -> None:
    # A null known kind, a future field inside a message and key order only survive if the
    # envelope carries the parsed body rather than a dump of the model.
    body = (
        '{"message": null, "update_id": 910000003, "business_message": {"message_id": 9, "date": 1767225600,'
        ' "chat": {"id": 5, "type": "private"}, "business_connection_id": "bc1", "text": "Grüße 👋",'
        ' "field_from_2030": {"nested": [1, 2.5, true, null]}}}'
    )

    response = invoke(telegram_event(body))

    assert response["statusCode"] == 200
    [published] = pipeline.published()
    assert published.envelope["payload"] == json.loads(body)
    assert list(published.envelope["payload"]) == ["message", "update_id", "business_message"]
    assert published.envelope["type"] == "business_message"


def test_base64_encoded_body_is_decoded(invoke: Invoke, pipeline: Pipeline) -> None:
    update = load_fixture(TELEGRAM_START)

    response = invoke(telegram_event(json.dumps(update).encode()))

    assert response["statusCode"] == 200
    assert [p.envelope["payload"] for p in pipeline.published()] == [update]


@pytest.mark.parametrize(
    ("token", "detail"),
    [
        (None, "missing"),
        ("", "missing"),
        ("wrong-token", "mismatch"),
        (TELEGRAM_TOKEN.upper(), "mismatch"),
        (TELEGRAM_TOKEN[:-1], "mismatch"),
        (TELEGRAM_TOKEN + "x", "mismatch"),
        ("tökén", "mismatch"),
    ],
    ids=["absent", "empty", "wrong", "other-case", "prefix", "longer", "non-ascii"],
)
def test_missing_or_wrong_token_is_401_and_publishes_nothing(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput, token: str | None, detail: str
) -> None:
    response = invoke(telegram_event(load_fixture(TELEGRAM_START), token=token))

    assert response["statusCode"] == 401
    assert response_json(response)["error"] == "unauthorized"
    assert pipeline.published() == []
    assert pipeline.calls["Publish"] == 0
    lines = output.lines()
    [warning] = [line for line in CapturedOutput.log_lines(lines) if line["level"] == "WARNING"]
    assert (warning["reason"], warning["detail"]) == ("unauthorized", detail)
    assert ("EventsRejected", {"source": "telegram", "reason": "unauthorized"}) in metrics_emitted(lines)


def test_authentication_comes_before_validation(invoke: Invoke, pipeline: Pipeline) -> None:
    response = invoke(telegram_event("this is not json", token="wrong-token"))

    assert response["statusCode"] == 401
    assert pipeline.published() == []


@pytest.mark.parametrize(
    "body",
    [
        "update_id=1",
        "",
        '{"update_id": 1',
        "[1, 2]",
        '"an update"',
        "42",
        '{"message": {"message_id": 1}}',
        '{"update_id": "910000004"}',
        '{"update_id": true}',
        '{"update_id": 1.5}',
        '{"update_id": null}',
        '{"update_id": NaN}',
        '{"update_id": 1, "message": "hello"}',
        b"\xff\xfe\x00{",
        '{"update_id": 1, "message": {"text": "\\ud83d"}}',
        '{"update_id": 1, "\\udc00": {}}',
        '{"update_id": 1}'.encode("utf-16"),
        "[" * 100_000,
        '{"update_id": 1' + "0" * 5000 + "}",
    ],
    ids=[
        "form",
        "empty",
        "truncated",
        "array",
        "string",
        "number",
        "no-update-id",
        "string-id",
        "bool-id",
        "float-id",
        "null-id",
        "nan",
        "kind-not-object",
        "not-utf8",
        "lone-surrogate",
        "surrogate-key",
        "utf-16",
        "deep-nesting",
        "huge-number",
    ],
)
def test_invalid_body_is_400_and_publishes_nothing(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput, body: str | bytes
) -> None:
    response = invoke(telegram_event(body))

    assert response["statusCode"] == 400
    answer = response_json(response)
    assert answer["error"] == "invalid"
    assert answer["message"]
    assert pipeline.published() == []
    assert ("EventsRejected", {"source": "telegram", "reason": "invalid"}) in metrics_emitted(output.lines())


def test_escaped_emoji_is_accepted_and_kept(invoke: Invoke, pipeline: Pipeline) -> None:
    # Telegram escapes non-ASCII text; a surrogate *pair* is a valid character.
    body = (
        '{"update_id": 910000005, "message": {"message_id": 1, "date": 0,'
        ' "chat": {"id": 1, "type": "private"}, "text": "hi \\ud83d\\udc4b"}}'
    )

    response = invoke(telegram_event(body))

    assert response["statusCode"] == 200
    assert [p.envelope["payload"]["message"]["text"] for p in pipeline.published()] == ["hi 👋"]


def test_invalid_update_lists_field_errors(invoke: Invoke) -> None:
    response = invoke(telegram_event({"update_id": "7", "message": {"message_id": 1}}))

    assert response["statusCode"] == 400
    assert response_json(response)["errors"] == [
        {"loc": ["update_id"], "msg": "Input should be a valid integer"}
    ]


def test_invalid_base64_is_400(invoke: Invoke, pipeline: Pipeline) -> None:
    event = http_event(
        body="!!not base64!!",
        base64_encoded=True,
        headers={"x-telegram-bot-api-secret-token": TELEGRAM_TOKEN},
    )

    response = invoke(event)

    assert response["statusCode"] == 400
    assert pipeline.published() == []


def test_same_update_twice_keeps_the_same_event_id(invoke: Invoke, pipeline: Pipeline) -> None:
    update = load_fixture(TELEGRAM_START)

    invoke(telegram_event(update))
    invoke(telegram_event(update))

    ids = [p.envelope["event_id"] for p in pipeline.published()]
    assert ids == [f"telegram:{BOT_ID}:{update['update_id']}"] * 2


def test_the_published_log_line_names_the_event_s_chat_for_the_ops_console(
    invoke: Invoke, pipeline: Pipeline, output: CapturedOutput
) -> None:
    """The ops console filters events by chat or order from this line (its FIFO group)."""
    update = load_fixture(TELEGRAM_START)

    assert invoke(telegram_event(update))["statusCode"] == 200

    [published] = [line for line in output.lines() if line.get("message") == "Event published"]
    chat = update["message"]["chat"]["id"]
    assert published["message_group"] == f"telegram:{BOT_ID}:chat:{chat}"
    assert published["event_id"] == f"telegram:{BOT_ID}:{update['update_id']}"
