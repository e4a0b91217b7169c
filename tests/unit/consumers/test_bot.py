"""The bot consumer's real handler running the example bot (functions/bot/examples/lead_bot.py)
against the Telegram stand-in in strict mode (each call validated with aiogram's model of it),
the CRM as a webhook fake, and moto's DynamoDB for the state and the call journal."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable
from typing import Any

import pytest

from local.fakes.telegram import TelegramFake, strict_refusal
from pipeline import aws
from pipeline.errors import PermanentError
from pipeline.pause import pause_seconds
from pipeline.telegram_bot import calls as calls_module
from pipeline.telegram_bot.persistence import DynamoDBPersistence
from pipeline.telegram_bot.runner import BotRunner
from pipeline.telegram_bot.state import StateConflict, StateTable, conversation_key
from tests.unit.consumer_support import (
    BOT_STATE_TABLE,
    JOURNAL_TABLE,
    Published,
    journal_items,
    telegram_envelope,
    telegram_update,
)
from tests.unit.consumers.conftest import BOT_TOKEN, DeployedConsumer, FakeHttpServer, Scripted

EXAMPLE = "bot.examples.lead_bot:build"
ANNA = 123456789
PHONE = "+491701234567"
CRM_URL_PATH = "/leads"


def start(update_id: int = 900001) -> dict[str, Any]:
    update = telegram_update("private_start")
    update["update_id"] = update_id
    return update


def contact(update_id: int = 900002) -> dict[str, Any]:
    update = telegram_update("contact")
    update["update_id"] = update_id
    return update


def press(data: str, update_id: int = 900003, message_id: int = 3) -> dict[str, Any]:
    update = telegram_update("callback_query")
    update["update_id"] = update_id
    query = update["callback_query"]
    query["id"] = f"q{update_id}"
    query["data"] = data
    query["message"]["message_id"] = message_id
    query["message"]["from"] = {"id": 7000000001, "is_bot": True, "first_name": "Bot", "username": "bot"}
    return update


@pytest.fixture
def bot(
    deploy_bot: Callable[[str], DeployedConsumer],
    put_secret: Callable[[str, str], None],
    http_fake: FakeHttpServer,
) -> DeployedConsumer:
    consumer = deploy_bot(EXAMPLE)
    put_secret("crm_api", f'{{"kind": "webhook", "url": "{http_fake.base_url}{CRM_URL_PATH}"}}')
    http_fake.default = Scripted(200, {"id": "lead-1"})
    return consumer


def sent(telegram: TelegramFake, method: str | None = None) -> list[dict[str, Any]]:
    calls = [c for c in telegram.calls() if c["fault"] is None and not c["path"].endswith("/getMe")]
    return [c for c in calls if method is None or c["path"].endswith(f"/{method}")]


def texts(telegram: TelegramFake) -> list[str]:
    return [c["body"]["text"] for c in sent(telegram) if "text" in (c["body"] or {})]


def stored_state(name: str = "lead") -> Any:
    return StateTable(BOT_STATE_TABLE).get(conversation_key(name, (ANNA, ANNA))).value


def leads(http_fake: FakeHttpServer) -> list[Any]:
    return [r.body for r in http_fake.requests if r.path == CRM_URL_PATH]


def conversation(bot: DeployedConsumer) -> list[Published]:
    return [telegram_envelope(start()), telegram_envelope(contact()), telegram_envelope(press("confirm"))]


def test_the_example_bot_completes_its_conversation_and_creates_one_lead(
    bot: DeployedConsumer, telegram: TelegramFake, http_fake: FakeHttpServer
) -> None:
    first, second, third = conversation(bot)
    assert bot.deliver(first).failed == []
    assert stored_state() == 0  # PHONE
    assert bot.deliver(second).failed == []
    assert stored_state() == 1  # CONFIRM
    assert bot.deliver(third).failed == []
    assert stored_state() is None  # ended: the item is deleted

    assert [c["path"].rsplit("/", 1)[-1] for c in sent(telegram)] == [
        "sendMessage",
        "sendMessage",
        "sendMessage",
        "answerCallbackQuery",
        "editMessageText",
    ]
    assert texts(telegram)[2] == f"Shall we call you at {PHONE}?"
    keyboard = json.loads(sent(telegram, "sendMessage")[0]["body"]["reply_markup"])
    assert keyboard["keyboard"][0][0]["request_contact"] is True
    assert sent(telegram, "editMessageText")[0]["body"]["text"] == "Thanks, we will call you soon."
    [lead] = leads(http_fake)
    assert lead["phone"] == PHONE and lead["telegram_user_id"] == ANNA and lead["trigger"] == "contact"
    assert lead["event_id"] == third.envelope.event_id
    # user_data held the phone between the steps and was emptied at the end.
    assert StateTable(BOT_STATE_TABLE).get(f"user#{ANNA}").value is None


def test_a_redelivered_update_is_answered_once(bot: DeployedConsumer, telegram: TelegramFake) -> None:
    first = telegram_envelope(start())
    bot.deliver(first)
    bot.deliver(first)
    assert len(sent(telegram, "sendMessage")) == 1


def test_an_edited_message_mid_conversation_is_no_step_and_no_failure(
    bot: DeployedConsumer, telegram: TelegramFake
) -> None:
    """PTB's message handlers match edits too; the example takes new messages only."""
    bot.deliver(telegram_envelope(start()))
    for update_id, text in ((900010, "/start"), (900011, PHONE)):
        edit = telegram_update("edited_message")
        edit["update_id"] = update_id
        edit["edited_message"]["text"] = text
        if text.startswith("/"):
            edit["edited_message"]["entities"] = [{"type": "bot_command", "offset": 0, "length": len(text)}]
        assert bot.deliver(telegram_envelope(edit)).failed == []
    assert stored_state() == 0  # still waiting for the phone
    assert len(sent(telegram, "sendMessage")) == 1


class Crash(Exception):
    """Stands for the process dying at the hook point."""


def test_a_crash_after_a_sent_message_replays_the_step_without_sending_it_again(
    bot: DeployedConsumer, telegram: TelegramFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second, third = conversation(bot)
    bot.deliver(first)
    original = calls_module.CallJournal.put
    crashed: list[str] = []

    def put_then_crash(
        self: calls_module.CallJournal, event_id: str, index: int, method: str, *rest: Any
    ) -> None:
        original(self, event_id, index, method, *rest)
        if index == 1 and not crashed:  # after "Shall we call you at ...?" was sent and journaled
            crashed.append(method)
            raise Crash

    monkeypatch.setattr(calls_module.CallJournal, "put", put_then_crash)
    failed = bot.deliver(second)
    assert crashed == ["sendMessage"] and len(failed.failed) == 1
    assert stored_state() == 0  # the step's state was not committed
    assert texts(telegram)[-1].startswith("Shall we call you at")

    # SQS redelivers it once its backoff has passed (made to pass now): the chat's next update
    # waits behind it in the FIFO queue until then.
    [record] = failed.event["Records"]
    aws.client("sqs").change_message_visibility(
        QueueUrl=bot.queues.queue_url, ReceiptHandle=record["receiptHandle"], VisibilityTimeout=0
    )
    redelivery = bot.queues.receive_event()
    assert [r["body"] for r in redelivery["Records"]] == [record["body"]]
    again = bot.app.lambda_handler(redelivery, bot.context)
    bot.queues.acknowledge(redelivery, again)
    assert again["batchItemFailures"] == []
    assert stored_state() == 1
    assert texts(telegram).count(f"Shall we call you at {PHONE}?") == 1
    assert texts(telegram).count("Got it.") == 1
    assert bot.deliver(third).failed == []
    assert stored_state() is None


# Two tiny PNGs (1x1, different pixels): the album's uploads.
RED = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108020000009077"
    "53de0000000c4944415408d763f8cfc000000301010018dd8db00000000049454e44ae426082"
)
BLUE = RED.replace(bytes.fromhex("63f8cfc0"), bytes.fromhex("636060f8"))


def test_a_crash_after_a_sent_album_replays_it_from_the_journal_not_sending_it_again(
    bot: DeployedConsumer, telegram: TelegramFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PTB names each upload `attach://<random>` anew per call: the replayed sendMediaGroup must
    still match its journal entry (same files, same order)."""
    from bot.examples import lead_bot
    from telegram import InputMediaPhoto

    from pipeline.telegram_bot.transport import PooledRequest

    original_start = lead_bot.start

    async def start_with_an_album(update: Any, context: Any) -> int:
        state = await original_start(update, context)
        await update.message.reply_media_group(
            [InputMediaPhoto(RED), InputMediaPhoto(BLUE, caption="Our office")]
        )
        return state

    monkeypatch.setattr(lead_bot, "start", start_with_an_album)
    bot.app.runner.__init__()  # the handlers are bound when the conversation is built
    # The stand-in's strict check takes the `attach://` parts for unknown parameters, and it
    # records a multipart body as text: the album is caught as PTB sends it over HTTP instead,
    # and checked against aiogram's model below.
    telegram.strict = False
    albums: list[tuple[dict[str, str], dict[str, Any]]] = []
    send = PooledRequest.do_request

    async def caught(self: PooledRequest, url: str, method: str, request_data: Any = None, **kw: Any) -> Any:
        if url.endswith("/sendMediaGroup"):
            albums.append((request_data.json_parameters, request_data.multipart_data))
        return await send(self, url, method, request_data, **kw)

    monkeypatch.setattr(PooledRequest, "do_request", caught)
    original_put = calls_module.CallJournal.put
    crashed: list[str] = []

    def put_then_crash(
        self: calls_module.CallJournal, event_id: str, index: int, method: str, *rest: Any
    ) -> None:
        original_put(self, event_id, index, method, *rest)
        if method == "sendMediaGroup" and not crashed:  # the album is sent and journaled
            crashed.append(method)
            raise Crash

    monkeypatch.setattr(calls_module.CallJournal, "put", put_then_crash)
    failed = bot.deliver(telegram_envelope(start()))
    assert crashed == ["sendMediaGroup"] and len(failed.failed) == 1
    assert stored_state() is None  # the step's state was not committed

    [record] = failed.event["Records"]
    aws.client("sqs").change_message_visibility(
        QueueUrl=bot.queues.queue_url, ReceiptHandle=record["receiptHandle"], VisibilityTimeout=0
    )
    redelivery = bot.queues.receive_event()
    again = bot.app.lambda_handler(redelivery, bot.context)
    bot.queues.acknowledge(redelivery, again)
    assert again["batchItemFailures"] == []
    assert stored_state() == 0
    assert len(sent(telegram, "sendMediaGroup")) == 1
    [(parameters, uploads)] = albums  # sent once, answered from the journal on replay
    media = json.loads(parameters["media"])
    assert strict_refusal("sendMediaGroup", {**parameters, "media": media}) is None
    assert [m["type"] for m in media] == ["photo", "photo"] and media[1]["caption"] == "Our office"
    assert [uploads[m["media"].removeprefix("attach://")][1] for m in media] == [RED, BLUE]
    assert texts(telegram).count(lead_bot.ASK_PHONE) == 1


def test_a_replay_after_the_state_was_committed_runs_no_handler(
    bot: DeployedConsumer, telegram: TelegramFake
) -> None:
    """A crash after the commit, before the idempotency record: the marker stops a second run."""
    first, second, _ = conversation(bot)
    bot.deliver(first)
    bot.deliver(second)
    before = len(sent(telegram))
    outcome = bot.app.runner.process(second.envelope)  # as if idempotency had not recorded it
    assert outcome == {"bot": "already applied"}
    assert len(sent(telegram)) == before
    assert stored_state() == 1


def second_instance() -> BotRunner:
    return BotRunner()


def test_a_warm_instance_reads_the_conversation_another_instance_moved_on(
    bot: DeployedConsumer, telegram: TelegramFake, http_fake: FakeHttpServer
) -> None:
    first, second, third = conversation(bot)
    other = second_instance()
    bot.deliver(first)  # instance A: warm, conversation at PHONE in its memory
    assert other.process(second.envelope)["bot"] == "processed"  # instance B moves it to CONFIRM
    assert bot.deliver(third).failed == []  # A must act on CONFIRM, not on its stale PHONE
    assert sent(telegram, "editMessageText")[0]["body"]["text"] == "Thanks, we will call you soon."
    assert len(leads(http_fake)) == 1


def test_two_instances_racing_on_the_same_state_never_overwrite_each_other(
    bot: DeployedConsumer, telegram: TelegramFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second, _ = conversation(bot)
    bot.deliver(first)
    runner: BotRunner = bot.app.runner
    other = second_instance()
    rival = telegram_envelope(contact(update_id=900010))
    raced: list[dict[str, Any]] = []
    original = StateTable.commit

    def commit_after_the_rival(self: StateTable, writes: Any, event_id: str) -> Any:
        if event_id == second.envelope.event_id and not raced:
            # Instance B commits the same chat's state while A is between its read and its write.
            thread = threading.Thread(target=lambda: raced.append(other.process(rival.envelope)))
            thread.start()
            thread.join()
        return original(self, writes, event_id)

    monkeypatch.setattr(StateTable, "commit", commit_after_the_rival)
    with pytest.raises(StateConflict):
        runner.process(second.envelope)
    assert raced[0]["bot"] == "processed"
    # B's state stands (version 2: A's stale write was refused), not A's.
    table = StateTable(BOT_STATE_TABLE)
    assert table.get(conversation_key("lead", (ANNA, ANNA))).version == 2
    assert not table.applied(second.envelope.event_id)


def test_the_persistence_refuses_a_write_over_a_version_it_did_not_read(moto_aws: None) -> None:
    table = StateTable(BOT_STATE_TABLE)
    a, b = DynamoDBPersistence(table), DynamoDBPersistence(table)
    for persistence, value in ((a, {"n": 1}), (b, {"n": 2})):
        persistence._read("user#1")
        persistence._stage("user#1", value)
    a.commit("event-a")
    with pytest.raises(StateConflict):
        b.commit("event-b")
    assert table.get("user#1").value == {"n": 1}


@pytest.mark.parametrize(
    ("fault", "status", "delay"),
    [
        ({"rate_limit_next": 1, "retry_after": 9}, "retry", 9),
        ({"fail_next": 1, "status": 502}, "retry", None),
    ],
)
def test_transient_bot_api_failures_retry_the_record(
    bot: DeployedConsumer, telegram: TelegramFake, fault: dict[str, Any], status: str, delay: int | None
) -> None:
    bot.deliver(telegram_envelope(start()))  # the Application is initialized (getMe)
    telegram.add_faults({**fault, "match": "sendMessage"})
    delivery = bot.deliver(telegram_envelope(contact()))
    assert len(delivery.failed) == 1
    outcome = bot.app.worker.last_outcome
    assert outcome.status == status
    if delay is not None:
        assert outcome.delay_seconds == delay


def test_a_bad_request_is_dead_lettered_with_its_reason(
    bot: DeployedConsumer, telegram: TelegramFake
) -> None:
    bot.deliver(telegram_envelope(start()))
    telegram.add_faults({"fail_next": 1, "status": 400, "match": "sendMessage"})
    assert bot.deliver(telegram_envelope(contact())).failed == []
    [reason] = bot.dead_letter_reasons()
    assert reason == "telegram sendMessage: HTTP 400 Bad Request"
    assert BOT_TOKEN not in reason
    assert stored_state() == 0  # the step did not happen: redriven, it runs from PHONE again


def test_a_blocked_bot_is_recorded_and_acknowledged_as_autoreply_does(
    bot: DeployedConsumer, telegram: TelegramFake
) -> None:
    telegram.add_faults({"fail_next": 1, "status": 403, "match": "sendMessage"})
    assert bot.deliver(telegram_envelope(start())).failed == []
    assert bot.dead_letter_reasons() == []
    item = aws.resource("dynamodb").Table(JOURNAL_TABLE).get_item(Key={"id": f"blocked#{ANNA}"})["Item"]
    assert item["chat_id"] == ANNA


def test_a_revoked_bot_token_pauses_the_chat_in_order_and_it_resumes_by_itself(
    bot: DeployedConsumer, telegram: TelegramFake
) -> None:
    """The chat's updates wait together, hidden for the ordered consumer's pause (its FIFO queue
    cannot take a re-sent copy without breaking the chat's order): none dead-lettered, none
    counted as an attempt, and once the token works they run in order."""
    telegram.account.block("revoked")

    delivery = bot.deliver(telegram_envelope(start()), telegram_envelope(contact()))

    assert sorted(delivery.failed) == sorted(delivery.message_ids)  # both stay in the queue
    assert bot.dead_letter_reasons() == []
    assert [round(wait) for wait in bot.waiting()] == [pause_seconds(bot.queues.consumer)] * 2
    assert not [item for item in journal_items() if "#attempts#" in item["id"]]
    telegram.account.unblock()

    bot.let_time_pass()
    for _ in range(2):  # moto hands out a FIFO group's messages one receive at a time here
        event = bot.queues.receive_event()
        response = bot.app.lambda_handler(event, bot.context)
        bot.queues.acknowledge(event, response)
        assert response["batchItemFailures"] == []

    assert bot.waiting() == [] and bot.dead_letter_reasons() == []
    assert bot.app.worker.counts["processed"] == 2  # the /start, then the contact, once each
    assert texts(telegram)[0].startswith("Hi! Share your phone number")


MANAGERS = -1001987654321
KICKED = "Forbidden: bot was kicked from the supergroup chat"


def test_a_403_from_another_chat_dead_letters_the_step_naming_that_chat_and_never_blocks_the_user(
    bot: DeployedConsumer, telegram: TelegramFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bot was removed from the managers' group it forwards each lead to: that call's error,
    not the user's block; the step is kept (dead-lettered, redriven once the bot is back)."""
    from bot.examples import lead_bot

    original_start = lead_bot.start

    async def start_and_forward(update: Any, context: Any) -> int:
        state = await original_start(update, context)
        await update.message.forward(MANAGERS)
        return state

    monkeypatch.setattr(lead_bot, "start", start_and_forward)
    bot.app.runner.__init__()  # the handlers are bound when the conversation is built
    telegram.refuse("forwardMessage", 403, KICKED)  # the one forward, to the managers' group
    assert bot.deliver(telegram_envelope(start())).failed == []
    [reason] = bot.dead_letter_reasons()
    assert reason == f"telegram forwardMessage to chat {MANAGERS}: HTTP 403 {KICKED}"
    assert "Item" not in aws.resource("dynamodb").Table(JOURNAL_TABLE).get_item(Key={"id": f"blocked#{ANNA}"})
    assert stored_state() is None  # the step's state was not committed
    assert telegram.pending_refusals() == {}

    # the bot is back in the group; the operator redrives the update
    assert bot.queues.redrive() == 1
    event = bot.queues.receive_event()
    bot.queues.acknowledge(event, bot.app.lambda_handler(event, bot.context))
    assert stored_state() == 0
    assert texts(telegram).count(lead_bot.ASK_PHONE) == 1  # the user's answer came from the journal
    refused, forward = sent(telegram, "forwardMessage")  # the kicked one, then the one on the redrive
    assert [c["status"] for c in (refused, forward)] == [403, 200]
    assert (forward["body"]["chat_id"], forward["body"]["from_chat_id"]) == (str(MANAGERS), str(ANNA))


def test_a_failing_handler_fails_only_its_record_and_the_users_error_handler_still_runs(
    bot: DeployedConsumer, telegram: TelegramFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bot.examples import lead_bot

    seen: list[BaseException] = []
    original_build = lead_bot.build

    def build(builder: Any) -> Any:
        application = original_build(builder)

        async def users_error_handler(update: object, context: Any) -> None:
            seen.append(context.error)

        application.add_error_handler(users_error_handler)
        return application

    async def broken(update: Any, context: Any) -> int:
        raise RuntimeError("handler bug")

    monkeypatch.setattr(lead_bot, "build", build)
    monkeypatch.setattr(lead_bot, "start", broken)
    # The handlers are bound when the conversation is built: rebuild with the broken one.
    bot.app.runner.__init__()
    other = copy.deepcopy(start(update_id=900020))
    other["message"]["chat"]["id"] = other["message"]["from"]["id"] = 555
    delivery = bot.deliver(telegram_envelope(start()), telegram_envelope(other))
    assert len(delivery.failed) == 2
    assert [str(e) for e in seen] == ["handler bug", "handler bug"]
    assert bot.app.worker.last_outcome.reason == "RuntimeError: handler bug"


def test_the_ptb_internals_the_conversation_reload_uses_are_those_of_the_pinned_version(
    bot: DeployedConsumer,
) -> None:
    """`DynamoDBPersistence.reload_conversations` reads and writes ConversationHandler's private
    `_get_key`, `_conversations` (a TrackingDict) and `_child_conversations`, as in 22.8."""
    import telegram as ptb
    from telegram import Update

    from pipeline.telegram_bot.persistence import persistent_conversations

    assert ptb.__version__ == "22.8"
    bot.deliver(telegram_envelope(start()))
    application = bot.app.runner.engine._application
    [handler] = persistent_conversations(h for group in application.handlers.values() for h in group)
    assert handler._child_conversations == set()
    conversations = handler._conversations
    assert type(conversations).__name__ == "TrackingDict"
    update = Update.de_json(contact(), application.bot)
    assert handler._get_key(update) == (ANNA, ANNA)
    assert conversations[(ANNA, ANNA)] == 0
    conversations.update_no_track({(ANNA, ANNA): 1})
    assert conversations.pop_accessed_write_items() == []  # not marked for writing
    conversations.data.pop((ANNA, ANNA))
    assert (ANNA, ANNA) not in conversations


def test_an_expired_callback_query_lets_the_step_go_on_as_autoreply_does(
    bot: DeployedConsumer, telegram: TelegramFake, http_fake: FakeHttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step retried after Telegram's answer window cannot stop the spinner any more; the
    conversation must not lose the step for it (nor dead-letter it)."""
    first, second, third = conversation(bot)
    bot.deliver(first)
    bot.deliver(second)
    telegram.refuse("answerCallbackQuery", 400, "Bad Request: query is too old and response timeout expired")
    assert bot.deliver(third).failed == []
    assert telegram.pending_refusals() == {}  # its answerCallbackQuery was refused
    assert bot.dead_letter_reasons() == []
    assert sent(telegram, "editMessageText")[0]["body"]["text"] == "Thanks, we will call you soon."
    assert len(leads(http_fake)) == 1
    assert stored_state() is None


async def _stage(
    persistence: DynamoDBPersistence, bot_data: dict[str, Any], user_data: dict[str, Any]
) -> None:
    await persistence.update_bot_data(bot_data)
    await persistence.update_user_data(7, user_data)


def test_bot_data_an_update_did_not_read_is_never_written(moto_aws: None) -> None:
    """PTB hands over bot_data after every update; one that ran no handler did not read it, and
    the in-memory copy may be an earlier update's: writing it would clobber newer state. (Chat
    and user data are never an earlier update's: `DynamoDBPersistence.begin`, test_bot_persistence.)"""
    import asyncio

    table = StateTable(BOT_STATE_TABLE)
    persistence = DynamoDBPersistence(table)
    asyncio.run(_stage(persistence, {"stale": True}, {}))
    assert persistence.staged == {}
    persistence._read("bot")
    asyncio.run(_stage(persistence, {"fresh": True}, {}))
    assert persistence.staged == {"bot": '{"fresh":true}'}  # the user's data was and stays empty


def test_bot_api_errors_are_classified_as_the_worker_handles_them() -> None:
    from telegram.error import InvalidToken, NetworkError, TimedOut

    from pipeline.bot_api_errors import classify as judge
    from pipeline.errors import AccountRefused, TransientError
    from pipeline.telegram_bot.calls import refused
    from pipeline.telegram_bot.engine import classify
    from pipeline.telegram_bot.state import StateConflict

    flood = {"description": "Too Many Requests: retry after 12", "parameters": {"retry_after": 12}}
    flood_error = classify(refused(judge("sendMessage", 429, flood), 5))
    assert isinstance(flood_error, TransientError) and flood_error.retry_after == 12
    assert type(classify(TimedOut())) is TransientError
    assert type(classify(NetworkError("connection reset"))) is TransientError
    empty = {"description": "Bad Request: message text is empty"}
    bad = classify(refused(judge("sendMessage", 400, empty), 5))
    assert (
        type(bad) is PermanentError
        and bad.reason == "telegram sendMessage: HTTP 400 Bad Request: message text is empty"
    )
    unauthorized = classify(refused(judge("sendMessage", 401, {"description": "Unauthorized"}), 5))
    # The bot token refused: every chat alike, so the record pauses (pipeline.worker).
    assert isinstance(unauthorized, AccountRefused) and unauthorized.cause == "unauthorized"
    malformed = classify(InvalidToken())  # PTB refuses to send a malformed token at all
    assert isinstance(malformed, AccountRefused) and malformed.cause == "unauthorized"
    # PTB wraps what our request layer raised (the journal, the state store) in a NetworkError.
    conflict = StateConflict("moved on")
    wrapped = NetworkError("Unknown error in HTTP implementation")
    wrapped.__cause__ = conflict
    assert classify(wrapped) is conflict
    bug = ValueError("a handler bug")
    assert classify(bug) is bug  # unclassified: the worker retries it, then dead-letters it


def test_a_replayed_edit_whose_first_answer_was_lost_is_success_not_a_dead_letter(
    bot: DeployedConsumer, telegram: TelegramFake, http_fake: FakeHttpServer
) -> None:
    """Telegram applied the step's editMessageText but its answer never came back: the step is
    retried, the edit made again, and Telegram says "message is not modified" (the stand-in, as
    Telegram): the edit's effect holds, so the step commits (pipeline.bot_api_errors, done)."""
    first, second, third = conversation(bot)
    bot.deliver(first)
    bot.deliver(second)
    telegram.add_faults({"drop_answer_next": 1, "match": "editMessageText"})

    assert len(bot.deliver(third).failed) == 1  # no answer: retried
    assert bot.app.worker.last_outcome.status == "retry"
    bot.let_time_pass()
    event = bot.queues.receive_event()
    response = bot.app.lambda_handler(event, bot.context)
    bot.queues.acknowledge(event, response)

    assert response["batchItemFailures"] == [] and bot.dead_letter_reasons() == []
    edits = [c for c in telegram.calls() if c["path"].endswith("/editMessageText")]
    assert [c["status"] for c in edits] == [200, 400]  # applied (answer lost), then "not modified"
    assert len(sent(telegram, "answerCallbackQuery")) == 1  # the replay took it from the journal
    assert stored_state() is None  # the conversation ended: the step committed
    assert len(leads(http_fake)) >= 1
