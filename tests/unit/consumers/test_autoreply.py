"""The autoreply consumer's real handler against a fake Telegram Bot API on loopback."""

from __future__ import annotations

import dataclasses
import json
import math
import socket
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from infra.config import PipelineSettings
from infra.environment import FunctionEnvironments
from local.fakes.telegram import TelegramFake
from local.fakes.telegram_api_gen import method_models
from pipeline import aws, bot_api, deadline, pacing
from pipeline.registry import CONSUMERS, secret_env_var
from pipeline.replies import parse_replies, team_replies
from pipeline.retention import CONSUMER_QUEUE_RETENTION, REDELIVERY_BOUND
from pipeline.telegram import BOT_USERNAME_ENV
from tests.unit.consumer_support import (
    FIXTURES,
    JOURNAL_TABLE,
    Output,
    Published,
    age_idempotency_records,
    telegram_envelope,
    telegram_update,
)
from tests.unit.consumers.conftest import (
    BOT_TOKEN,
    DeployedConsumer,
    FakeHttpServer,
    Recorded,
    Scripted,
)

ANNA_CHAT = 123456789
BLOCKED = Scripted(
    403, {"ok": False, "error_code": 403, "description": "Forbidden: bot was blocked by the user"}
)

# Every Telegram update kind in the fixtures: what the consumer may be handed.
UPDATE_FIXTURES = sorted(path.stem for path in (FIXTURES / "telegram").glob("*.json"))


def too_many_requests(retry_after: int) -> Scripted:
    return Scripted(
        429,
        {
            "ok": False,
            "error_code": 429,
            "description": f"Too Many Requests: retry after {retry_after}",
            "parameters": {"retry_after": retry_after},
        },
    )


@pytest.fixture
def bot(scripted_autoreply: DeployedConsumer) -> DeployedConsumer:
    return scripted_autoreply


@pytest.fixture
def strict_telegram(
    run_consumer: Callable[[str], DeployedConsumer],
    put_secret: Callable[[str, str], None],
    telegram: TelegramFake,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[DeployedConsumer, TelegramFake]:
    """The consumer against the strict Telegram stand-in (a call Telegram would refuse gets 400)."""
    consumer = run_consumer("autoreply")
    put_secret("telegram_bot_token", BOT_TOKEN)
    monkeypatch.setenv("TELEGRAM_API_BASE", telegram.url)
    return consumer, telegram


def default_replies() -> dict[str, str]:
    """The texts of the team's file as shipped (team/autoreply.json, an example)."""
    return parse_replies(team_replies())


def api_call(request: Recorded) -> tuple[str, dict[str, Any]]:
    """(method, params) of a Bot API request, checked against aiogram's model of that method."""
    prefix = f"/bot{BOT_TOKEN}/"
    assert request.path.startswith(prefix)
    method = request.path.removeprefix(prefix)
    model = method_models()[method]  # aiogram's model of the method: the oracle for what we send
    model.model_validate(request.body)
    assert set(request.body) <= set(model.model_fields)  # aiogram allows extras; Telegram would ignore them
    return method, request.body


def test_one_send_message_per_command_update(bot: DeployedConsumer, http_fake: FakeHttpServer) -> None:
    start = telegram_envelope(telegram_update("private_start"))
    help_in_group = telegram_envelope(telegram_update("group_command"))  # "/help@MyShopBot ..."
    chatter = telegram_envelope(telegram_update("group_message"))  # "/help" mid-text: not a command

    assert bot.deliver(start, help_in_group, chatter).failed == []
    assert bot.deliver(start).failed == []  # redelivered: the worker's idempotency, no second reply

    calls = sorted((api_call(r) for r in http_fake.requests), key=lambda call: call[1]["chat_id"])
    assert calls == [
        ("sendMessage", {"chat_id": -4012345678, "text": default_replies()["/help"]}),
        ("sendMessage", {"chat_id": ANNA_CHAT, "text": default_replies()["/start"]}),
    ]


def test_a_message_redriven_days_later_gets_no_second_reply_until_the_redelivery_bound(
    bot: DeployedConsumer, http_fake: FakeHttpServer
) -> None:
    """The /start update is answered, then the same message comes back from a DLQ redrive after
    it spent the queue's retention (4 days: the old 72 h TTL had run out) and again just before
    the redelivery bound: no second sendMessage.

    Time passes by moving the idempotency record's `expiration` back (`age_idempotency_records`)
    rather than the clock: Powertools keeps no other time and compares it with `datetime.now()`
    on every read, so an aged record is exactly a record written that long ago, while moto's
    queues and the HTTP fake keep running on real time.
    """
    start = telegram_envelope(telegram_update("private_start"))
    assert bot.deliver(start).failed == []
    assert len(http_fake.requests) == 1

    aged = timedelta(0)
    for redriven_after in (CONSUMER_QUEUE_RETENTION, REDELIVERY_BOUND - timedelta(minutes=1)):
        assert age_idempotency_records("autoreply", redriven_after - aged) == 1
        aged = redriven_after
        assert bot.deliver(start).failed == []
        assert len(http_fake.requests) == 1, f"replied again after {redriven_after}"
    assert (bot.app.worker.counts["processed"], bot.app.worker.counts["duplicate"]) == (1, 2)

    # Past the bound the record counts as gone and the update is answered again: the aging is real.
    age_idempotency_records("autoreply", timedelta(minutes=2))
    assert bot.deliver(start).failed == []
    assert len(http_fake.requests) == 2


def test_configured_replies_and_the_default_reply(
    bot: DeployedConsumer, http_fake: FakeHttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "AUTOREPLY_REPLIES", json.dumps({"/START": "Willkommen!", "default": "Danke, wir melden uns."})
    )

    bot.deliver(
        telegram_envelope(telegram_update("private_start")),
        telegram_envelope(telegram_update("group_command")),
        telegram_envelope(telegram_update("business_message")),
    )

    calls = sorted((api_call(r)[1] for r in http_fake.requests), key=lambda params: params["chat_id"])
    assert calls == [
        # The table is the whole table: /help has no reply in it, so it gets the default one.
        {"chat_id": -4012345678, "text": "Danke, wir melden uns."},
        {"chat_id": ANNA_CHAT, "text": "Willkommen!"},
        # A plain message gets "default", in the business chat it came from.
        {
            "chat_id": 987654321,
            "text": "Danke, wir melden uns.",
            "business_connection_id": "AAEuLdDTNT4BAADu9qK1yQfDbVc",
        },
    ]


def _group_command(text: str, length: int) -> Published:
    update = telegram_update("group_command")
    update["message"]["text"] = text
    update["message"]["entities"] = [{"offset": 0, "length": length, "type": "bot_command"}]
    return telegram_envelope(update)


def test_a_command_for_another_bot_gets_no_reply_when_the_username_is_set(
    bot: DeployedConsumer, http_fake: FakeHttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BOT_USERNAME_ENV, "MyShopBot")
    replies = {**default_replies(), "default": "We'll be in touch."}
    monkeypatch.setenv("AUTOREPLY_REPLIES", json.dumps(replies))
    ours = _group_command("/start@myshopbot", 16)
    plain = telegram_envelope(telegram_update("private_start"))  # "/start"
    theirs = _group_command("/start@other_bot", 16)
    theirs_plain = _group_command("/weather@other_bot Vienna", 18)  # not even the default reply

    assert bot.deliver(ours, plain, theirs, theirs_plain).failed == []

    calls = sorted((api_call(r)[1] for r in http_fake.requests), key=lambda params: params["chat_id"])
    assert calls == [
        {"chat_id": -4012345678, "text": default_replies()["/start"]},
        {"chat_id": ANNA_CHAT, "text": default_replies()["/start"]},
    ]


def test_the_username_setting_reaches_every_telegram_consumer() -> None:
    def environment(settings: PipelineSettings, name: str) -> dict[str, str]:
        consumer = next(c for c in CONSUMERS if c.name == name)
        names = {n: n for n in (*consumer.tables, *consumer.secrets)}
        return FunctionEnvironments(settings, "Stack").worker(
            consumer, queue_url="q", dlq_url="d", tables=names, secrets=names, topic_arn="t"
        )

    named = PipelineSettings(telegram_bot_username="MyShopBot")
    for name in ("autoreply", "crm", "analytics", "store"):
        assert environment(named, name)[BOT_USERNAME_ENV] == "MyShopBot"
    assert BOT_USERNAME_ENV not in environment(named, "sms")  # not a Telegram consumer
    assert BOT_USERNAME_ENV not in environment(PipelineSettings(), "autoreply")
    with pytest.raises(ValueError, match="telegram_bot_username"):
        PipelineSettings(telegram_bot_username="@MyShopBot")


def test_callback_queries_are_answered(bot: DeployedConsumer, http_fake: FakeHttpServer) -> None:
    assert bot.deliver(telegram_envelope(telegram_update("callback_query"))).failed == []

    [request] = http_fake.requests
    assert api_call(request) == ("answerCallbackQuery", {"callback_query_id": "530252834412826613"})


def test_429_retries_after_telegrams_retry_after(bot: DeployedConsumer, http_fake: FakeHttpServer) -> None:
    http_fake.respond(too_many_requests(7))

    delivery = bot.deliver(telegram_envelope(telegram_update("private_start")))

    assert delivery.failed == delivery.message_ids
    [record] = delivery.event["Records"]
    assert 6.0 < bot.seconds_until_visible(record["receiptHandle"]) <= 7.0
    assert bot.queues.dead_letters() == []


def test_403_is_recorded_as_blocked_and_neither_retried_nor_dead_lettered(
    bot: DeployedConsumer, http_fake: FakeHttpServer, output: Callable[[Any], Output]
) -> None:
    out = output(bot.app.worker)
    http_fake.respond(BLOCKED)
    start = telegram_envelope(telegram_update("private_start"))

    delivery = bot.deliver(start)

    assert delivery.failed == []
    assert bot.queues.dead_letters() == []
    item = aws.resource("dynamodb").Table(JOURNAL_TABLE).get_item(Key={"id": f"blocked#{ANNA_CHAT}"})["Item"]
    assert item["chat_id"] == ANNA_CHAT
    assert item["description"] == "Forbidden: bot was blocked by the user"
    assert item["event_id"] == start.envelope.event_id
    # Personal data (a chat id): kept as long as the update could come back (pipeline.personal).
    assert time.time() < item["expiration"] <= time.time() + REDELIVERY_BOUND.total_seconds()
    [logged] = out.logs("bot blocked in chat: recorded, not retried")
    assert logged["chat_id"] == ANNA_CHAT


def test_400_is_dead_lettered_with_telegrams_description(
    bot: DeployedConsumer, http_fake: FakeHttpServer
) -> None:
    description = 'Bad Request: can\'t parse entities: Unsupported start tag "b" at byte offset 0'
    http_fake.respond(Scripted(400, {"ok": False, "error_code": 400, "description": description}))

    assert bot.deliver(telegram_envelope(telegram_update("private_start"))).failed == []

    assert bot.dead_letter_reasons() == [f"telegram sendMessage: HTTP 400 {description}"]


def test_an_expired_callback_query_is_dropped_not_dead_lettered(
    bot: DeployedConsumer, http_fake: FakeHttpServer
) -> None:
    description = "Bad Request: query is too old and response timeout expired or query ID is invalid"
    http_fake.respond(Scripted(400, {"ok": False, "error_code": 400, "description": description}))

    assert bot.deliver(telegram_envelope(telegram_update("callback_query"))).failed == []
    assert bot.queues.dead_letters() == []


def test_the_bot_token_never_appears_in_logs_or_reasons(
    bot: DeployedConsumer,
    http_fake: FakeHttpServer,
    output: Callable[[Any], Output],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    output(bot.app.worker)
    echo = {"ok": False, "error_code": 400, "description": f"Bad Request: bad token {BOT_TOKEN}"}
    http_fake.respond(too_many_requests(3), Scripted(500, {"ok": False}), BLOCKED, Scripted(400, echo))
    base = dict(telegram_update("private_start"))
    updates = [telegram_envelope({**base, "update_id": 810_000_200 + n}) for n in range(4)]
    reasons = []
    for update in updates:
        delivery = bot.deliver(update)
        assert bot.app.worker.last_outcome is not None
        reasons.append(bot.app.worker.last_outcome.reason or "")
        # A retried record's redelivery is not this test's subject: on a slow machine its delay
        # (429's 3 s) would pass before the next delivery and bring it back in that batch.
        for record in delivery.event["Records"]:
            if record["messageId"] in delivery.failed:
                bot.queues.sqs.change_message_visibility(
                    QueueUrl=bot.queues.queue_url,
                    ReceiptHandle=record["receiptHandle"],
                    VisibilityTimeout=3600,
                )
    with socket.socket() as probe:  # then Telegram is unreachable
        probe.bind(("127.0.0.1", 0))
        monkeypatch.setenv("TELEGRAM_API_BASE", f"http://127.0.0.1:{probe.getsockname()[1]}")
    bot.deliver(telegram_envelope({**base, "update_id": 810_000_299}))
    reasons.append(bot.app.worker.last_outcome.reason or "")

    printed = capsys.readouterr().out
    assert len(http_fake.requests) == 4 and all(BOT_TOKEN in r.path for r in http_fake.requests)
    assert "HTTP 429" in reasons[0] and "HTTP 500" in reasons[1] and "connection failed" in reasons[4]
    assert "record will be retried" in printed and "record sent to the DLQ" in printed  # logs were captured
    leaks = [text for text in [printed, *reasons, *bot.dead_letter_reasons()] if BOT_TOKEN in text]
    assert leaks == [], "the bot token leaked"  # never print the leaking text itself


def test_the_token_is_read_once_and_cached(
    bot: DeployedConsumer, http_fake: FakeHttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    bot.deliver(telegram_envelope(telegram_update("private_start")))
    # Gone from Secrets Manager: a warm Lambda still answers from its cache (max_age 300 s).
    aws.client("secretsmanager").delete_secret(
        SecretId=bot.queues.environment()[secret_env_var("telegram_bot_token")],
        ForceDeleteWithoutRecovery=True,
    )

    assert bot.deliver(telegram_envelope(telegram_update("group_command"))).failed == []
    assert len(http_fake.requests) == 2


@pytest.mark.parametrize(
    ("token", "replies", "reason"),
    [
        ("not-a-token", "", "TELEGRAM_BOT_TOKEN_SECRET_ID secret is not a bot token (<id>:<secret>)"),
        (BOT_TOKEN, "{not json", "AUTOREPLY_REPLIES is not valid JSON"),
        (BOT_TOKEN, '{"start": "no slash"}', "AUTOREPLY_REPLIES must map"),
    ],
)
def test_misconfiguration_dead_letters_with_a_clear_reason(
    run_consumer: Callable[[str], DeployedConsumer],
    put_secret: Callable[[str, str], None],
    monkeypatch: pytest.MonkeyPatch,
    http_fake: FakeHttpServer,
    token: str,
    replies: str,
    reason: str,
) -> None:
    consumer = run_consumer("autoreply")
    put_secret("telegram_bot_token", token)
    monkeypatch.setenv("TELEGRAM_API_BASE", http_fake.base_url)
    monkeypatch.setenv("AUTOREPLY_REPLIES", replies)

    assert consumer.deliver(telegram_envelope(telegram_update("private_start"))).failed == []

    [dead] = consumer.dead_letter_reasons()
    assert dead.startswith(reason)
    assert http_fake.requests == []


def test_every_call_to_the_telegram_stand_in_is_valid_under_aiogram_s_models(
    strict_telegram: tuple[DeployedConsumer, TelegramFake],
) -> None:
    bot, telegram = strict_telegram
    envelopes = [telegram_envelope(telegram_update(name)) for name in UPDATE_FIXTURES]

    for start in range(0, len(envelopes), 10):  # an SQS batch holds 10
        assert bot.deliver(*envelopes[start : start + 10]).failed == []

    assert bot.dead_letter_reasons() == []  # the strict fake refused nothing
    calls = telegram.calls()
    prefix = "/bot<token>/"
    methods = {call["path"].removeprefix(prefix) for call in calls}
    assert methods == {"sendMessage", "answerCallbackQuery"}
    models = method_models()
    for call in calls:
        model = models[call["path"].removeprefix(prefix)]
        model.model_validate(call["body"])
        assert set(call["body"]) <= set(model.model_fields)


def test_a_reply_is_not_started_without_the_time_to_send_and_record_it(
    bot: DeployedConsumer, http_fake: FakeHttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by `python -m local chaos --seed 5` (autoreply at 6 s on a loaded machine): an
    invocation that timed out after Telegram took the reply and before the idempotency record was
    completed was retried and sent it again. Now, with less time left than the call's timeout and
    the record's write, the call is not made: the record is retried, and replied to once."""
    start = telegram_envelope(telegram_update("private_start"))
    short = int((deadline.needed(bot_api.TIMEOUT_SECONDS) - 0.5) * 1000)
    monkeypatch.setattr(bot.context, "get_remaining_time_in_millis", lambda: short)

    late = bot.deliver(start)

    assert late.failed == late.message_ids
    assert http_fake.requests == []
    outcome = bot.app.worker.last_outcome
    assert outcome is not None and outcome.status == "retry"
    assert outcome.reason is not None and "telegram sendMessage not started" in outcome.reason
    monkeypatch.setattr(bot.context, "get_remaining_time_in_millis", lambda: 29_000)

    assert bot.deliver(start).failed == []  # Telegram's resend, or the retry, in a fresh invocation
    assert [api_call(r)[0] for r in http_fake.requests] == ["sendMessage"]


def test_a_consumer_calling_the_bot_api_with_too_short_a_timeout_for_its_batch_is_refused_at_synth() -> None:
    """Its batch's last record must still have a call's time after the others, paced a second
    apart in one chat: else it is refused in every invocation and retried into the DLQ."""
    autoreply = next(c for c in CONSUMERS if c.name == "autoreply")
    one_record = deadline.needed(bot_api.TIMEOUT_SECONDS)
    paced = (autoreply.batch_size - 1) * pacing.TELEGRAM_CHAT_INTERVAL_SECONDS
    least = one_record + paced + pacing.PACING_SLACK_SECONDS
    assert autoreply.least_batch_timeout_seconds == least and autoreply.timeout_seconds >= least

    with pytest.raises(
        ValueError, match=rf"autoreply: timeout_seconds 20 leaves no call .* at least {least:g}"
    ):
        dataclasses.replace(autoreply, timeout_seconds=20)
    assert dataclasses.replace(autoreply, timeout_seconds=math.ceil(least)).timeout_seconds == math.ceil(
        least
    )
    smaller = dataclasses.replace(autoreply, batch_size=3, timeout_seconds=math.ceil(one_record) + 3)
    assert smaller.least_batch_timeout_seconds == one_record + 2 + pacing.PACING_SLACK_SECONDS
    alone = dataclasses.replace(autoreply, batch_size=1, timeout_seconds=math.ceil(one_record))
    assert alone.least_batch_timeout_seconds == one_record  # nothing paced before it


def test_a_callback_answer_made_again_after_its_answer_was_lost_is_success_not_a_dead_letter(
    strict_telegram: tuple[DeployedConsumer, TelegramFake],
) -> None:
    """Telegram took the answerCallbackQuery but its answer never came back: the retry answers
    again and Telegram says the query is answered already ("query is too old ... or query ID is
    invalid", the stand-in as Telegram): nothing is left to do (pipeline.bot_api_errors, done)."""
    bot, telegram = strict_telegram
    telegram.add_faults({"drop_answer_next": 1, "match": "answerCallbackQuery"})

    assert len(bot.deliver(telegram_envelope(telegram_update("callback_query"))).failed) == 1
    bot.let_time_pass()
    event = bot.queues.receive_event()
    response = bot.app.lambda_handler(event, bot.context)
    bot.queues.acknowledge(event, response)

    assert response["batchItemFailures"] == [] and bot.queues.dead_letters() == []
    assert [c["status"] for c in telegram.calls()] == [200, 400]  # taken (answer lost), then "too old"
