"""The store consumer: one conversations item per Telegram update, keyed by chat and update id."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import store.logic as store_logic
from aiogram.types import Update
from botocore.exceptions import ClientError, EndpointConnectionError
from botocore.stub import Stubber
from store.logic import save_update

from pipeline import aws
from pipeline.errors import PermanentError, TransientError
from tests.unit.consumer_support import (
    CONVERSATIONS_TABLE,
    TELEGRAM_FIXTURE_NAMES,
    ConsumerQueues,
    Deploy,
    FakeLambdaContext,
    Published,
    aiogram_context,
    conversation_items,
    crm_envelope,
    crm_event,
    failed_ids,
    telegram_envelope,
    telegram_update,
)

pytestmark = pytest.mark.usefixtures("moto_aws")


@pytest.fixture
def store(import_app: Callable[[str], ModuleType], deploy: Deploy) -> tuple[ModuleType, ConsumerQueues]:
    app = import_app("store")
    return app, deploy(app.worker, "store")


def deliver(
    store: tuple[ModuleType, ConsumerQueues], item: Published, context: FakeLambdaContext
) -> dict[str, Any]:
    app, queues = store
    queues.send(item)
    event = queues.receive_event()
    response: dict[str, Any] = app.lambda_handler(event, context)
    queues.acknowledge(event, response)
    return response


@pytest.mark.parametrize("name", TELEGRAM_FIXTURE_NAMES)
def test_every_update_is_saved_under_its_chat_else_user_else_kind(
    store: tuple[ModuleType, ConsumerQueues], lambda_context: FakeLambdaContext, name: str
) -> None:
    update = telegram_update(name)
    item = telegram_envelope(update)
    context = aiogram_context(update)  # aiogram's view of the chat and user, not ours
    kind = item.envelope.type

    assert deliver(store, item, lambda_context) == {"batchItemFailures": []}

    [saved] = [found for found in conversation_items() if found["sk"].startswith("update#")]
    if context.chat:
        expected_pk = f"chat#{context.chat.id}"
    elif context.user:
        expected_pk = f"user#{context.user.id}"
    else:
        expected_pk = f"update#{kind}"
    assert saved["pk"] == expected_pk
    assert saved["sk"] == f"update#{update['update_id']:012d}"
    assert len(saved["sk"]) == len("update#") + 12
    assert json.loads(saved["payload"]) == update
    assert saved["event_id"] == item.envelope.event_id
    assert saved["type"] == kind
    assert saved["correlation_id"] == item.envelope.correlation_id
    assert saved["received_at"] == item.envelope.received_at.isoformat()
    assert saved.get("chat_type") == (context.chat.type if context.chat else None)
    assert saved.get("from_user_id") == (context.user.id if context.user else None)
    event = Update.model_validate(update).event
    assert saved.get("text") == (getattr(event, "text", None) or getattr(event, "caption", None))


def test_floats_and_empty_strings_in_the_update_are_kept_exactly(
    store: tuple[ModuleType, ConsumerQueues], lambda_context: FakeLambdaContext
) -> None:
    update = telegram_update("private_start")
    del update["message"]["text"], update["message"]["entities"]
    update["message"]["location"] = {
        "latitude": 52.520008,
        "longitude": 13.404954,
        "horizontal_accuracy": 1.5,
    }
    update["message"]["chat"]["last_name"] = ""
    Update.model_validate(update)

    assert deliver(store, telegram_envelope(update), lambda_context) == {"batchItemFailures": []}

    [saved] = conversation_items()
    assert json.loads(saved["payload"]) == update
    assert "text" not in saved


def test_saving_the_same_update_twice_writes_one_identical_item(monkeypatch: pytest.MonkeyPatch) -> None:
    """Idempotent by key even without the worker's journal (e.g. after the journal's TTL)."""
    monkeypatch.setenv("CONVERSATIONS_TABLE", CONVERSATIONS_TABLE)
    envelope = telegram_envelope(telegram_update("group_message")).envelope
    first = save_update(envelope)
    items_after_first = conversation_items()
    assert save_update(envelope) == first
    assert conversation_items() == items_after_first
    assert len(items_after_first) == 1


def test_saving_keeps_what_the_ai_consumer_already_wrote(monkeypatch: pytest.MonkeyPatch) -> None:
    """The `ai` consumer may update the same item first; storing the update must not erase it."""
    monkeypatch.setenv("CONVERSATIONS_TABLE", CONVERSATIONS_TABLE)
    envelope = telegram_envelope(telegram_update("group_message")).envelope
    key = save_update(envelope)
    table = aws.resource("dynamodb").Table(CONVERSATIONS_TABLE)
    table.delete_item(Key=key)
    table.update_item(
        Key=key, UpdateExpression="SET ai = :ai", ExpressionAttributeValues={":ai": {"intent": "order"}}
    )

    save_update(envelope)

    [saved] = conversation_items()
    assert saved["ai"] == {"intent": "order"}
    assert saved["event_id"] == envelope.event_id


@pytest.fixture
def table_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVERSATIONS_TABLE", CONVERSATIONS_TABLE)


@pytest.mark.usefixtures("table_env")
@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("ProvisionedThroughputExceededException", 400, TransientError),
        ("ThrottlingException", 400, TransientError),
        ("RequestLimitExceeded", 400, TransientError),
        ("InternalServerError", 500, TransientError),
        ("SomethingNew", 503, TransientError),
        ("ValidationException", 400, PermanentError),
    ],
)
def test_dynamodb_errors_are_classified_for_the_worker(
    code: str, status: int, expected: type[Exception]
) -> None:
    envelope = telegram_envelope(telegram_update("private_start")).envelope
    with Stubber(aws.resource("dynamodb").meta.client) as stub:
        stub.add_client_error("update_item", service_error_code=code, http_status_code=status)
        with pytest.raises(expected) as error:
            save_update(envelope)
    assert isinstance(error.value.__cause__, ClientError)
    assert code in str(error.value) or str(status) in str(error.value)


@pytest.mark.usefixtures("table_env")
def test_unknown_client_errors_are_raised_as_they_are() -> None:
    envelope = telegram_envelope(telegram_update("private_start")).envelope
    with Stubber(aws.resource("dynamodb").meta.client) as stub:
        stub.add_client_error("update_item", service_error_code="AccessDeniedException", http_status_code=400)
        with pytest.raises(ClientError, match="AccessDeniedException"):
            save_update(envelope)


@pytest.mark.usefixtures("table_env")
def test_an_unreachable_dynamodb_is_transient(monkeypatch: pytest.MonkeyPatch) -> None:
    class Unreachable:
        def Table(self, name: str) -> Unreachable:
            return self

        def update_item(self, **_: Any) -> None:
            raise EndpointConnectionError(endpoint_url="https://dynamodb.eu-central-1.amazonaws.com")

    monkeypatch.setattr(store_logic, "aws", SimpleNamespace(resource=lambda service: Unreachable()))
    with pytest.raises(TransientError, match="EndpointConnectionError"):
        save_update(telegram_envelope(telegram_update("private_start")).envelope)


@pytest.mark.usefixtures("table_env")
@pytest.mark.parametrize(
    ("make_envelope", "reason"),
    [
        (lambda: crm_envelope(crm_event()).envelope, "store takes Telegram updates, got a crm event"),
        (
            lambda: dataclasses.replace(
                telegram_envelope(telegram_update("poll")).envelope, payload={"poll": {}}
            ),
            "update has no non-negative integer update_id",
        ),
    ],
    ids=["crm-event", "no-update-id"],
)
def test_events_that_can_never_be_stored_are_permanent_errors(
    make_envelope: Callable[[], Any], reason: str
) -> None:
    with pytest.raises(PermanentError) as error:
        save_update(make_envelope())
    assert error.value.reason == reason
    assert conversation_items() == []


def test_a_missing_table_setting_is_a_permanent_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONVERSATIONS_TABLE", raising=False)
    with pytest.raises(PermanentError, match="CONVERSATIONS_TABLE is not set"):
        save_update(telegram_envelope(telegram_update("private_start")).envelope)


def test_a_refused_item_goes_to_the_dlq_and_throttling_is_retried(
    store: tuple[ModuleType, ConsumerQueues], lambda_context: FakeLambdaContext
) -> None:
    app, queues = store
    for name in ("private_start", "group_message"):
        queues.send(telegram_envelope(telegram_update(name)))
    event = queues.receive_event()
    # The records are handled in order: the first put is refused, the second throttled.
    refused_record, throttled_record = event["Records"]
    with Stubber(aws.resource("dynamodb").meta.client) as stub:
        stub.add_client_error("update_item", service_error_code="ValidationException", http_status_code=400)
        stub.add_client_error(
            "update_item", service_error_code="ProvisionedThroughputExceededException", http_status_code=400
        )
        response = app.lambda_handler(event, lambda_context)
    queues.acknowledge(event, response)

    assert failed_ids(response) == [throttled_record["messageId"]]
    [letter] = queues.dead_letters()
    assert letter["body"] == refused_record["body"]
    assert letter["attributes"]["dead_letter_reason"] == "DynamoDB refused the item: ValidationException"
    assert app.worker.counts == {"dead_lettered": 1, "retry": 1}
    assert conversation_items() == []


def _start(text: str, chat_type: str = "private") -> dict[str, Any]:
    update = telegram_update("private_start_deeplink")
    update["message"]["text"] = text
    update["message"]["entities"][0]["length"] = len(text.split(" ")[0])
    if chat_type != "private":
        update["message"]["chat"] = {"id": -100123, "title": "A group", "type": chat_type}
    return update


def test_a_deep_link_start_keeps_its_payload_as_the_chats_tag(
    store: tuple[ModuleType, ConsumerQueues], lambda_context: FakeLambdaContext
) -> None:
    """t.me/<bot>?start=ref_instagram arrives as "/start ref_instagram": the store keeps the tag
    `ops broadcast create --tag ref_instagram` selects the chat by, expiring with the update."""
    update = telegram_update("private_start_deeplink")
    item = telegram_envelope(update)

    assert deliver(store, item, lambda_context) == {"batchItemFailures": []}

    saved = {found["sk"]: found for found in conversation_items()}
    tag = saved.pop("tag#ref_instagram")
    [update_item] = saved.values()
    assert tag["pk"] == update_item["pk"] == "chat#123456789"
    assert tag["schema_version"] == 1 and tag["chat_id"] == 123456789
    assert tag["tagged_at"] == item.envelope.received_at.isoformat()
    assert tag["expiration"] == update_item["expiration"]


@pytest.mark.parametrize(
    ("text", "chat_type"),
    [
        ("/start", "private"),  # no payload
        ("/start ref instagram", "private"),  # a space is no payload Telegram sends
        ("/start " + "x" * 65, "private"),  # longer than Telegram allows
        ("/start ref_instagram", "supergroup"),  # a group's /start is not the user's link
        ("/help ref_instagram", "private"),
    ],
)
def test_no_tag_but_from_a_private_deep_link_start(
    store: tuple[ModuleType, ConsumerQueues], lambda_context: FakeLambdaContext, text: str, chat_type: str
) -> None:
    item = telegram_envelope(_start(text, chat_type))

    assert deliver(store, item, lambda_context) == {"batchItemFailures": []}

    assert [found["sk"][:7] for found in conversation_items()] == ["update#"]
