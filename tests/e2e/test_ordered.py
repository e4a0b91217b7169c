"""Per-chat order, end to end through the local HTTP endpoint, for a consumer that needs it.

Its pipeline runs three worker processes (Lambda execution environments) on the FIFO queue from
the start: chats go side by side, each chat's order is kept by the queue's group locks.

The registry's ordered consumer is the `bot` (its conversation: test_bot_conversation.py). Here a
runtime of its own runs `autoreply` declared ordered, the way a registry entry would (its FIFO
queue and DLQ, the FIFO worker), with a reply per step so each side effect names the update it
came from, and short retry delays; `store` beside it reads the same FIFO topic from a standard
queue. The Telegram stand-in is slow and fails some chats' first attempts (`"match":
"chat_id=<id>&"` aims a fault at one chat).
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from pipeline.registry import RetryPolicy, by_name
from tests.e2e.support import (
    SEVERAL_WORKERS,
    Ids,
    Pipeline,
    message,
    other_pipeline,
    private_chat,
    user,
    wait_for,
)

STEPS = 6
# The replies the consumer knows (`/step1` ... `/step10`); a scenario uses the first STEPS or all.
REPLY_STEPS = 10
CHATS = 8
ORDERED_INTERLEAVED = 40
ORDERED_POISON = 41
ORDERED_RESEND = 42
ORDERED_CONCURRENT = 44
ORDERED_POISON_BESIDE_SLOW = 45
ORDERED = dataclasses.replace(
    by_name("autoreply"),
    ordered=True,
    environment={
        "AUTOREPLY_REPLIES": json.dumps({f"/step{n}": f"step {n}" for n in range(1, REPLY_STEPS + 1)})
    },
    # Seconds, not a minute: a failed chat comes back within the test.
    retry=RetryPolicy(max_receive_count=5, base_delay_seconds=1, max_delay_seconds=2),
)
DRAIN_SECONDS = 90.0


@pytest.fixture(scope="session")
def ordered(pipeline: Pipeline, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    settings = dataclasses.replace(pipeline.settings, **SEVERAL_WORKERS)
    with other_pipeline(tmp_path_factory, "ordered", settings, (ORDERED, by_name("store"))) as other:
        yield other


def step_update(ids: Ids, sender: dict[str, Any], step: int) -> dict[str, Any]:
    return {
        "update_id": ids.update_id(),
        "message": message(ids.number(), private_chat(sender), sender, f"/step{step}"),
    }


def replies_by_chat(pipeline: Pipeline, chats: set[int]) -> dict[int, list[str]]:
    """The replies the Bot API accepted, per chat, in the order it received them."""
    found: dict[int, list[str]] = {chat: [] for chat in chats}
    for call in pipeline.fake("telegram").calls("/sendMessage"):
        body = call["body"]
        if call["fault"] in (None, "hang") and body.get("chat_id") in found:
            found[body["chat_id"]].append(body["text"])
    return found


def attempts_by_chat(pipeline: Pipeline, chats: set[int]) -> dict[int, list[tuple[str, str | None, float]]]:
    """Every sendMessage attempt per chat: (text, fault applied, when)."""
    found: dict[int, list[tuple[str, str | None, float]]] = {chat: [] for chat in chats}
    for call in pipeline.fake("telegram").calls("/sendMessage"):
        if call["body"].get("chat_id") in found:
            found[call["body"]["chat_id"]].append((call["body"]["text"], call["fault"], call["time"]))
    return found


def test_interleaved_chats_each_get_their_replies_in_telegrams_order_exactly_once(ordered: Pipeline) -> None:
    ids = Ids(ORDERED_INTERLEAVED)
    senders = [user(ids.number()) for _ in range(CHATS)]
    chats = {sender["id"] for sender in senders}
    telegram = ordered.fake("telegram")
    # Every other chat's first attempt fails (Telegram 500); every call is slow.
    failing = sorted(chats)[::2]
    for chat in failing:
        telegram.inject(fail_next=1, status=500, match=f"chat_id={chat}&")
    telegram.inject(hang_next=CHATS * STEPS, seconds=0.2, match="/sendMessage")

    started = time.monotonic()
    for step in range(1, STEPS + 1):  # interleaved: step 1 of every chat, then step 2...
        for sender in senders:
            assert ordered.send_update(step_update(ids, sender, step)) == 200

    expected = [f"step {n}" for n in range(1, STEPS + 1)]
    wait_for(
        lambda: all(len(replies) >= STEPS for replies in replies_by_chat(ordered, chats).values()),
        DRAIN_SECONDS,
        "every chat's replies",
    )
    assert ordered.runtime.wait_until_drained(timeout=DRAIN_SECONDS)
    print(f"{CHATS} chats x {STEPS} updates answered in order in {time.monotonic() - started:.1f}s")

    assert replies_by_chat(ordered, chats) == {chat: expected for chat in chats}
    attempts = attempts_by_chat(ordered, chats)
    for chat in failing:  # the failure happened, was retried, and held the chat's later steps
        assert [(text, fault) for text, fault, _ in attempts[chat][:2]] == [
            ("step 1", "fail"),
            ("step 1", "hang"),
        ]
    status = ordered.status()["autoreply"]
    assert status["dead_lettered"] == 0 and status["dlq_depth"] == 0
    assert status["processed"] == CHATS * STEPS


def test_a_poison_update_holds_only_its_chat_until_dead_lettered_then_the_chat_goes_on(
    ordered: Pipeline,
) -> None:
    ids = Ids(ORDERED_POISON)
    poisoned, other = user(ids.number()), user(ids.number())
    notices = ordered.subscribe_to_alarms("ordered-alarm-inbox")
    telegram = ordered.fake("telegram")
    # Step 1 of the poisoned chat fails every attempt the consumer allows.
    telegram.inject(fail_next=ORDERED.retry.max_receive_count, status=502, match=f"chat_id={poisoned['id']}&")
    sent = {}
    for step in (1, 2, 3):
        for sender in (poisoned, other):
            update = step_update(ids, sender, step)
            sent[(sender["id"], step)] = update
            assert ordered.send_update(update) == 200

    chats = {poisoned["id"], other["id"]}
    wait_for(
        lambda: len(replies_by_chat(ordered, chats)[poisoned["id"]]) >= 2, DRAIN_SECONDS, "the chat to go on"
    )
    assert ordered.runtime.wait_until_drained(timeout=DRAIN_SECONDS)

    replies = replies_by_chat(ordered, chats)
    assert replies[other["id"]] == ["step 1", "step 2", "step 3"]
    assert replies[poisoned["id"]] == ["step 2", "step 3"]  # step 1 dead-lettered, then in order
    attempts = attempts_by_chat(ordered, chats)[poisoned["id"]]
    failures = [when for text, fault, when in attempts if fault == "fail"]
    assert [text for text, fault, _ in attempts if fault == "fail"] == [
        "step 1"
    ] * ORDERED.retry.max_receive_count
    # Held: nothing of the poisoned chat ran before its poison was given up on...
    assert all(when > failures[-1] for text, fault, when in attempts if fault is None)
    # ...while the other chat was never held behind it.
    other_done = max(when for _, _, when in attempts_by_chat(ordered, chats)[other["id"]])
    assert other_done < failures[-1]

    # In the FIFO DLQ, in the poisoned chat's group, with its reason; the log line names both.
    resources = ordered.runtime.resources
    assert resources is not None
    sqs = ordered.runtime.client("sqs")
    letters = sqs.receive_message(
        QueueUrl=resources.queues["autoreply"].dlq_url,
        MaxNumberOfMessages=10,
        VisibilityTimeout=0,
        MessageSystemAttributeNames=["All"],
        MessageAttributeNames=["All"],
    )["Messages"]
    poison_id = ordered.event_id(sent[(poisoned["id"], 1)])
    [letter] = [m for m in letters if json.loads(m["Body"])["event_id"] == poison_id]
    group = f"telegram:{ordered.settings.telegram_bot_id}:chat:{poisoned['id']}"
    assert letter["Attributes"]["MessageGroupId"] == group
    reason = letter["MessageAttributes"]["dead_letter_reason"]["StringValue"]
    assert reason.startswith(f"retries exhausted after {ORDERED.retry.max_receive_count} attempts")
    [line] = [
        r
        for r in ordered.log_records("autoreply")
        if r.get("message") == "record sent to the DLQ" and r.get("event_id") == poison_id
    ]
    assert (line["message_group"], line["reason"]) == (group, reason)

    # And a notice of its own on the alarm topic names the chat, the update and the reason.
    wait_for(notices, DRAIN_SECONDS, "the dead letter's notice")
    [notice] = notices()
    assert notice["TopicArn"] == resources.alarm_topic_arn
    assert notice["Subject"] == f"autoreply: chat {group} dead-lettered update {poison_id}"
    assert f"chat (message group): {group}" in notice["Message"]
    assert f"event id: {poison_id}" in notice["Message"]
    assert f"reason: {reason}" in notice["Message"]
    assert "/step1" not in notice["Message"]  # never the update itself


def test_telegram_resending_an_update_within_five_minutes_reaches_no_consumer_twice(
    ordered: Pipeline,
) -> None:
    ids = Ids(ORDERED_RESEND)
    sender = user(ids.number())
    update = step_update(ids, sender, 1)
    store_before = ordered.status()["store"]

    # Telegram did not get our answer in time and sends the same update again.
    assert ordered.send_update(update) == 200
    assert ordered.send_update(update) == 200
    assert ordered.runtime.wait_until_drained(timeout=DRAIN_SECONDS)
    wait_for(lambda: replies_by_chat(ordered, {sender["id"]})[sender["id"]], DRAIN_SECONDS, "the reply")

    assert replies_by_chat(ordered, {sender["id"]}) == {sender["id"]: ["step 1"]}
    store = ordered.status()["store"]
    # The standard queue, too, got it once: processed once, never seen as a duplicate.
    assert store["processed"] - store_before["processed"] == 1
    assert store["duplicates"] == store_before["duplicates"]
    assert ordered.runtime.fakes["sns"].deduplicated >= 1  # type: ignore[attr-defined]


def send_each_chats_updates_at_once(
    pipeline: Pipeline, ids: Ids, senders: list[dict[str, Any]], steps: int
) -> None:
    """Every chat at the same time, each chat's updates one after the other (Telegram's order)."""

    def send_chat(sender: dict[str, Any], updates: list[dict[str, Any]]) -> None:
        for update in updates:
            assert pipeline.send_update(update) == 200

    updates = {
        sender["id"]: [step_update(ids, sender, step) for step in range(1, steps + 1)] for sender in senders
    }
    threads = [threading.Thread(target=send_chat, args=(s, updates[s["id"]])) for s in senders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_chats_sending_at_once_each_get_every_reply_once_in_order_from_several_workers(
    ordered: Pipeline,
) -> None:
    """5 chats x 10 updates at once, three workers: each chat's replies in order, each once."""
    ids = Ids(ORDERED_CONCURRENT)
    chats_count, steps = 5, REPLY_STEPS
    senders = [user(ids.number()) for _ in range(chats_count)]
    chats = {sender["id"] for sender in senders}
    # Slow Bot API calls, so that batches overlap and the workers run side by side.
    ordered.fake("telegram").inject(hang_next=chats_count * steps, seconds=0.1, match="/sendMessage")
    started = time.monotonic()
    send_each_chats_updates_at_once(ordered, ids, senders, steps)
    wait_for(
        lambda: all(len(r) >= steps for r in replies_by_chat(ordered, chats).values()),
        DRAIN_SECONDS,
        "every chat's replies",
    )
    assert ordered.runtime.wait_until_drained(timeout=DRAIN_SECONDS)
    print(f"{chats_count} chats x {steps} updates at once answered in {time.monotonic() - started:.1f}s")

    expected = [f"step {n}" for n in range(1, steps + 1)]
    assert replies_by_chat(ordered, chats) == {chat: expected for chat in chats}
    status = ordered.status()["autoreply"]
    assert status["workers"] == 3
    assert status["most_busy_workers"] >= 2  # batches ran side by side


def test_a_poison_beside_a_slow_update_holds_its_chat_whose_later_updates_follow_it_in_order(
    ordered: Pipeline,
) -> None:
    """Issue 22's case: chat P sends p1, poison, p3, p4 while chat S's slow update is in the same
    batch: S is not held, and p3 is not answered before the poison is dead-lettered."""
    ids = Ids(ORDERED_POISON_BESIDE_SLOW)
    poisoned, slow = user(ids.number()), user(ids.number())
    chats = {poisoned["id"], slow["id"]}
    telegram = ordered.fake("telegram")
    first = step_update(ids, poisoned, 1)
    assert ordered.send_update(first) == 200
    wait_for(lambda: replies_by_chat(ordered, chats)[poisoned["id"]], DRAIN_SECONDS, "p1's reply")
    # P's next update fails every attempt (nothing of P runs while it is pending); S's is slow.
    telegram.inject(fail_next=ORDERED.retry.max_receive_count, status=502, match=f"chat_id={poisoned['id']}&")
    telegram.inject(hang_next=1, seconds=4, match=f"chat_id={slow['id']}&")
    for sender, step in ((slow, 1), (poisoned, 2), (poisoned, 3), (poisoned, 4)):
        assert ordered.send_update(step_update(ids, sender, step)) == 200
    wait_for(lambda: len(replies_by_chat(ordered, chats)[poisoned["id"]]) >= 3, DRAIN_SECONDS, "P to go on")
    assert ordered.runtime.wait_until_drained(timeout=DRAIN_SECONDS)

    replies = replies_by_chat(ordered, chats)
    assert replies == {poisoned["id"]: ["step 1", "step 3", "step 4"], slow["id"]: ["step 1"]}
    attempts = attempts_by_chat(ordered, chats)
    failures = [(text, when) for text, fault, when in attempts[poisoned["id"]] if fault == "fail"]
    assert [text for text, _ in failures] == ["step 2"] * ORDERED.retry.max_receive_count
    last_failure = failures[-1][1]
    # P's later updates were answered only after its poison was given up on...
    later = [when for text, fault, when in attempts[poisoned["id"]] if text in ("step 3", "step 4")]
    assert later and all(when > last_failure for when in later)
    # ...and the slow chat was not held behind it.
    assert max(when for _, _, when in attempts[slow["id"]]) < last_failure
