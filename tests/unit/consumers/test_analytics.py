"""The analytics consumer: one EMF line and one analytics log line per update, never per delivery."""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from aiogram.filters.command import Command
from aiogram.types import Update

from pipeline.envelope import Envelope
from pipeline.errors import PermanentError
from tests.unit.consumer_support import (
    TELEGRAM_FIXTURE_NAMES,
    ConsumerQueues,
    Deploy,
    FakeLambdaContext,
    Output,
    aiogram_context,
    crm_envelope,
    crm_event,
    telegram_envelope,
    telegram_update,
)

pytestmark = pytest.mark.usefixtures("moto_aws")

METRIC = "TelegramUpdates"
NAMESPACE = "TelegramCrmPipeline"


def record_update(envelope: Envelope) -> dict[str, str]:
    """`analytics.logic.record_update`, imported by the app once the environment is set.

    Its module-level `Logger(child=True)` takes the service name at import, as in Lambda.
    """
    logic = importlib.import_module("analytics.logic")
    result: dict[str, str] = logic.record_update(envelope)
    return result


@pytest.fixture
def analytics(
    import_app: Callable[[str], ModuleType], deploy: Deploy, output: Callable[[Any], Output]
) -> tuple[ModuleType, ConsumerQueues, Output]:
    app = import_app("analytics")
    return app, deploy(app.worker, "analytics"), output(app.worker)


def run_batches(
    app: ModuleType, queues: ConsumerQueues, context: FakeLambdaContext, max_messages: int
) -> int:
    """Receive and handle until the queue is empty; returns how many batches ran."""
    batches = 0
    while (event := queues.receive_event(max_messages=max_messages))["Records"]:
        response = app.lambda_handler(event, context)
        assert response == {"batchItemFailures": []}
        queues.acknowledge(event, response)
        batches += 1
    return batches


def expected_dimensions(update: dict[str, Any]) -> dict[str, str]:
    """The dimensions from aiogram's reading of the update (an oracle independent of ours)."""
    parsed = Update.model_validate(update)
    kind = next(key for key in update if key != "update_id")
    context = aiogram_context(update)
    chat_type = context.chat.type if context.chat else getattr(parsed.event, "chat_type", None)
    command = "none"
    text, entities = getattr(parsed.event, "text", None), getattr(parsed.event, "entities", None)
    if text and entities and entities[0].type == "bot_command" and entities[0].offset == 0:
        found = "/" + Command.extract_command(text).command.lower()
        command = found if found in ("/start", "/help", "/settings") else "other"
    # Powertools adds the function's service name to every metric.
    return {"update_type": kind, "chat_type": chat_type or "none", "command": command, "service": "consumer"}


def emf_dimensions(line: dict[str, Any]) -> dict[str, str]:
    [directive] = line["_aws"]["CloudWatchMetrics"]
    [names] = directive["Dimensions"]
    return {name: line[name] for name in names}


@pytest.mark.parametrize("name", TELEGRAM_FIXTURE_NAMES)
def test_each_update_is_one_metric_with_its_dimensions_and_one_log_line(
    analytics: tuple[ModuleType, ConsumerQueues, Output], lambda_context: FakeLambdaContext, name: str
) -> None:
    app, queues, output = analytics
    update = telegram_update(name)
    queues.send(telegram_envelope(update))

    assert run_batches(app, queues, lambda_context, 10) == 1

    [line] = output.emf(METRIC)
    [directive] = line["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == NAMESPACE
    assert directive["Metrics"] == [{"Name": METRIC, "Unit": "Count"}]
    assert line[METRIC] == [1.0] or line[METRIC] == 1.0
    dimensions = expected_dimensions(update)
    assert emf_dimensions(line) == dimensions
    [log] = output.logs("analytics")
    assert {key: log[key] for key in ("update_type", "chat_type")} == {
        k: dimensions[k] for k in ("update_type", "chat_type")
    }


@pytest.mark.parametrize("name", TELEGRAM_FIXTURE_NAMES)
def test_the_log_line_has_a_hashed_user_and_no_message_text(
    analytics: tuple[ModuleType, ConsumerQueues, Output], lambda_context: FakeLambdaContext, name: str
) -> None:
    app, queues, output = analytics
    update = telegram_update(name)
    queues.send(telegram_envelope(update))
    run_batches(app, queues, lambda_context, 10)

    [log] = output.logs("analytics")
    # Lambda's context keys (function ARN with the account id) are not the consumer's to judge.
    text = json.dumps({k: v for k, v in log.items() if not k.startswith("function_")}, ensure_ascii=False)
    event = Update.model_validate(update).event
    for private in (getattr(event, "text", None), getattr(event, "caption", None)):
        if private and not private.startswith("/"):
            assert private not in text
    user = aiogram_context(update).user
    if user is None:
        assert "user" not in log
    else:
        assert re.fullmatch(r"[0-9a-f]{16}", log["user"])
        assert str(user.id) not in text
        for field in ("first_name", "last_name", "username"):
            if getattr(user, field, None):
                assert getattr(user, field) not in text


def test_duplicates_never_inflate_counts(
    analytics: tuple[ModuleType, ConsumerQueues, Output], lambda_context: FakeLambdaContext
) -> None:
    app, queues, output = analytics
    item = telegram_envelope(telegram_update("private_start"))
    message_ids = {queues.send(item) for _ in range(3)}  # three deliveries, three SQS message ids
    assert len(message_ids) == 3

    assert run_batches(app, queues, lambda_context, 1) == 3

    assert len(output.emf(METRIC)) == 1
    assert len(output.logs("analytics")) == 1
    duplicates = [line["DuplicatesSkipped"] for line in output.emf("DuplicatesSkipped")]
    assert sum(sum(v) if isinstance(v, list) else v for v in duplicates) == 2


def test_records_of_one_batch_do_not_share_dimensions(
    analytics: tuple[ModuleType, ConsumerQueues, Output], lambda_context: FakeLambdaContext
) -> None:
    app, queues, output = analytics
    names = ("private_start", "group_command", "channel_post", "poll")
    for name in names:
        queues.send(telegram_envelope(telegram_update(name)))

    assert run_batches(app, queues, lambda_context, 10) == 1

    lines = output.emf(METRIC)
    assert sorted(map(json.dumps, map(emf_dimensions, lines))) == sorted(
        json.dumps(expected_dimensions(telegram_update(name))) for name in names
    )
    assert all(len(line["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]) == 4 for line in lines)


def test_unknown_commands_are_grouped_unless_configured(
    analytics: tuple[ModuleType, ConsumerQueues, Output], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, output = analytics
    update = telegram_update("private_start")
    update["message"].update(text="/buy_now 3", entities=[{"offset": 0, "length": 8, "type": "bot_command"}])
    Update.model_validate(update)
    envelope = telegram_envelope(update).envelope

    assert record_update(envelope)["command"] == "other"
    monkeypatch.setenv("ANALYTICS_COMMANDS", "/Buy_Now, /cart")
    assert record_update(envelope)["command"] == "/buy_now"

    logs = output.logs("analytics")
    assert [log["command"] for log in logs] == ["/buy_now", "/buy_now"]  # the log keeps the real one
    assert [emf_dimensions(line)["command"] for line in output.emf(METRIC)] == ["other", "/buy_now"]


def test_the_user_hash_is_stable_and_keyed_by_the_salt(
    analytics: tuple[ModuleType, ConsumerQueues, Output], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, output = analytics
    start, edit = (
        telegram_envelope(telegram_update(n)).envelope for n in ("private_start", "edited_message")
    )
    assert aiogram_context(start.payload).user.id == aiogram_context(edit.payload).user.id

    record_update(start)
    record_update(edit)
    monkeypatch.setenv("ANALYTICS_USER_SALT", "deployment-salt")
    record_update(start)

    first, second, salted = (log["user"] for log in output.logs("analytics"))
    assert first == second
    assert salted != first


def test_a_crm_event_is_refused_without_a_metric(
    analytics: tuple[ModuleType, ConsumerQueues, Output],
) -> None:
    _, _, output = analytics
    with pytest.raises(PermanentError, match="analytics takes Telegram updates"):
        record_update(crm_envelope(crm_event()).envelope)
    assert output.emf(METRIC) == []


def test_a_payload_that_is_no_update_is_refused(analytics: tuple[ModuleType, ConsumerQueues, Output]) -> None:
    _, _, output = analytics
    envelope = dataclasses.replace(telegram_envelope(telegram_update("poll")).envelope, payload={"poll": {}})
    with pytest.raises(PermanentError, match="payload is not a Telegram update"):
        record_update(envelope)
    assert output.emf(METRIC) == []


@pytest.mark.parametrize(("text", "command"), [("/help@MyShopBot", "/help"), ("/help@other_bot", "none")])
def test_another_bots_command_is_not_counted_as_ours_once_the_username_is_set(
    analytics: tuple[ModuleType, ConsumerQueues, Output],
    lambda_context: FakeLambdaContext,
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    command: str,
) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_USERNAME", "MyShopBot")
    app, queues, output = analytics
    update = telegram_update("group_command")
    update["message"]["text"] = text
    update["message"]["entities"] = [{"offset": 0, "length": len(text), "type": "bot_command"}]
    queues.send(telegram_envelope(update))

    assert run_batches(app, queues, lambda_context, 10) == 1

    [line] = output.emf(METRIC)
    assert emf_dimensions(line)["command"] == command
