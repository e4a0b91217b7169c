"""Credentials refreshed on refusal, and the account-level refusals that pause instead of dead-lettering.

Each consumer runs its real handler on moto queues against the vendor's stand-in on loopback; the
stand-ins are switched over HTTP (`local.fakes.accounts`: `/_account/block`, `/_credential/rotate`)
and the secrets rotated in moto, as an operator would.
"""

# ruff: noqa: F811 - the CRM fixtures are imported from test_crm_sources and requested by name

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from local.fakes.amocrm import AmoCrmFake
from local.fakes.bitrix24 import Bitrix24PortalFake
from local.fakes.telegram import TelegramFake
from pipeline import aws
from pipeline.pause import FIRST_SENT_ATTRIBUTE, PAUSE_SECONDS, PAUSED_METRIC, RETENTION_SECONDS
from pipeline.registry import secret_env_var
from tests.unit.consumer_support import (
    JOURNAL_TABLE,
    Output,
    Published,
    control,
    telegram_envelope,
    telegram_update,
)
from tests.unit.consumers.conftest import BOT_TOKEN, DeployedConsumer
from tests.unit.consumers.test_bot import bot, contact, start  # noqa: F401 - fixture, re-used
from tests.unit.consumers.test_crm_sources import (  # noqa: F401 - fixtures, re-used
    AMO_TOKEN,
    WEBHOOK_CODE,
    account,
    amocrm,
    bitrix24,
    deal_event,
    lead_event,
    lead_in,
    moved_deal,
    order_events,
    portal,
    statuses,
)

NEW_AMO_TOKEN = "amoNewLongLivedTokenAfterRotation4567"
NEW_WEBHOOK_CODE = "b24RotatedWebhookCode77"
NEW_BOT_TOKEN = "7000000001:AAHn3w-R0tat3d_TokenThatMustNotLeakX"


def rotate_secret(name: str, value: str) -> None:
    """The operator puts the new value (`aws secretsmanager put-secret-value`)."""
    aws.client("secretsmanager").put_secret_value(SecretId=f"{name}-secret", SecretString=value)
    assert secret_env_var(name)  # the consumers read it through <NAME>_SECRET_ID = "<name>-secret"


def paused_note(consumer: str) -> dict[str, Any] | None:
    item: dict[str, Any] | None = (
        aws.resource("dynamodb").Table(JOURNAL_TABLE).get_item(Key={"id": f"{consumer}#paused"}).get("Item")
    )
    return item


def resume(consumer: DeployedConsumer) -> dict[str, Any]:
    """Let SQS's clock run past the pause, then one invocation on what the queue delivers."""
    consumer.let_time_pass()
    event = consumer.queues.receive_event()
    response: dict[str, Any] = consumer.app.lambda_handler(event, consumer.context)
    consumer.queues.acknowledge(event, response)
    return {"event": event, "response": response}


def assert_paused(consumer: DeployedConsumer, log: Output, cause: str) -> None:
    """Nothing dead-lettered; the record waits in its queue for SQS's longest delay; the pause is
    counted with its cause and noted for `ops doctor`."""
    assert consumer.dead_letter_reasons() == []
    [wait] = consumer.waiting()
    assert PAUSE_SECONDS - 5 < wait <= PAUSE_SECONDS
    [line] = log.emf(PAUSED_METRIC)
    assert (line["consumer"], line["cause"]) == (consumer.queues.consumer.name, cause)
    note = paused_note(consumer.queues.consumer.name)
    assert note is not None and note["cause"] == cause and note["schema_version"] == 1


# -- a rotated credential works at once --------------------------------------------------------------
def test_amocrm_a_rotated_token_works_at_the_next_delivery_not_after_the_cache_expires(
    amocrm: DeployedConsumer, account: AmoCrmFake, order_events: Callable[[], list[dict[str, Any]]]
) -> None:
    first = lead_in(account, 70012)
    account.change_statuses([(first, 70013)])
    assert amocrm.deliver(lead_event(first, 70013, 70012)).failed == []  # the old token cached
    order_events()
    control(account.url, "/_credential/rotate", {"value": NEW_AMO_TOKEN})
    rotate_secret("amocrm_api", json.dumps({"base_url": account.base_url, "token": NEW_AMO_TOKEN}))
    second = lead_in(account, 70012)
    account.change_statuses([(second, 70013)])

    assert amocrm.deliver(lead_event(second, 70013, 70012)).failed == []

    assert amocrm.dead_letter_reasons() == [] and amocrm.waiting() == []
    assert statuses(order_events()) == [("processing", "ready_for_pickup")]


def test_bitrix24_a_rotated_webhook_code_works_at_the_next_delivery(
    bitrix24: DeployedConsumer,
    portal: Bitrix24PortalFake,
    order_events: Callable[[], list[dict[str, Any]]],
) -> None:
    assert bitrix24.deliver(deal_event(moved_deal(portal, "EXECUTING"))).failed == []
    order_events()
    control(portal.url, "/_credential/rotate", {"value": NEW_WEBHOOK_CODE})
    rotate_secret("bitrix24_api", json.dumps({"url": portal.rest_url()}))
    deal_id = moved_deal(portal, "EXECUTING")

    assert bitrix24.deliver(deal_event(deal_id)).failed == []

    assert bitrix24.dead_letter_reasons() == [] and bitrix24.waiting() == []
    assert [p["attributes"]["status"] for p in order_events()] == ["new", "ready_for_pickup"]


UPDATE_IDS = itertools.count(900_001)


def message() -> Published:
    """A /start in a private chat, each its own update (event)."""
    update = telegram_update("private_start")
    update["update_id"] = next(UPDATE_IDS)
    return telegram_envelope(update)


def sent(telegram: TelegramFake) -> list[dict[str, Any]]:
    return [
        call for call in telegram.calls() if call["path"].endswith("/sendMessage") and not call.get("fault")
    ]


def send_message_calls(telegram: TelegramFake) -> int:
    return len([call for call in telegram.calls() if call["path"].endswith("/sendMessage")])


def test_telegram_a_new_bot_token_works_at_the_next_delivery(
    autoreply: DeployedConsumer, telegram: TelegramFake
) -> None:
    assert autoreply.deliver(message()).failed == []  # the old token cached
    control(telegram.url, "/_credential/rotate", {"value": NEW_BOT_TOKEN})
    rotate_secret("telegram_bot_token", NEW_BOT_TOKEN)

    assert autoreply.deliver(message()).failed == []

    assert autoreply.dead_letter_reasons() == [] and autoreply.waiting() == []
    assert send_message_calls(telegram) == 3  # sent; refused (401) with the old token; sent


def test_the_bot_engine_re_reads_a_rotated_token_and_rebuilds_its_application(
    bot: DeployedConsumer, telegram: TelegramFake
) -> None:
    """The python-telegram-bot Application holds the token it was built with: after a 401 the
    engine re-reads the secret once past its cache and, the token being new, rebuilds the
    Application with it and runs the update again, as autoreply re-reads (the warm instance, not
    a new environment, picks up the rotation)."""
    assert bot.deliver(telegram_envelope(start())).failed == []  # built with the old token
    control(telegram.url, "/_credential/rotate", {"value": NEW_BOT_TOKEN})
    rotate_secret("telegram_bot_token", NEW_BOT_TOKEN)

    assert bot.deliver(telegram_envelope(contact())).failed == []

    assert bot.dead_letter_reasons() == [] and bot.waiting() == []
    answered = [call["body"] or {} for call in telegram.calls() if call.get("status") == 200]
    said = [body["text"] for body in answered if "text" in body]
    assert [t for t in said if t.startswith("Got it")] == ["Got it."] and said[-1].startswith("Shall we")
    refused = [call for call in telegram.calls() if call.get("status") == 401]
    assert refused  # the old token was tried once, then the new one


def test_the_bot_engine_still_pauses_when_the_re_read_token_is_the_refused_one(
    bot: DeployedConsumer, telegram: TelegramFake
) -> None:
    """Revoked and nothing new put: one re-read, the same token, the chat paused (not rebuilt,
    not dead-lettered)."""
    assert bot.deliver(telegram_envelope(start())).failed == []
    control(telegram.url, "/_credential/rotate", {"value": NEW_BOT_TOKEN})

    delivery = bot.deliver(telegram_envelope(contact()))

    assert delivery.failed == delivery.message_ids and bot.dead_letter_reasons() == []


def test_a_flood_of_refusals_re_reads_the_secret_once_a_minute_not_once_a_message(
    autoreply: DeployedConsumer, telegram: TelegramFake
) -> None:
    control(telegram.url, "/_credential/rotate", {"value": NEW_BOT_TOKEN})  # revoked, none put yet
    reads: list[str] = []
    aws.client("secretsmanager").meta.events.register(
        "before-call.secrets-manager.GetSecretValue", lambda **kwargs: reads.append("read")
    )

    for _ in range(5):
        assert autoreply.deliver(message()).failed == []

    assert autoreply.dead_letter_reasons() == [] and len(autoreply.waiting()) == 5
    assert len(reads) == 2  # the first read, cached; one re-read past the cache, unchanged
    assert send_message_calls(telegram) == 5  # the same token is not tried twice


# -- account-level refusals pause ----------------------------------------------------------------------
@pytest.mark.parametrize(("cause", "status"), [("unpaid", 402), ("blocked", 403)])
def test_amocrm_an_account_refused_pauses_its_events_and_resumes_by_itself(
    amocrm: DeployedConsumer,
    account: AmoCrmFake,
    order_events: Callable[[], list[dict[str, Any]]],
    output: Callable[[Any], Output],
    cause: str,
    status: int,
) -> None:
    lead_id = lead_in(account, 70012)
    account.change_statuses([(lead_id, 70013)])
    control(account.url, "/_account/block", {"cause": cause})
    log = output(amocrm.app.worker)

    assert amocrm.deliver(lead_event(lead_id, 70013, 70012)).failed == []

    assert_paused(amocrm, log, cause)
    [logged] = log.logs("record paused: the remote refused the account")
    assert f"HTTP {status}" in logged["reason"] and AMO_TOKEN not in json.dumps(log.read())
    assert order_events() == []

    # Still refused a pause later: paused again, still not dead-lettered.
    again = resume(amocrm)
    assert again["response"]["batchItemFailures"] == [] and amocrm.dead_letter_reasons() == []
    assert len(amocrm.waiting()) == 1

    control(account.url, "/_account/unblock")
    resumed = resume(amocrm)

    assert len(resumed["event"]["Records"]) == 1 and resumed["response"]["batchItemFailures"] == []
    assert amocrm.waiting() == [] and amocrm.dead_letter_reasons() == []
    assert statuses(order_events()) == [("processing", "ready_for_pickup")]


@pytest.mark.parametrize("cause", ["unpaid", "deleted", "blocked"])
def test_bitrix24_a_portal_refused_pauses_its_events_and_resumes_by_itself(
    bitrix24: DeployedConsumer,
    portal: Bitrix24PortalFake,
    order_events: Callable[[], list[dict[str, Any]]],
    output: Callable[[Any], Output],
    cause: str,
) -> None:
    deal_id = moved_deal(portal, "EXECUTING")
    control(portal.url, "/_account/block", {"cause": cause})
    log = output(bitrix24.app.worker)

    assert bitrix24.deliver(deal_event(deal_id), deal_event(deal_id)).failed == []

    assert bitrix24.dead_letter_reasons() == []
    assert len(bitrix24.waiting()) == 2
    expected = "blocked" if cause == "deleted" else cause
    assert {line["cause"] for line in log.emf(PAUSED_METRIC)} == {expected}
    assert WEBHOOK_CODE not in json.dumps(log.read())

    control(portal.url, "/_account/unblock")
    resumed = resume(bitrix24)

    assert resumed["response"]["batchItemFailures"] == [] and bitrix24.waiting() == []
    assert bitrix24.dead_letter_reasons() == []
    assert [p["attributes"]["status"] for p in order_events()] == ["new", "ready_for_pickup"]


def test_a_revoked_bot_token_pauses_the_replies_and_they_go_once_it_works(
    autoreply: DeployedConsumer, telegram: TelegramFake, output: Callable[[Any], Output]
) -> None:
    control(telegram.url, "/_account/block", {"cause": "revoked"})
    log = output(autoreply.app.worker)

    assert autoreply.deliver(message()).failed == []

    assert_paused(autoreply, log, "unauthorized")
    assert BOT_TOKEN not in json.dumps(log.read())
    control(telegram.url, "/_account/unblock")

    resumed = resume(autoreply)

    assert resumed["response"]["batchItemFailures"] == [] and autoreply.waiting() == []
    assert autoreply.dead_letter_reasons() == []
    assert send_message_calls(telegram) == 2  # refused (401), then sent once


def test_a_paused_record_is_dead_lettered_with_its_reason_before_its_queue_would_drop_it(
    amocrm: DeployedConsumer, account: AmoCrmFake
) -> None:
    """The bound: a record paused for as long as its queue keeps messages is not left to expire."""
    lead_id = lead_in(account, 70012)
    control(account.url, "/_account/block", {"cause": "unpaid"})
    first_sent = int((time.time() - RETENTION_SECONDS + PAUSE_SECONDS / 2) * 1000)
    published = lead_event(lead_id, 70013, 70012)
    amocrm.queues.send(published, {**published.attributes, FIRST_SENT_ATTRIBUTE: str(first_sent)})
    event = amocrm.queues.receive_event()

    response = amocrm.app.lambda_handler(event, amocrm.context)
    amocrm.queues.acknowledge(event, response)

    [reason] = amocrm.dead_letter_reasons()
    assert reason.startswith("paused 4.0 days, the queue's retention: account refused (unpaid)")
    assert amocrm.waiting() == []


def test_a_deleted_lead_is_still_ignored_not_paused(amocrm: DeployedConsumer) -> None:
    """What is wrong with one message is handled as before: no pause."""
    assert amocrm.deliver(lead_event(987654, 70013, 70012)).failed == []

    assert amocrm.waiting() == [] and amocrm.dead_letter_reasons() == []
    assert paused_note("amocrm") is None


def test_a_chat_that_blocked_the_bot_is_still_recorded_not_paused(
    autoreply: DeployedConsumer, telegram: TelegramFake
) -> None:
    telegram.add_faults({"fail_next": 1, "status": 403, "match": "sendMessage"})

    assert autoreply.deliver(message()).failed == []

    assert autoreply.waiting() == [] and autoreply.dead_letter_reasons() == []
    assert paused_note("autoreply") is None
