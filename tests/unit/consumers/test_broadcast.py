"""A broadcast's pages through the real `broadcast` consumer, moto's queue and journal, and the
Telegram stand-in: every chat that has not blocked the bot gets exactly one message, blocked ones
none, whatever comes between (403s, 429s, invocations that run out of time mid-page, a page
delivered again, answers lost, pause and cancel). The pacing runs on a test clock."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from local.fakes.telegram import TelegramFake
from pipeline import aws
from pipeline import broadcast as jobs
from tests.unit.consumer_support import JOURNAL_TABLE
from tests.unit.consumers.conftest import BOT_TOKEN, DeployedConsumer
from tests.unit.consumers.test_pacing_hand_back import Clock, ClockContext, paced

CHATS = [1_000_000 + n for n in range(250)]


@pytest.fixture
def sender(
    run_consumer: Callable[[str], DeployedConsumer],
    put_secret: Callable[[str, str], None],
    telegram: TelegramFake,
    monkeypatch: pytest.MonkeyPatch,
) -> DeployedConsumer:
    consumer = run_consumer("broadcast")
    put_secret("telegram_bot_token", BOT_TOKEN)
    monkeypatch.setenv("TELEGRAM_API_BASE", telegram.url)
    return consumer


def start(sender: DeployedConsumer, chats: list[int], text: str = "Hello, subscribers!") -> str:
    """What `ops broadcast create` does: the job, then its pages into the consumer's queue."""
    table = aws.resource("dynamodb").Table(JOURNAL_TABLE)
    broadcast_id = jobs.new_id()
    now = time.time()
    jobs.create(table, jobs.job_item(broadcast_id, text, len(chats), at=now, now=now, audience={}))
    for number, members in jobs.pages(chats):
        envelope, attributes = jobs.page_envelope(broadcast_id, number, members)
        sender.queues.send(envelope.to_json(), attributes)
    return broadcast_id


def run(sender: DeployedConsumer, clock: Clock, seconds: float = 59.0) -> dict[str, Any]:
    """One invocation on one page (the consumer's batch_size), acknowledged as the event source does."""
    event = sender.queues.receive_event(max_messages=sender.queues.consumer.batch_size)
    response: dict[str, Any] = sender.app.lambda_handler(event, ClockContext(clock=clock, seconds=seconds))
    sender.queues.acknowledge(event, response)
    return response


def drain(sender: DeployedConsumer, clock: Clock, seconds: float = 59.0, rounds: int = 400) -> None:
    for _ in range(rounds):
        sender.let_time_pass()
        if sender.queues.approximate_counts() == (0, 0):
            return
        run(sender, clock, seconds)
        clock.now += 1
    raise AssertionError("the broadcast did not finish")


def received(telegram: TelegramFake) -> Counter[int]:
    return Counter(
        int(call["body"]["chat_id"])
        for call in telegram.calls()
        if call["path"].endswith("/sendMessage") and call["status"] == 200
    )


def job(broadcast_id: str) -> dict[str, Any]:
    found = jobs.read_job(aws.resource("dynamodb").Table(JOURNAL_TABLE), broadcast_id)
    assert found is not None
    return found


def test_every_chat_gets_one_message_blocked_ones_none_through_403s_429s_and_cut_invocations(
    sender: DeployedConsumer, telegram: TelegramFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    paced(sender, clock, monkeypatch)
    telegram.keep_every_call()
    blocked = set(CHATS[5::40])
    telegram.block_chats(blocked)
    telegram.add_faults({"rate_limit_next": 2, "retry_after": 3, "match": "sendMessage"})
    broadcast_id = start(sender, CHATS)

    # First invocations have 15 s: each runs out of time mid-page and hands the rest back.
    for _ in range(3):
        sender.let_time_pass()
        run(sender, clock, seconds=15)
    assert 0 < sum(received(telegram).values()) < len(CHATS) - len(blocked)
    # One page delivered again (SNS may deliver twice): nothing is sent twice.
    first, _ = jobs.page_envelope(broadcast_id, 0, CHATS[: jobs.PAGE_SIZE])
    sender.queues.send(first.to_json(), {"source": "broadcast", "type": "page"})
    drain(sender, clock)

    counts = received(telegram)
    assert set(counts) == set(CHATS) - blocked
    assert set(counts.values()) == {1}
    final = job(broadcast_id)
    assert final["state"] == jobs.DONE
    assert (final["sent"], final["blocked"], final["failed"], final["unknown"]) == (
        len(CHATS) - len(blocked),
        len(blocked),
        0,
        0,
    )
    assert jobs.progress(final).remaining == 0
    notes = {item["id"]["S"] for item in aws.client("dynamodb").scan(TableName=JOURNAL_TABLE)["Items"]}
    assert {f"blocked#{chat}" for chat in blocked} <= notes
    assert sender.dead_letter_reasons() == []


def test_an_answer_lost_is_unknown_and_never_sent_again(
    sender: DeployedConsumer, telegram: TelegramFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    paced(sender, clock, monkeypatch)
    telegram.keep_every_call()
    telegram.add_faults({"drop_answer_next": 1, "match": f"chat_id={CHATS[3]}&"})
    broadcast_id = start(sender, CHATS[:20])

    drain(sender, clock)

    final = job(broadcast_id)
    assert (final["sent"], final["unknown"]) == (19, 1)
    # The stand-in took it once (its answer was lost); it was not sent a second time.
    attempts = [c for c in telegram.calls() if c["path"].endswith("/sendMessage")]
    assert len([c for c in attempts if c["body"]["chat_id"] == CHATS[3]]) == 1


def test_pause_holds_the_pages_resume_finishes_them_cancel_sends_no_more(
    sender: DeployedConsumer, telegram: TelegramFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    paced(sender, clock, monkeypatch)
    telegram.keep_every_call()
    table = aws.resource("dynamodb").Table(JOURNAL_TABLE)
    paused_one = start(sender, CHATS[:30])
    jobs.steer(table, paused_one, jobs.PAUSED, (jobs.SENDING,))
    sender.let_time_pass()
    run(sender, clock)
    assert sum(received(telegram).values()) == 0
    assert [round(w) for w in sender.waiting()] == [jobs.RECHECK_SECONDS]
    jobs.steer(table, paused_one, jobs.SENDING, (jobs.PAUSED,))
    drain(sender, clock)
    assert job(paused_one)["sent"] == 30 and job(paused_one)["state"] == jobs.DONE

    cancelled = start(sender, CHATS[100:130])
    jobs.steer(table, cancelled, jobs.CANCELLED, (jobs.SENDING, jobs.PAUSED, jobs.SCHEDULED))
    drain(sender, clock)
    assert not set(received(telegram)) & set(CHATS[100:130])
    final = job(cancelled)
    assert (final["cancelled"], final["state"]) == (30, jobs.CANCELLED)
    with pytest.raises(jobs.BroadcastError, match="cancelled"):
        jobs.steer(table, cancelled, jobs.SENDING, (jobs.PAUSED,))


def test_a_job_left_sending_after_its_last_page_was_counted_is_done_when_the_page_comes_back(
    sender: DeployedConsumer, telegram: TelegramFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the worker that counted the last page died before it marked the job done (two
    writes); the page comes back (its message was never deleted), finds itself counted, and the job
    stayed `sending` for good, its progress "0 remaining" forever."""
    clock = Clock()
    paced(sender, clock, monkeypatch)
    broadcast_id = start(sender, CHATS[:5])
    drain(sender, clock)
    table = aws.resource("dynamodb").Table(JOURNAL_TABLE)
    # The journal as that crash leaves it: every page counted, the state not yet moved, and the
    # page's idempotency record still in progress, its invocation's time over (Powertools lets
    # the next delivery run it).
    table.update_item(
        Key={"id": jobs.job_key(broadcast_id)},
        UpdateExpression="SET #state = :sending",
        ExpressionAttributeNames={"#state": "state"},
        ExpressionAttributeValues={":sending": jobs.SENDING},
    )
    records = [
        i["id"] for i in table.scan()["Items"] if re.fullmatch(r"broadcast#[0-9a-f]{32}", str(i["id"]))
    ]
    assert len(records) == 1
    table.update_item(
        Key={"id": records[0]},
        UpdateExpression="SET #status = :in_progress, in_progress_expiration = :past REMOVE #data",
        ExpressionAttributeNames={"#status": "status", "#data": "data"},
        ExpressionAttributeValues={":in_progress": "INPROGRESS", ":past": int((time.time() - 60) * 1000)},
    )
    page, attributes = jobs.page_envelope(broadcast_id, 0, CHATS[:5])
    sender.queues.send(page.to_json(), attributes)

    drain(sender, clock)

    final = job(broadcast_id)
    assert final["state"] == jobs.DONE
    assert final["sent"] == 5
    assert sum(received(telegram).values()) == 5
