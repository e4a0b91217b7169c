"""Pacing of the Bot API messages the sending consumers (autoreply, bot) make: 429s are the exception.

Telegram's limits (https://core.telegram.org/bots/faq, `infra.limits`): about 30 messages a second
for the whole bot, one a second in a chat, 20 a minute in a group; past them it answers 429 with
`retry_after`. The bot's global rate is the deployment setting `telegram_messages_per_second`
(`infra.config`, default Telegram's 30; refused at synth above what Telegram allows). A consumer
runs in at most `max_concurrency` Lambda environments at once (its event source's
MaximumConcurrency), each handling one batch at a time. So the bot's budget is split between
them, in one place: each sending consumer (`sends_to_telegram`) gets the environment variable
`TELEGRAM_SENDS_PER_SECOND` = `HEADROOM x rate / max_concurrency` (`send_rate`; the registry
with Telegram's rate, `infra.environment` with the setting), and each environment's `Pacer`
spaces its message sends by that rate: all of them together stay under the global limit however
the load falls, with no shared state to pay for per message. The price: a consumer running in
fewer environments than its `max_concurrency` sends slower than it could (one environment at
24/5 = 4.8 messages a second).

The pacer also spaces messages to one chat (1 s; a group, a negative id, 3 s: 20 a minute).
Within one environment that is exact; across environments it holds for the bot consumer (its
FIFO queue gives a chat's records to one environment at a time) and for autoreply only as far
as a chat's updates land in one batch (Telegram tolerates a short burst in a chat).

A 429 slows the whole bot, not only the chat that got it: its `retry_after`, counted from when
Telegram answered, is the bot-wide "not before" time, kept in the journal table
(`telegram#not_before`, a conditional write that only moves it later) and read before each
message by every environment of every sending consumer. A record waiting for it is not sent in
the meantime, and a worker that reads it later waits only what is left of it.

No wait outlives the invocation: a message whose slot (its chat's, the environment's rate, the
bot-wide not-before) is further off than the invocation can sleep and still make the call and
record it (`pipeline.deadline.can_wait`), or than `MAX_WAIT_SECONDS` (a batch is not held for
one chat), is not sent now: `HandedBack` with the wait, and the worker puts the record back in
its queue with that delay, uncounted (a FIFO record by its visibility, its chat's order kept; a
standard queue's re-sent delayed). A wait past `pipeline.retention.TELEGRAM_RETRY_AFTER_CAP_SECONDS`
is a pause (`flood_control`), alarmed.

Only messages count (`send*` but `sendChatAction`, `forward*`, `copy*`): answering a callback
query, editing and reading are not paced.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from aws_lambda_powertools import Logger

from pipeline import aws, deadline
from pipeline.errors import HandedBack
from pipeline.formats import SCHEMA_VERSION
from pipeline.formats import by_name as by_format

# Telegram's documented limits (the Bot FAQ; infra.limits records and dates them).
TELEGRAM_MESSAGES_PER_SECOND = 30
TELEGRAM_CHAT_INTERVAL_SECONDS = 1.0
TELEGRAM_GROUP_MESSAGES_PER_MINUTE = 20
# A paced batch's last record starts a little after its slot: a sleep ends past its slot, and an
# invocation's remaining time is whole milliseconds. Without a margin, a record written 0.99 s after
# its send left the next send 9 ms to wait, which one millisecond less of remaining time refused
# at the least timeout (tests/unit/worker/test_deadline.py). The registry adds it to the least
# timeout of a consumer that paces a batch.
PACING_SLACK_SECONDS = 1.0
# One Bot API call's timeout (`pipeline.bot_api.TIMEOUT_SECONDS`). Defined here, not in bot_api,
# so that the registry can size consumers' timeouts without importing the HTTP client: every
# function imports the registry at init, the webhook never calls Telegram.
BOT_API_TIMEOUT_SECONDS = 8.0
# The share of the global limit the consumers' environments may use together: "30 or so" is
# not a contract, and a retried record's message may come on top.
HEADROOM = 0.8
SEND_RATE_ENV = "TELEGRAM_SENDS_PER_SECOND"
# The share of the bot's budget a broadcast may use by default (`broadcast_share`, `infra.config`):
# the rest is left to interactive replies, which keep priority (`pipeline.broadcast`).
BROADCAST_SHARE = 0.8
# Longer than this, and the record is handed back instead (the rest of its batch goes on).
MAX_WAIT_SECONDS = 5.0
# Telegram's ceiling for a bot's global rate (paid broadcasts, `allow_paid_broadcast`): the
# `telegram_messages_per_second` setting is refused above it.
TELEGRAM_MAX_MESSAGES_PER_SECOND = 1000
# The bot-wide not-before time, in the journal table (JOURNAL_TABLE).
NOT_BEFORE_KEY = "telegram#not_before"
NOT_BEFORE_FORMAT = by_format("telegram_not_before")
# How long the item outlives its time (the table's TTL removes it then).
NOT_BEFORE_KEPT_SECONDS = 86_400
logger = Logger(child=True)
_NOT_MESSAGES = frozenset({"sendchataction"})


def send_rate(
    max_concurrency: int, bot_rate: float = TELEGRAM_MESSAGES_PER_SECOND, share: float = 1.0
) -> float:
    """Messages a second one of `max_concurrency` environments may send of `share` of the bot's
    `bot_rate` (a broadcast's share; 1 for interactive replies)."""
    return round(HEADROOM * share * bot_rate / max_concurrency, 3)


def paced_environment(
    max_concurrency: int, bot_rate: float = TELEGRAM_MESSAGES_PER_SECOND, share: float = 1.0
) -> dict[str, str]:
    """The environment entry of a consumer that sends Telegram messages."""
    return {SEND_RATE_ENV: str(send_rate(max_concurrency, bot_rate, share))}


def is_message(method: str) -> bool:
    """Whether a Bot API method sends a message (what Telegram's limits count)."""
    name = method.lower()
    return name.startswith(("send", "forward", "copy")) and name not in _NOT_MESSAGES


def chat_interval(chat_id: object) -> float:
    """The least spacing of messages to one chat: a group's (negative id) is 60/20 s."""
    try:
        numeric = int(str(chat_id))
    except ValueError:  # "@channel": a channel, counted like a group
        numeric = -1
    return 60.0 / TELEGRAM_GROUP_MESSAGES_PER_MINUTE if numeric < 0 else TELEGRAM_CHAT_INTERVAL_SECONDS


def retry_after(answer: bytes | Mapping[str, Any]) -> float:
    """A 429 answer's `parameters.retry_after` (1 s when it has none: Telegram always says)."""
    try:
        body = json.loads(answer) if isinstance(answer, bytes) else answer
        value = body["parameters"]["retry_after"]
    except (ValueError, TypeError, KeyError):
        return 1.0
    return (
        float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 else 1.0
    )


def not_before_of(item: Mapping[str, Any]) -> float:
    """The bot-wide not-before item's time (0: none), of a version this code reads."""
    if item:
        NOT_BEFORE_FORMAT.version_of(item)
    return float(item["not_before"]["N"]) if "not_before" in item else 0.0


class BotWideWait:
    """The bot-wide not-before time (epoch seconds) in the journal table, shared by every
    environment. A failed read or write is logged and the pacing goes on with what this
    environment knows: a 429 would say it again."""

    def __init__(self, table: str) -> None:
        self.table = table

    def read(self) -> float:
        try:
            item = (
                aws.client("dynamodb")
                .get_item(TableName=self.table, Key={"id": {"S": NOT_BEFORE_KEY}}, ConsistentRead=True)
                .get("Item")
            )
        except Exception as error:
            logger.warning("could not read the bot-wide not-before", extra={"error": type(error).__name__})
            return 0.0
        return not_before_of(item or {})

    def push(self, not_before: float, retry_after: float) -> None:
        """Move it to `not_before`, never earlier than it is."""
        try:
            aws.client("dynamodb").update_item(
                TableName=self.table,
                Key={"id": {"S": NOT_BEFORE_KEY}},
                UpdateExpression=(
                    "SET not_before = :t, retry_after = :r, schema_version = :v, expiration = :e"
                ),
                ConditionExpression="attribute_not_exists(not_before) OR not_before < :t",
                ExpressionAttributeValues={
                    # Rounded up to the millisecond: stored earlier than asked, a send could go
                    # out before Telegram's retry_after ends (found by test_telegram_flood).
                    ":t": {"N": f"{math.ceil(not_before * 1000) / 1000:.3f}"},
                    ":r": {"N": f"{retry_after:g}"},
                    ":v": NOT_BEFORE_FORMAT.written()[SCHEMA_VERSION],
                    ":e": {"N": str(math.ceil(not_before) + NOT_BEFORE_KEPT_SECONDS)},
                },
            )
        except Exception as error:
            if type(error).__name__ != "ConditionalCheckFailedException":  # a later one is there
                logger.warning(
                    "could not share the bot-wide not-before", extra={"error": type(error).__name__}
                )


class Pacer:
    """Spaces one environment's messages: `rate` a second overall, `chat_interval` per chat, none
    before the bot-wide not-before (`bot_wide`, read before each message).

    `reserve(chat_id, call_seconds)` books the next slot and returns how long to wait for it (the
    caller sleeps, `time.sleep` or `asyncio.sleep`), or raises `HandedBack` when that wait may
    not be made (see the module docstring); `wait` does both. `flood(answer, answered_at)` is
    what a 429 raises. The clock (epoch seconds: the not-before is shared between hosts) is
    injectable, so a test drives it without real time passing.
    """

    def __init__(
        self,
        rate: float,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        max_wait: float = MAX_WAIT_SECONDS,
        bot_wide: BotWideWait | None = None,
    ) -> None:
        if not rate > 0:
            raise ValueError("rate must be positive")
        self.interval = 1.0 / rate
        self.clock = clock
        self.sleep = sleep
        self.max_wait = max_wait
        self.bot_wide = bot_wide
        self._next = 0.0
        self._not_before = 0.0  # the latest bot-wide not-before this environment knows
        self._chats: dict[str, float] = {}
        self._lock = threading.Lock()

    def reserve(self, chat_id: object, call_seconds: float = 0.0) -> float:
        key = None if chat_id is None else str(chat_id)  # no chat named: the global rate only
        shared = self.bot_wide.read() if self.bot_wide is not None else 0.0
        with self._lock:
            self._not_before = max(self._not_before, shared)
            now = self.clock()
            at = max(now, self._next, self._not_before, self._chats.get(key, now) if key else now)
            wait = at - now
            # No wait at all: the call's own deadline check decides (`pipeline.deadline.require`).
            if wait > 0 and (wait > self.max_wait or not deadline.can_wait(wait, call_seconds)):
                flood = " (the bot-wide flood wait)" if at == self._not_before else ""
                raise HandedBack(f"telegram pacing: the next message is due in {wait:.1f} s{flood}", wait)
            self._next = at + self.interval
            if key:
                self._chats[key] = at + chat_interval(chat_id)
            if len(self._chats) > 1000:  # forget chats whose spacing has passed
                self._chats = {chat: due for chat, due in self._chats.items() if due > now}
            return wait

    def wait(self, chat_id: object, call_seconds: float = 0.0) -> None:
        delay = self.reserve(chat_id, call_seconds)
        if delay > 0:
            self.sleep(delay)

    def flood(self, answer: bytes | Mapping[str, Any], answered_at: float) -> HandedBack:
        """A 429 answered at `answered_at`: the whole bot waits its `retry_after` from then,
        here and (shared) in every environment; the record is handed back for what is left."""
        after = retry_after(answer)
        not_before = answered_at + after
        with self._lock:
            self._not_before = max(self._not_before, not_before)
        if self.bot_wide is not None:
            self.bot_wide.push(not_before, after)
        wait = max(0.0, not_before - self.clock())
        return HandedBack(f"telegram flood control: 429, retry after {after:g} s for the whole bot", wait)


_shared: Pacer | None = None
_shared_lock = threading.Lock()


def shared() -> Pacer | None:
    """This environment's pacer, or None when its consumer is not paced (no SEND_RATE_ENV); it
    shares the bot-wide not-before through JOURNAL_TABLE when that is set."""
    global _shared
    raw = os.environ.get(SEND_RATE_ENV, "").strip()
    if not raw:
        return None
    table = os.environ.get("JOURNAL_TABLE", "").strip()
    with _shared_lock:
        current = _shared
        if (
            current is None
            or abs(current.interval - 1.0 / float(raw)) > 1e-9
            or (current.bot_wide.table if current.bot_wide else "") != table
        ):
            _shared = Pacer(float(raw), bot_wide=BotWideWait(table) if table else None)
        return _shared
