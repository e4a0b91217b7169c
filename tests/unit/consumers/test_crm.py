"""The crm consumer's real handler: one lead per new contact, webhook and Bitrix24 clients, failures."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from aiogram.types import Update

from pipeline import aws
from pipeline.observability import mask_phone
from tests.unit.consumer_support import JOURNAL_TABLE, Output, Published, telegram_envelope, telegram_update
from tests.unit.consumers.conftest import AUTH_HEADER, BITRIX_CODE, DeployedConsumer, FakeHttpServer, Scripted

ANNA_ID = 123456789


def anna_says(text: str, update_id: int) -> Published:
    """A plain message by the same user as the `private_start` fixture (a later update)."""
    update = telegram_update("private_start")
    message = {key: value for key, value in update["message"].items() if key != "entities"}
    update = {"update_id": update_id, "message": {**message, "message_id": update_id % 1000, "text": text}}
    Update.model_validate(update)
    return telegram_envelope(update)


def contact_record(user_id: int) -> dict[str, Any] | None:
    item: dict[str, Any] | None = (
        aws.resource("dynamodb").Table(JOURNAL_TABLE).get_item(Key={"id": f"contact#{user_id}"}).get("Item")
    )
    return item


def test_start_makes_exactly_one_lead_despite_redeliveries_and_later_messages(
    webhook_crm: DeployedConsumer, http_fake: FakeHttpServer
) -> None:
    start = telegram_envelope(telegram_update("private_start"))

    first = webhook_crm.deliver(start)
    # Telegram/SNS deliver the same update again: twice alone, once twice in one batch.
    again = [webhook_crm.deliver(start), webhook_crm.deliver(start), webhook_crm.deliver(start, start)]
    # Then the same user writes again and shares their phone: known contact, no new lead (the
    # phone goes onto this lead: test_crm_lead_update).
    later = webhook_crm.deliver(anna_says("Do you ship to Vienna?", 810_000_101))
    shared = webhook_crm.deliver(telegram_envelope(telegram_update("contact")))

    assert all(d.failed == [] for d in [first, *again, later, shared])
    assert [request.method for request in http_fake.requests] == ["POST", "PATCH"]
    assert http_fake.requests[0].body["event_id"] == start.envelope.event_id
    # The repeats never reached the consumer's logic: the worker's idempotency answered them.
    assert webhook_crm.app.worker.counts == {"processed": 3, "duplicate": 4}
    record = contact_record(ANNA_ID)
    assert record is not None
    assert (record["status"], record["lead_id"], record["event_id"]) == (
        "pushed",
        "lead-1",
        start.envelope.event_id,
    )
    assert record["schema_version"] == 1  # pipeline.formats: crm_lead_contact
    assert webhook_crm.queues.dead_letters() == []


def test_webhook_request_carries_auth_idempotency_key_and_the_lead(
    webhook_crm: DeployedConsumer, http_fake: FakeHttpServer
) -> None:
    start = telegram_envelope(telegram_update("private_start"))
    webhook_crm.deliver(start)

    [request] = http_fake.requests
    assert request.path == "/leads"
    assert request.headers["authorization"] == AUTH_HEADER
    assert request.headers["idempotency-key"] == start.envelope.event_id
    assert request.body == {
        "event_id": start.envelope.event_id,
        "trigger": "start",
        "telegram_user_id": ANNA_ID,
        "chat_id": ANNA_ID,
        "username": "anna_s",
        "first_name": "Anna",
        "last_name": "Schmidt",
        "phone": None,
        "language_code": "de",
        "text": "/start",
        "source": "telegram",
    }


@pytest.mark.parametrize(
    ("text", "trigger"), [("/start@myshopbot", "start"), ("/start@other_bot", "first_message")]
)
def test_only_this_bots_start_counts_as_a_start_once_its_username_is_set(
    webhook_crm: DeployedConsumer,
    http_fake: FakeHttpServer,
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    trigger: str,
) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_USERNAME", "MyShopBot")
    update = telegram_update("group_command")
    update["message"]["text"] = text
    update["message"]["entities"] = [{"offset": 0, "length": len(text), "type": "bot_command"}]
    Update.model_validate(update)

    assert webhook_crm.deliver(telegram_envelope(update)).failed == []

    [request] = http_fake.requests
    assert request.body["trigger"] == trigger


def test_two_updates_of_one_new_user_in_one_batch_make_one_lead(
    webhook_crm: DeployedConsumer, http_fake: FakeHttpServer
) -> None:
    start = telegram_envelope(telegram_update("private_start"))
    hello = anna_says("Hello, I'd like a quote", 810_000_102)

    delivery = webhook_crm.deliver(start, hello)

    assert delivery.failed == []
    assert len(http_fake.requests) == 1
    assert webhook_crm.app.worker.counts == {"processed": 2}


def test_a_first_message_without_start_is_a_lead(
    webhook_crm: DeployedConsumer, http_fake: FakeHttpServer
) -> None:
    business = telegram_envelope(telegram_update("business_message"))

    assert webhook_crm.deliver(business).failed == []

    [request] = http_fake.requests
    assert request.body["trigger"] == "first_message"
    assert (request.body["telegram_user_id"], request.body["text"]) == (
        987654321,
        "Hello, is the red jacket still available?",
    )


def test_a_shared_contact_is_a_lead_with_the_phone_masked_in_logs(
    webhook_crm: DeployedConsumer, http_fake: FakeHttpServer, output: Callable[[Any], Output]
) -> None:
    out = output(webhook_crm.app.worker)
    webhook_crm.deliver(telegram_envelope(telegram_update("contact")))

    [request] = http_fake.requests
    assert (request.body["trigger"], request.body["phone"]) == ("contact", "+491701234567")
    [created] = out.logs("lead created")
    assert created["phone"] == mask_phone("+491701234567")
    assert "+491701234567" not in json.dumps(out.lines)


def test_crm_500_is_retried_and_the_retry_creates_the_lead_once(
    webhook_crm: DeployedConsumer, http_fake: FakeHttpServer
) -> None:
    start = telegram_envelope(telegram_update("private_start"))
    http_fake.respond(Scripted(500, {"error": "maintenance"}))

    failed = webhook_crm.deliver(start)
    assert failed.failed == failed.message_ids  # in batchItemFailures: SQS delivers it again
    assert webhook_crm.queues.dead_letters() == []
    pending = contact_record(ANNA_ID)
    assert pending is not None and pending["status"] == "pending"

    # Meanwhile the user writes again: the pending claim belongs to the /start, no second lead.
    assert webhook_crm.deliver(anna_says("hello?", 810_000_103)).failed == []
    assert len(http_fake.requests) == 1

    # SQS redelivers the /start: it owns the claim, pushes, and confirms.
    assert webhook_crm.deliver(start).failed == []
    assert len(http_fake.requests) == 2
    assert [r.body["event_id"] for r in http_fake.requests] == [start.envelope.event_id] * 2
    confirmed = contact_record(ANNA_ID)
    assert confirmed is not None and (confirmed["status"], confirmed["lead_id"]) == ("pushed", "lead-1")


def test_crm_400_dead_letters_at_once_with_a_reason_free_of_secrets_and_phones(
    webhook_crm: DeployedConsumer, http_fake: FakeHttpServer
) -> None:
    http_fake.respond(Scripted(400, {"error": "phone +491701234567 is not valid"}))

    delivery = webhook_crm.deliver(telegram_envelope(telegram_update("contact")))

    assert delivery.failed == []
    [reason] = webhook_crm.dead_letter_reasons()
    assert reason == f"crm webhook: HTTP 400 phone {mask_phone('+491701234567')} is not valid"
    assert http_fake.base_url not in reason and AUTH_HEADER not in reason


def test_bitrix24_request_shape(bitrix_crm: DeployedConsumer, http_fake: FakeHttpServer) -> None:
    shared = telegram_envelope(telegram_update("contact"))

    assert bitrix_crm.deliver(shared).failed == []

    [request] = http_fake.requests
    assert request.path == f"/rest/1/{BITRIX_CODE}/crm.lead.add.json"
    assert "authorization" not in request.headers  # the webhook code in the URL is the credential
    comments = request.body["fields"].pop("COMMENTS")
    assert request.body == {
        "fields": {
            "TITLE": "Telegram: Anna Schmidt (@anna_s)",
            "NAME": "Anna",
            "LAST_NAME": "Schmidt",
            "PHONE": [{"VALUE": "+491701234567", "VALUE_TYPE": "WORK"}],
            "SOURCE_ID": "OTHER",
            "SOURCE_DESCRIPTION": "Telegram bot",
            "ORIGINATOR_ID": "telegram",
            "ORIGIN_ID": str(ANNA_ID),
        },
        "params": {"REGISTER_SONET_EVENT": "Y"},
    }
    assert f"Telegram user id: {ANNA_ID}" in comments and shared.envelope.event_id in comments
    record = contact_record(ANNA_ID)
    assert record is not None and record["lead_id"] == "3465"


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (503, {"error": "QUERY_LIMIT_EXCEEDED", "error_description": "Too many requests"}),
        (200, {"error": "QUERY_LIMIT_EXCEEDED", "error_description": "Too many requests"}),
        (429, {"error": "OPERATION_TIME_LIMIT", "error_description": "Method is blocked"}),
        (500, {"error": "INTERNAL_SERVER_ERROR", "error_description": "Internal server error"}),
    ],
)
def test_bitrix24_limits_and_server_errors_are_retried(
    bitrix_crm: DeployedConsumer, http_fake: FakeHttpServer, status: int, body: dict[str, str]
) -> None:
    http_fake.respond(Scripted(status, body))

    delivery = bitrix_crm.deliver(telegram_envelope(telegram_update("private_start")))

    assert delivery.failed == delivery.message_ids
    assert bitrix_crm.queues.dead_letters() == []
    assert bitrix_crm.app.worker.last_outcome.reason == (
        f"bitrix24 crm.lead.add: HTTP {status} {body['error']}: {body['error_description']}"
    )


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (400, {"error": "", "error_description": "Access denied."}, "HTTP 400 error: Access denied."),
        (
            403,
            {"error": "INVALID_CREDENTIALS", "error_description": "Invalid request credentials"},
            "HTTP 403 INVALID_CREDENTIALS: Invalid request credentials",
        ),
        (404, {"error": "ERROR_METHOD_NOT_FOUND", "error_description": "Method not found!"}, None),
        (
            403,
            {"error": "INVALID_CREDENTIALS", "error_description": f"No rights for {BITRIX_CODE}, user 1"},
            "HTTP 403 INVALID_CREDENTIALS: No rights for ***, user 1",
        ),
    ],
)
def test_bitrix24_refusals_are_dead_lettered_with_the_error(
    bitrix_crm: DeployedConsumer,
    http_fake: FakeHttpServer,
    status: int,
    body: dict[str, str],
    reason: str | None,
) -> None:
    http_fake.respond(Scripted(status, body))

    delivery = bitrix_crm.deliver(telegram_envelope(telegram_update("private_start")))

    assert delivery.failed == []
    [dead] = bitrix_crm.dead_letter_reasons()
    expected = reason or f"HTTP {status} {body['error']}: {body['error_description']}"
    assert dead == f"bitrix24 crm.lead.add: {expected}"
    assert BITRIX_CODE not in dead


def test_an_invalid_crm_secret_dead_letters_without_quoting_it(
    run_consumer: Callable[[str], DeployedConsumer], put_secret: Callable[[str, str], None]
) -> None:
    crm = run_consumer("crm")
    put_secret("crm_api", json.dumps({"kind": "salesforce", "url": "https://example.test/s3cr3t-path"}))

    crm.deliver(telegram_envelope(telegram_update("private_start")))

    [reason] = crm.dead_letter_reasons()
    assert reason.startswith("CRM_API_SECRET_ID secret is invalid")
    assert "s3cr3t-path" not in reason
