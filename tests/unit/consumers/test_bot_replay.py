"""Issue 22: a step never sends a different message after its calls went out.

Two chats' steps read the same `bot_data` (tests/unit/consumers/ticket_bot.py); the one whose
commit loses reruns on fresh state, and its first call no longer matches the one the journal
says went out. The engine stops it there (pipeline.telegram_bot.calls, `ReplayDiverged`):
dead-lettered with the divergence named, a notice on the alarm topic, nothing more sent."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from local.fakes.telegram import TelegramFake
from pipeline import aws
from pipeline.telegram_bot import calls as calls_module
from pipeline.telegram_bot.calls import ReplayDiverged
from pipeline.telegram_bot.runner import BotRunner
from pipeline.telegram_bot.state import StateConflict, StateTable
from tests.unit.consumer_support import BOT_STATE_TABLE, Published, telegram_envelope, telegram_update
from tests.unit.consumers.conftest import BOT_TOKEN, DeployedConsumer
from tests.unit.consumers.ticket_bot import TICKET

TICKET_BOT = "tests.unit.consumers.ticket_bot:build"
# Private chats (chat id = user id), as the webhook receives them.
CHATS = (123456789, 223456789, 323456789)
_update_ids = itertools.count(920000001)


def ticket_request(chat: int) -> Published:
    update = telegram_update("private_start")
    update["update_id"] = next(_update_ids)
    message = update["message"]
    message["text"] = "/ticket"
    message["entities"][0]["length"] = len("/ticket")
    message["chat"]["id"] = message["from"]["id"] = chat
    return telegram_envelope(update)


@dataclass(frozen=True)
class AlarmInbox:
    """The alarm topic and a queue subscribed to it (each body an SNS notification)."""

    topic_arn: str
    queue_url: str

    def notices(self) -> list[dict[str, Any]]:
        messages = aws.client("sqs").receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10)
        return [json.loads(message["Body"]) for message in messages.get("Messages", [])]


@pytest.fixture
def ticket_bot(
    deploy_bot: Callable[[str], DeployedConsumer], monkeypatch: pytest.MonkeyPatch
) -> tuple[DeployedConsumer, AlarmInbox]:
    sns, sqs = aws.client("sns"), aws.client("sqs")
    topic_arn = sns.create_topic(Name="alarms")["TopicArn"]
    queue_url = sqs.create_queue(QueueName="alarm-inbox")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]
    sns.subscribe(TopicArn=topic_arn, Protocol="sqs", Endpoint=queue_arn["QueueArn"])
    monkeypatch.setenv("ALARM_TOPIC_ARN", topic_arn)  # before the worker reads its environment
    consumer = deploy_bot(TICKET_BOT)
    return consumer, AlarmInbox(topic_arn, queue_url)


def messages(telegram: TelegramFake) -> list[tuple[str, str]]:
    """(chat id, text) of each sendMessage Telegram received."""
    return [
        (c["body"]["chat_id"], c["body"]["text"])
        for c in telegram.calls()
        if c["fault"] is None and c["path"].endswith("/sendMessage")
    ]


def test_a_rerun_after_a_commit_lost_to_another_chat_is_stopped_not_sent_a_different_ticket(
    ticket_bot: tuple[DeployedConsumer, AlarmInbox], telegram: TelegramFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    bot, inbox = ticket_bot
    anna, ben = ticket_request(CHATS[0]), ticket_request(CHATS[1])
    other = BotRunner()  # a second worker instance, on the same tables
    raced: list[dict[str, Any]] = []
    original = StateTable.commit

    def commit_after_the_rival(self: StateTable, writes: Any, event_id: str) -> Any:
        if event_id == anna.envelope.event_id and not raced:
            # Ben's step runs whole in the other instance while Anna's is between read and commit.
            thread = threading.Thread(target=lambda: raced.append(other.process(ben.envelope)))
            thread.start()
            thread.join()
        return original(self, writes, event_id)

    monkeypatch.setattr(StateTable, "commit", commit_after_the_rival)
    first = bot.deliver(anna)
    assert raced[0]["bot"] == "processed" and len(first.failed) == 1
    assert bot.app.worker.last_outcome.status == "retry"  # the lost commit (StateConflict)
    assert messages(telegram) == [(str(CHATS[0]), TICKET.format(1)), (str(CHATS[1]), TICKET.format(1))]

    # SQS redelivers Anna's update once its backoff has passed (made to pass now).
    [record] = first.event["Records"]
    aws.client("sqs").change_message_visibility(
        QueueUrl=bot.queues.queue_url, ReceiptHandle=record["receiptHandle"], VisibilityTimeout=0
    )
    redelivery = bot.queues.receive_event()
    again = bot.app.lambda_handler(redelivery, bot.context)
    bot.queues.acknowledge(redelivery, again)

    assert again["batchItemFailures"] == []  # acknowledged: it is in the DLQ
    assert bot.app.worker.last_outcome.status == "dead_lettered"
    # Ticket #2 (what the fresh bot_data says) never reached Anna after her ticket #1.
    assert messages(telegram) == [(str(CHATS[0]), TICKET.format(1)), (str(CHATS[1]), TICKET.format(1))]
    [reason] = bot.dead_letter_reasons()
    assert reason.startswith("replay diverged at call 1: sendMessage with different text;")
    assert "#" not in reason and BOT_TOKEN not in reason  # names what differs, not the values
    [notice] = inbox.notices()
    assert f"event id: {anna.envelope.event_id}" in notice["Message"]
    assert "replay diverged at call 1: sendMessage with different text" in notice["Message"]
    # Nothing of the stopped step was committed: bot_data is Ben's.
    table = StateTable(BOT_STATE_TABLE)
    assert table.get("bot").value == {"next": 2}
    assert not table.applied(anna.envelope.event_id)


def test_a_handler_that_catches_the_divergence_still_sends_nothing_more(
    ticket_bot: tuple[DeployedConsumer, AlarmInbox], telegram: TelegramFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler catching every error (`except Exception`) and sending an apology instead."""
    from telegram.error import TelegramError

    from tests.unit.consumers import ticket_bot as module

    original = module.ticket

    async def ticket_with_an_apology(update: Any, context: Any) -> None:
        try:
            await original(update, context)
        except TelegramError:
            await update.message.reply_text("Sorry, something went wrong.")

    monkeypatch.setattr(module, "ticket", ticket_with_an_apology)
    bot, _ = ticket_bot
    anna = ticket_request(CHATS[0])
    calls_module.CallJournal().put(
        anna.envelope.event_id, 0, "sendMessage", "0" * 64, 200, b'{"ok":true,"result":{}}'
    )  # an entry of an older version: no per-parameter hashes
    assert bot.deliver(anna).failed == []
    assert messages(telegram) == []
    [reason] = bot.dead_letter_reasons()
    assert reason.startswith("replay diverged at call 1: sendMessage with different parameters;")


# -- a generator of interleavings nobody wrote -----------------------------------------------------
@dataclass
class Sent:
    """Each call Telegram received, by the update and the index of the call in its step."""

    calls: dict[tuple[str, int], list[str]]


@st.composite
def schedules(draw: st.DrawFn) -> tuple[list[int], list[tuple[int, int | None]]]:
    updates = draw(st.lists(st.integers(1, 3), min_size=len(CHATS), max_size=len(CHATS)))
    pairs = st.tuples(st.integers(0, len(CHATS) - 1), st.none() | st.integers(0, len(CHATS) - 1))
    return updates, draw(st.lists(pairs, min_size=1, max_size=10))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schedule=schedules())
def test_no_interleaving_of_chats_over_shared_bot_data_sends_a_different_call_for_an_update(
    ticket_bot: tuple[DeployedConsumer, AlarmInbox],
    monkeypatch: pytest.MonkeyPatch,
    schedule: tuple[list[int], list[tuple[int, int | None]]],
) -> None:
    """Steps of several chats (each chat's in order, as its FIFO group delivers them), any of
    them run while another is between its reads and its commit, lost commits retried later;
    every call Telegram receives for an update is the one it received before at that index."""
    from pipeline.telegram_bot.transport import PooledRequest

    counts, operations = schedule
    aws.client("dynamodb").delete_item(TableName=BOT_STATE_TABLE, Key={"pk": {"S": "bot"}})
    pending = {chat: [ticket_request(CHATS[chat]) for _ in range(n)] for chat, n in enumerate(counts)}
    engines = (BotRunner(), BotRunner())  # two warm instances on the same tables
    sent = Sent({})
    send = PooledRequest.do_request

    async def recorded(
        self: PooledRequest, url: str, method: str, request_data: Any = None, **kw: Any
    ) -> Any:
        step = calls_module._STEP.get()
        if step is not None:
            body = json.dumps(request_data.json_parameters if request_data else {}, sort_keys=True)
            call = f"{url.rsplit('/', 1)[-1]} {body}"
            sent.calls.setdefault((step.event_id, step.calls - 1), []).append(call)
        return await send(self, url, method, request_data, **kw)

    monkeypatch.setattr(PooledRequest, "do_request", recorded)
    interloper: list[Callable[[], None]] = []
    commit = StateTable.commit

    def commit_after(self: StateTable, writes: Any, event_id: str) -> Any:
        if interloper:
            thread = threading.Thread(target=interloper.pop())
            thread.start()
            thread.join()
        return commit(self, writes, event_id)

    monkeypatch.setattr(StateTable, "commit", commit_after)

    def step(engine: BotRunner, chat: int) -> None:
        """The chat's next update, as its worker would: done, retried (lost commit) or dead-lettered."""
        try:
            engine.process(pending[chat][0].envelope)
        except StateConflict:
            return  # redelivered later, still first in its group
        except ReplayDiverged:
            pass
        pending[chat].pop(0)

    for first, second in operations + [(chat, None) for chat in range(len(CHATS)) for _ in range(4)]:
        if not pending[first]:
            continue
        if second is not None and second != first and pending[second]:
            interloper.append(lambda chat=second: step(engines[1], chat))
        step(engines[0], first)
        interloper.clear()
    assert not any(pending.values())
    for (event_id, index), bodies in sent.calls.items():
        assert len(set(bodies)) == 1, f"call {index} of {event_id} was sent differently: {bodies}"
