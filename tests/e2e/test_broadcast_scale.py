"""Issue 45's "done when": a broadcast to 10,000 chats through the local pipeline, with faults.

The pipeline is the local runtime `make local` runs (`local.runtime.Runtime`, with `--persist`
so it can be restarted with its state), with the webhook, `store`, `autoreply` and `broadcast`
consumers, on the deployment settings a team sending a large broadcast would use
(`allow_paid_broadcast` and `telegram_messages_per_second`, `BROADCAST_CONTEXT`; at the default
30 a second a broadcast sends 19.2 a second, 10,000 chats in nine minutes). The audience is
10,000 real conversations: most seeded into the conversations table as the `store` consumer
writes them (`store.logic.conversation_item`), the rest sent through the webhook.

While it sends: a worker process is killed (SIGKILL, as Lambda loses an execution environment)
while its `sendMessage` call is at Telegram, the Telegram stand-in answers 429s with
`retry_after` and 403 "bot was blocked by the user" for 2% of the chats, and the whole runtime
is restarted with its state. Then, counted at the Telegram stand-in: every chat that did not block
the bot got the message exactly once, the blocked ones none; and users who wrote to the bot while
it sent got their answers within the tolerance of the p99 measured in the same run without a
broadcast (`REPLY_P99_TOLERANCE`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from boto3.dynamodb.types import TypeSerializer
from store.logic import conversation_item

from infra.config import PipelineSettings
from local.fakes.telegram import TelegramFake
from local.runtime import Runtime
from pipeline import broadcast as jobs
from pipeline.envelope import Envelope, telegram_event_id
from pipeline.registry import by_name
from pipeline.retention import conversation_expiration
from tests.e2e.support import (
    Ids,
    Pipeline,
    message,
    other_pipeline,
    private_chat,
    user,
    wait_for,
    wait_while_advancing,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.minutes(4)]

SCALE = 50  # this scenario's ids (`Ids`)
AUDIENCE = 10_000
# Users who write to the bot before the broadcast (the baseline's replies): part of the audience,
# their conversations made through the webhook; the rest of the audience is seeded.
BASELINE_USERS = 60
# Users who write while it sends (the replies measured during the broadcast).
DURING_USERS = 60
REPLY_EVERY_SECONDS = 0.2
BLOCKED_SHARE = 50  # one chat in 50 blocked the bot: 2%
TEXT = "Our winter sale starts today: 20% off everything until Sunday."
# The settings the test runs (docs/broadcast.md "How it scales"): paid broadcasts, and the bot's
# rate raised to 400 a second, of which the broadcast takes its default 0.8 share of the pacing's
# 0.8: 256 a second over its 4 environments; replies keep their own 320 a second.
BROADCAST_CONTEXT: dict[str, Any] = {"allow_paid_broadcast": True, "telegram_messages_per_second": 400}
# Replies during the broadcast may take at most this many times the baseline's p99, plus
# REPLY_P99_SLACK_SECONDS: room for the 2 cores the broadcast's processes (and, in CI, other tests)
# share with the replies' (a p99 of 0.31 s became 1.34 s on a machine at load 17), while a reply
# queued behind the broadcast's pages would wait minutes, one held by a flood wait its retry_after.
# What the pacing owes the replies is exact: no 429 but the injected ones (`limit_counts`).
REPLY_P99_TOLERANCE = 4.0
REPLY_P99_SLACK_SECONDS = 2.0
# The 429s the stand-in answers during the broadcast, and the wait they ask for: long enough that
# every broadcast worker hands its page back (`pipeline.pacing.MAX_WAIT_SECONDS`) and the runtime
# is restarted while none holds one (its stop gives a running invocation 5 s, then kills it: a
# second kill, not the restart a redeploy is, which lets running invocations finish).
# Pages handed back come back after it: long after the runtime's stop (within IDLE_WITHIN_SECONDS
# of the 429, its pollers' 2-s long polls ended), so no stopping worker takes one up.
RATE_LIMITED = 2
RETRY_AFTER_SECONDS = 15
IDLE_WITHIN_SECONDS = 5.0
# How long the stand-in holds the answer to the call the killed worker made.
HANG_SECONDS = 6.0
# The broadcast's pace is the machine's (locally the two cores, not the pacing, set it: 30 to 90
# messages a second, slower when other tests share them), so no wait below has a deadline in
# seconds: each fails when no further chat has been answered for this long. The longest quiet
# spell a working pipeline has: the restart with its state (11 to 20 s measured, more under load)
# within the 429's wait, then the functions' first pages.
STALLED_AFTER_SECONDS = 90.0
HELP_REPLY = json.loads((Path(__file__).parents[2] / "team" / "autoreply.json").read_text())["replies"][
    "/help"
]


@pytest.fixture(scope="session")
def scale_pipeline(pipeline: Pipeline, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    """Its own runtime (state directory, ports, `persist`), with the session's secrets."""
    deployment = PipelineSettings.model_validate(
        {**pipeline.settings.deployment.model_dump(), **BROADCAST_CONTEXT}
    )
    settings = dataclasses.replace(
        pipeline.settings,
        deployment=deployment,
        bot_consumer=False,
        ai_consumer=False,
        crm_leads=False,
        crm_sources=False,
        scale_workers_on_demand=False,
    )
    consumers = tuple(by_name(name) for name in ("store", "autoreply", "broadcast"))
    with other_pipeline(tmp_path_factory, "broadcast", settings, consumers, persist=True) as other:
        yield other


# -- the audience -------------------------------------------------------------------------------------
def start_update(ids: Ids, sender: dict[str, Any], text: str = "/start") -> dict[str, Any]:
    chat = private_chat(sender)
    return {"update_id": ids.update_id(), "message": message(ids.number(), chat, sender, text)}


def seed_conversations(pipeline: Pipeline, ids: Ids, users: list[dict[str, Any]]) -> None:
    """Each user's /start as the `store` consumer would have saved it (its own item builder)."""
    runtime = pipeline.runtime
    assert runtime.resources is not None
    table = runtime.resources.tables["conversations"]
    serializer = TypeSerializer()
    received = datetime.now(UTC)
    requests = []
    for sender in users:
        update = start_update(ids, sender)
        envelope = Envelope(
            event_id=telegram_event_id(pipeline.settings.telegram_bot_id, update["update_id"]),
            source="telegram",
            type="message",
            correlation_id=f"seed-{update['update_id']}",
            received_at=received,
            payload=update,
        )
        item = {**conversation_item(envelope), "expiration": conversation_expiration(received)}
        requests.append({"PutRequest": {"Item": {k: serializer.serialize(v) for k, v in item.items()}}})
    dynamodb = runtime.client("dynamodb")
    for start in range(0, len(requests), 25):
        batch: dict[str, Any] = {table: requests[start : start + 25]}
        while batch:
            batch = dynamodb.batch_write_item(RequestItems=batch).get("UnprocessedItems") or {}


# -- replies, timed -------------------------------------------------------------------------------
def reply_delays(pipeline: Pipeline, ids: Ids, users: list[dict[str, Any]]) -> list[float]:
    """Each user writes /help, one every REPLY_EVERY_SECONDS; the seconds until its answer reached
    the Telegram stand-in."""
    telegram = pipeline.runtime.fakes["telegram"]
    sent: dict[int, float] = {}
    for sender in users:
        update = start_update(ids, sender, "/help")
        sent[sender["id"]] = time.time()
        assert pipeline.send_update(update) == 200
        time.sleep(REPLY_EVERY_SECONDS)

    def answered() -> dict[int, float] | None:
        found = {
            int(call["body"]["chat_id"]): float(call["time"])
            for call in telegram.calls()
            if call["path"].endswith("/sendMessage")
            and call["status"] == 200
            and isinstance(call["body"], dict)
            and call["body"].get("text") == HELP_REPLY
            and int(call["body"].get("chat_id", 0)) in sent
        }
        return found if len(found) == len(sent) else None

    found = wait_for(answered, 60, "every /help answered")
    return sorted(found[chat] - sent[chat] for chat in sent)


def p99(delays: list[float]) -> float:
    return statistics.quantiles(delays, n=100, method="inclusive")[98]


# -- the killed worker ----------------------------------------------------------------------------
class PageHolders:
    """Which broadcast worker holds which page (its `busy` status messages, `local.worker_process`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holding: dict[str, tuple[str, ...]] = {}

    def listener(self, status: dict[str, Any]) -> None:
        worker = status.get("worker")
        if not isinstance(worker, str):
            return
        with self.lock:
            if status.get("event") == "busy":
                self.holding[worker] = tuple(status.get("events") or ())
            elif status.get("event") == "invocation":
                self.holding.pop(worker, None)

    def idle(self) -> bool:
        with self.lock:
            return not self.holding

    def forget(self, worker: str) -> None:
        """A killed worker holds nothing (its page comes back to the queue)."""
        with self.lock:
            self.holding.pop(worker, None)

    def holder(self, event_id: str) -> str | None:
        with self.lock:
            return next((worker for worker, events in self.holding.items() if event_id in events), None)


def kill_when_at_telegram(
    runtime: Runtime,
    telegram: TelegramFake,
    holders: PageHolders,
    chat: int,
    page_event: str,
    killed: list[str],
    given_up: threading.Event,
) -> None:
    """Once the stand-in holds the answer to the call for `chat`, SIGKILL the worker making it
    (until the test gives up waiting: `given_up`)."""
    while not given_up.is_set():
        held = [
            call
            for call in list(telegram.calls())[-400:]
            if call["fault"] == "hang"
            and isinstance(call["body"], dict)
            and call["body"].get("chat_id") == chat
        ]
        worker = holders.holder(page_event) if held else None
        if worker is not None:
            process = runtime.children[worker].process
            assert process is not None
            os.kill(process.pid, signal.SIGKILL)
            holders.forget(worker)
            killed.append(worker)
            return
        time.sleep(0.02)


def broadcast_calls(telegram: TelegramFake) -> list[dict[str, Any]]:
    return [
        call
        for call in telegram.calls()
        if call["path"].endswith("/sendMessage")
        and isinstance(call["body"], dict)
        and call["body"].get("text") == TEXT
    ]


def answered_chats(telegram: TelegramFake) -> set[int]:
    """The chats Telegram's stand-in answered other than with a 429 (sent, blocked, or held)."""
    return {int(call["body"]["chat_id"]) for call in broadcast_calls(telegram) if call["status"] != 429}


def test_a_broadcast_to_10000_chats_through_faults_reaches_each_once_and_replies_keep_their_p99(
    scale_pipeline: Pipeline,
) -> None:
    pipeline, runtime = scale_pipeline, scale_pipeline.runtime
    telegram = runtime.fakes["telegram"]
    assert isinstance(telegram, TelegramFake)
    telegram.keep_every_call()
    # Telegram's limits, enforced (`local.fakes.telegram_limits`): replies within the free 30 a
    # second, the paid broadcast within 1000, one message a second in a chat.
    pipeline.fake("telegram").control("/_limits", {"enforce": True})
    ids = Ids(SCALE)
    everyone = [user(ids.number()) for _ in range(AUDIENCE - BASELINE_USERS)]
    baseline_users = [user(ids.number()) for _ in range(BASELINE_USERS)]
    during_users = [user(ids.number()) for _ in range(DURING_USERS)]
    started = time.monotonic()
    phases: dict[str, float] = {}  # seconds since the start, printed with the figures

    def reached(phase: str) -> None:
        """Noted and printed at once: a failed run's captured output says how far it got, when."""
        phases[phase] = round(time.monotonic() - started, 1)
        print(f"{phase} at {phases[phase]} s: {len(answered_chats(telegram))} chats answered", flush=True)

    seed_conversations(pipeline, ids, everyone)
    seeded = time.monotonic() - started
    reached("seeded")

    # The usual delay of a reply: users write and nothing else is sent (their /help after their
    # /start: both through the webhook, so they are conversations like any other).
    for sender in baseline_users:
        assert pipeline.send_update(start_update(ids, sender)) == 200
    assert runtime.wait_until_drained(timeout=60)
    baseline = reply_delays(pipeline, ids, baseline_users)
    reached("baseline")
    assert runtime.wait_until_drained(timeout=60)

    audience = sorted(u["id"] for u in everyone + baseline_users)
    blocked = set(audience[::BLOCKED_SHARE])
    pipeline.fake("telegram").control("/_blocked", {"chat_ids": sorted(blocked)})
    # The worker to kill: the one sending the 40th page, while the stand-in holds its answer to
    # that page's 52nd chat (delivered: Telegram took it, the worker never heard).
    held_chat = audience[40 * jobs.PAGE_SIZE + 51]
    assert held_chat not in blocked
    pipeline.fake("telegram").inject(hang_next=1, seconds=HANG_SECONDS, match=f"chat_id={held_chat}&")
    holders = PageHolders()
    runtime.on_status("broadcast", holders.listener)

    created = pipeline.ops("broadcast", "create", "--text", TEXT, "--yes", "--json")
    assert created.returncode == 0, created.stderr
    job = json.loads(created.stdout)
    assert job["recipients"] == AUDIENCE
    broadcast_id = job["id"]
    reached("created")
    killed: list[str] = []
    given_up = threading.Event()
    killer = threading.Thread(
        target=kill_when_at_telegram,
        args=(runtime, telegram, holders, held_chat, jobs.page_event_id(broadcast_id, 40), killed, given_up),
        daemon=True,
    )
    killer.start()
    sending = time.monotonic()

    # Users write while it sends: the same measure.
    during = reply_delays(pipeline, ids, during_users)
    reached("during")
    sent_meanwhile = len(broadcast_calls(telegram))
    assert sent_meanwhile < AUDIENCE - len(blocked), "the broadcast ended before the replies were measured"

    def chats_answered() -> int:
        return len(answered_chats(telegram))

    try:
        wait_while_advancing(
            lambda: killed, chats_answered, STALLED_AFTER_SECONDS, "the held chat's worker killed"
        )
    finally:
        given_up.set()
    killer.join()
    reached("killed")
    # Past half-way, 429s; while the broadcast waits them out, the whole runtime is restarted.
    wait_while_advancing(
        lambda: chats_answered() > AUDIENCE // 2,
        chats_answered,
        STALLED_AFTER_SECONDS,
        "half the broadcast sent",
    )
    pipeline.fake("telegram").inject(
        rate_limit_next=RATE_LIMITED, retry_after=RETRY_AFTER_SECONDS, match="sendMessage"
    )
    wait_for(
        lambda: any(call["fault"] == "rate_limit" for call in broadcast_calls(telegram)[-200:]),
        60,
        "a 429 answered",
        interval=0.05,
    )
    wait_for(holders.idle, IDLE_WITHIN_SECONDS, "every broadcast worker waiting the 429 out", interval=0.05)
    restart_seconds = runtime.restart_pipeline()
    reached("restarted")
    sent_at_restart = len(broadcast_calls(telegram))
    assert sent_at_restart < AUDIENCE - len(blocked), "the broadcast ended before the restart"

    shown: dict[str, Any] = {}

    def finished() -> dict[str, Any] | None:
        status = pipeline.ops("broadcast", "status", broadcast_id, "--json")
        assert status.returncode == 0, status.stderr
        shown.update(json.loads(status.stdout))
        return dict(shown) if shown["state"] == jobs.DONE else None

    def counted() -> int:
        return sum(int(shown.get(name) or 0) for name in jobs.OUTCOMES)

    # Watched at the stand-in first; then `ops broadcast status`, a process of its own each time.
    wait_while_advancing(
        lambda: answered_chats(telegram) >= set(audience),
        chats_answered,
        STALLED_AFTER_SECONDS,
        "a call for every chat at the stand-in",
        interval=1,
    )
    progress = wait_while_advancing(
        finished, counted, STALLED_AFTER_SECONDS, "the broadcast done", interval=1
    )
    took = time.monotonic() - sending
    reached("done")
    assert runtime.wait_until_drained(timeout=60)

    # Counted at the Telegram stand-in: each chat that did not block the bot got it exactly once.
    calls = broadcast_calls(telegram)
    delivered = Counter(int(call["body"]["chat_id"]) for call in calls if call["status"] == 200)
    refused = Counter(int(call["body"]["chat_id"]) for call in calls if call["status"] == 403)
    twice = sorted(chat for chat, n in delivered.items() if n > 1)
    missed = sorted(set(audience) - blocked - set(delivered))
    assert twice == [] and missed == []
    assert set(delivered) == set(audience) - blocked
    assert set(refused) == blocked and not set(delivered) & blocked
    assert sum(1 for call in calls if call["fault"] == "rate_limit") == RATE_LIMITED
    # No other 429: the pacing kept replies and broadcast within Telegram's limits throughout.
    assert telegram.limit_counts()["refused"] == {}
    # The job's own count agrees: the held chat is `unknown` (claimed, never answered), never resent.
    counts = {name: progress[name] for name in jobs.OUTCOMES}
    assert counts == {
        "sent": len(audience) - len(blocked) - 1,
        "blocked": len(blocked),
        "failed": 0,
        "unknown": 1,
        "cancelled": 0,
    }

    base_p99, during_p99 = p99(baseline), p99(during)
    print(
        f"\nbroadcast of {AUDIENCE} chats ({len(blocked)} blocked): {took:.1f} s, "
        f"{(AUDIENCE - len(blocked)) / took:.0f} messages/s; seeded in {seeded:.1f} s; worker killed "
        f"({killed[0]}); restart {restart_seconds:.1f} s at {sent_at_restart} sent\n"
        f"reply p99 without a broadcast {base_p99:.3f} s (median {statistics.median(baseline):.3f}), "
        f"during it {during_p99:.3f} s (median {statistics.median(during):.3f}; "
        f"{sent_meanwhile} broadcast messages sent meanwhile)\nphases (s from the start): {phases}"
    )
    assert during_p99 <= base_p99 * REPLY_P99_TOLERANCE + REPLY_P99_SLACK_SECONDS
