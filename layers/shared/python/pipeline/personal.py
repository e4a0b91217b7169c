"""Every item kind the pipeline stores, what personal data it holds, how long, and how to forget it.

One table-driven list (`KINDS`) serves three readers: `ops forget` (how to find one person's items
of each kind and what to erase), docs/forget.md (the table it prints, checked by a test) and the
tests (every table of `infra.tables.TABLE_KEYS` and every stored format of `pipeline.formats` has
a kind here; every item the local pipeline writes is claimed by one). A new item kind is one
`Kind(...)` entry: its key pattern, what it holds, its retention (a TTL from `pipeline.retention`,
or a stated owner) and its `Forget` (where the person's items are found, what is erased).

What must stay for exactly-once (an idempotency record's key and status, an SMS record's key and
state, an order's state) is kept without its personal part: the key is a digest of an event or an
order, never of the person.

No boto3 import: the docs test and `ops doctor` read this at no cost.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pipeline.broadcast import KEPT_SECONDS as BROADCAST_KEPT_SECONDS
from pipeline.formats import FORMATS, by_name
from pipeline.retention import (
    CONVERSATION_RETENTION,
    IDEMPOTENCY_TTL_SECONDS,
    REDELIVERY_BOUND,
    SMS_RETENTION_DAYS,
)
from pipeline.sms.clock import iso

FORGOTTEN = "forgotten"
# Kinds of the journal not (yet) in `pipeline.formats`: keys written without a schema_version.
_ATTEMPTS = re.compile(r"[a-z][a-z0-9_]*#attempts#.+")
_NOT_BEFORE = re.compile(r"telegram#not_before")


@dataclass(frozen=True)
class Person:
    """Who to forget: an E.164 phone and/or a Telegram chat id (in a private chat, the user's id)."""

    phone: str | None = None
    chat: int | None = None

    @property
    def digests(self) -> frozenset[str]:
        """What items keep of the phone instead of it: `contact#` records' `phone_sha256` (its
        digits) and CRM history marks' `latest_phone` (its E.164 form, 32 hex digits)."""
        if not self.phone:
            return frozenset()
        digits = "".join(ch for ch in self.phone if ch.isdigit())
        return frozenset(
            {
                hashlib.sha256(digits.encode()).hexdigest(),
                hashlib.sha256(self.phone.encode()).hexdigest()[:32],
            }
        )

    def patterns(self) -> list[re.Pattern[str]]:
        """The phone as any writer wrote it (+, spaces, brackets, dashes between digits, with or
        without its +) and the chat id as a whole number (not a part of a longer one)."""
        found: list[re.Pattern[str]] = []
        if self.phone:
            digits = "".join(ch for ch in self.phone if ch.isdigit())
            spaced = r"[\s().-]{0,2}".join(digits)
            found.append(re.compile(rf"(?<![\d])\+?{spaced}(?!\d)"))
        if self.chat is not None:
            found.append(re.compile(rf"(?<![\d-]){re.escape(str(self.chat))}(?!\d)"))
        return found


def holds(value: Any, person: Person, patterns: list[re.Pattern[str]] | None = None) -> bool:
    """Whether `value` (a plain item, DynamoDB JSON, nested JSON strings, bytes) names `person`."""
    patterns = person.patterns() if patterns is None else patterns
    if type(value).__name__ == "Binary":  # boto3's wrapper of a B attribute
        value = value.value
    if isinstance(value, bytes | bytearray):
        value = bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, str):
        if value in person.digests:
            return True
        if any(pattern.search(value) for pattern in patterns):
            return True
        if value[:1] in "{[":
            try:
                return holds(json.loads(value), person, patterns)
            except ValueError:
                return False
        return False
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, int | float) or type(value).__name__ == "Decimal":
        return person.chat is not None and str(value) == str(person.chat)
    if isinstance(value, Mapping):
        return any(holds(v, person, patterns) for v in value.values())
    if isinstance(value, Iterable):
        return any(holds(v, person, patterns) for v in value)
    return False


@dataclass(frozen=True)
class Retention:
    """How long a kind's items stay: a TTL (the `expiration` attribute) counted from `since`, or
    no TTL and an `owner` who decides (with `ops forget` for one person)."""

    ttl: timedelta | None
    since: str
    owner: str | None = None
    # A TTL its writer computes apart from these settings (kinds holding no personal data).
    writer_ttl: bool = False

    def describe(self) -> str:
        if self.ttl is None:
            return f"TTL: {self.owner}" if self.writer_ttl else f"no TTL: {self.owner}"
        return f"{self.ttl.days} d after {self.since} (TTL)"


@dataclass(frozen=True)
class Erase:
    """What `ops forget` does to a person's item: delete it, or keep it (exactly-once) with its
    personal attributes removed (`remove`) or replaced (`replace`)."""

    delete: bool = False
    remove: tuple[str, ...] = ()
    replace: Mapping[str, Any] = field(default_factory=dict)
    # Attributes set only while the item is unsettled (an SMS still to send): it never is now.
    settle: Callable[[Mapping[str, Any], int], dict[str, Any]] | None = None

    def describe(self) -> str:
        if self.delete:
            return "deleted"
        parts = [f"`{name}` removed" for name in self.remove]
        parts += [f"`{name}` replaced" for name in self.replace]
        return "kept for exactly-once; " + ", ".join(parts)


@dataclass(frozen=True)
class Forget:
    """Where one person's items of a kind are: `keys` by key, `partitions` by a query on
    (index, partition attribute), else `scan` says why only a scan finds them."""

    erase: Erase | None = None  # None: holds no personal data, nothing to erase
    keys: Callable[[Person], list[dict[str, str]]] | None = None
    partitions: tuple[str | None, str, Callable[[Person], list[str]]] | None = None
    scan: str | None = None  # why no key leads to the person (printed by `ops forget`)


@dataclass(frozen=True)
class Kind:
    name: str
    table: str
    key: re.Pattern[str]
    holds: str
    retention: Retention
    forget: Forget

    @property
    def personal(self) -> bool:
        return self.forget.erase is not None


def _format_key(name: str) -> re.Pattern[str]:
    return by_name(name).key


def _journal_key(prefix: str) -> Callable[[Person], list[dict[str, str]]]:
    return lambda person: [] if person.chat is None else [{"id": f"{prefix}{person.chat}"}]


def _bot_state_keys(person: Person) -> list[dict[str, str]]:
    return [] if person.chat is None else [{"pk": f"chat#{person.chat}"}, {"pk": f"user#{person.chat}"}]


def _chat_partitions(person: Person) -> list[str]:
    return [] if person.chat is None else [f"chat#{person.chat}", f"user#{person.chat}"]


def _settle_sms(item: Mapping[str, Any], now: int) -> dict[str, Any]:
    """An SMS record not sent yet is abandoned (never sent to a forgotten person), as `journal
    resolve --abandon` would; a settled one keeps its state."""
    if item.get("state") == "accepted" or item.get("abandoned_at"):
        return {}
    at = iso(datetime.fromtimestamp(now, UTC))
    return {
        "state": "failed",
        "state_since": at,
        "abandoned_at": at,
        "abandoned_by": "forget",
        "failure_reason": "abandoned by forget",
        "failed_retryable": False,
        "expiration": now + SMS_RETENTION_DAYS * 86_400,
    }


_IDEMPOTENCY = timedelta(seconds=IDEMPOTENCY_TTL_SECONDS)
_SMS = timedelta(days=SMS_RETENTION_DAYS)
_NO_PERSON = Forget()
_JOURNAL_SCAN = "the journal has no index by phone or chat"

KINDS: tuple[Kind, ...] = (
    # -- the journal table (key "id") --
    Kind(
        "idempotency_record",
        "journal",
        _format_key("idempotency_record"),
        "a consumer's saved response (`data`): may hold chat ids, phones, texts",
        Retention(_IDEMPOTENCY, "the event was processed"),
        Forget(Erase(remove=("data",)), scan=f"{_JOURNAL_SCAN}; keys are digests of event ids"),
    ),
    Kind(
        "sms_notification",
        "journal",
        _format_key("sms_notification"),
        "recipient phone, SMS text, order id, attempts",
        Retention(_SMS, "it was accepted or abandoned; none while still to send or decide"),
        Forget(
            Erase(
                remove=("changes", "last_account_refusal", "sms_state", "next_attempt_at"),
                replace={"recipient": FORGOTTEN, "body": ""},
                settle=_settle_sms,
            ),
            scan=_JOURNAL_SCAN,
        ),
    ),
    Kind(
        "sms_order",
        "journal",
        _format_key("sms_order"),
        "an order's status entry (CRM order key, digests of moves): no personal data",
        Retention(_SMS, "its last move"),
        _NO_PERSON,
    ),
    Kind(
        "sms_reconcile_cursor",
        "journal",
        _format_key("sms_reconcile_cursor"),
        "the reconciler's place in a round: no personal data",
        Retention(None, "", "overwritten each round"),
        _NO_PERSON,
    ),
    Kind(
        "crm_lead_contact",
        "journal",
        _format_key("crm_lead_contact"),
        "a Telegram user id (its key), the CRM lead id, a digest of the lead's phone",
        Retention(None, "", "kept while the CRM lead is the shop's (one lead per user); `ops forget`"),
        Forget(Erase(delete=True), keys=_journal_key("contact#"), scan="found by the phone's digest"),
    ),
    Kind(
        "crm_history_marks",
        "journal",
        _format_key("crm_history_marks"),
        "an order's handled history records, a digest of its latest phone",
        Retention(_SMS, "its last change"),
        Forget(Erase(remove=("latest_phone", "latest_ref")), scan="found by the phone's digest"),
    ),
    Kind(
        "crm_sweep_cursor",
        "journal",
        _format_key("crm_sweep_cursor"),
        "a CRM sweep's position: no personal data",
        Retention(None, "", "overwritten each sweep"),
        _NO_PERSON,
    ),
    Kind(
        "bot_api_call",
        "journal",
        _format_key("bot_api_call"),
        "a Bot API call's answer (`payload`: chat, names, text) for a replayed update",
        Retention(_IDEMPOTENCY, "the call"),
        Forget(Erase(delete=True), scan=f"{_JOURNAL_SCAN}; keys are event ids"),
    ),
    Kind(
        "chat_blocked",
        "journal",
        _format_key("chat_blocked"),
        "a chat id that blocked the bot, the event and Telegram's description",
        Retention(REDELIVERY_BOUND, "the refusal"),
        Forget(Erase(delete=True), keys=_journal_key("blocked#")),
    ),
    Kind(
        "sms_suppression",
        "journal",
        _format_key("sms_suppression"),
        "an opted-out number: its SHA-256 (the key) and its masked form",
        Retention(
            None, "", "the shop (`ops sms opt-in` removes it); `ops forget` deletes it with the person"
        ),
        Forget(Erase(delete=True), scan=_JOURNAL_SCAN),
    ),
    Kind(
        "broadcast_job",
        "journal",
        _format_key("broadcast_job"),
        "a broadcast's text, audience filter and counts: no personal data",
        Retention(
            None, "", "twice the queues' retention after it was created (pipeline.broadcast)", writer_ttl=True
        ),
        _NO_PERSON,
    ),
    Kind(
        "broadcast_index",
        "journal",
        _format_key("broadcast_index"),
        "the ids of the broadcasts, for the console's list: no personal data",
        Retention(None, "", "as long as the newest broadcast's job (pipeline.broadcast)", writer_ttl=True),
        _NO_PERSON,
    ),
    Kind(
        "broadcast_page",
        "journal",
        _format_key("broadcast_page"),
        "one page of a broadcast's plan (up to 100 chat ids and their language), kept for a resume",
        Retention(timedelta(seconds=BROADCAST_KEPT_SECONDS), "the broadcast was created"),
        Forget(Erase(delete=True), scan="a page is keyed by its broadcast, the chats are in its list"),
    ),
    Kind(
        "broadcast_chat",
        "journal",
        _format_key("broadcast_chat"),
        "one chat's claim and outcome in a broadcast: the chat id",
        Retention(timedelta(seconds=BROADCAST_KEPT_SECONDS), "the chat's message was claimed"),
        Forget(Erase(delete=True), scan="a broadcast's chats are keyed by the broadcast first"),
    ),
    Kind(
        "consumer_paused",
        "journal",
        _format_key("consumer_paused"),
        "a consumer's pause (cause, time): no personal data",
        Retention(None, "", "pipeline.pause's own retention", writer_ttl=True),
        _NO_PERSON,
    ),
    Kind(
        "consumer_attempts",
        "journal",
        _ATTEMPTS,
        "an ordered consumer's attempt count of an SQS message: no personal data",
        Retention(None, "", "the consumer queue's retention (pipeline.worker)", writer_ttl=True),
        _NO_PERSON,
    ),
    Kind(
        "telegram_not_before",
        "journal",
        _NOT_BEFORE,
        "the bot-wide flood wait: no personal data",
        Retention(None, "", "a day after the wait (pipeline.pacing)", writer_ttl=True),
        _NO_PERSON,
    ),
    # -- the conversations table (keys "pk", "sk") --
    Kind(
        "conversation_update",
        "conversations",
        _format_key("conversation_update"),
        "one Telegram update: chat and user ids, names, text, the raw update, the AI's label",
        Retention(CONVERSATION_RETENTION, "the update was received"),
        Forget(
            Erase(delete=True),
            partitions=(None, "pk", _chat_partitions),
            scan="no key leads to a person's messages in group chats, or to a shared phone",
        ),
    ),
    Kind(
        "conversation_tag",
        "conversations",
        _format_key("conversation_tag"),
        "a private chat's deep-link tag (the payload of its /start): the chat id",
        Retention(CONVERSATION_RETENTION, "the chat's /start with that payload"),
        Forget(Erase(delete=True), partitions=(None, "pk", _chat_partitions)),
    ),
    # -- the bot_state table (key "pk") --
    Kind(
        "bot_state",
        "bot_state",
        _format_key("bot_state"),
        "python-telegram-bot chat_data, user_data, conversation states: whatever the bot keeps",
        Retention(None, "", "the bot's code owns it (it deletes what it no longer needs); `ops forget`"),
        Forget(
            Erase(delete=True),
            keys=_bot_state_keys,
            partitions=("by_chat", "chat", lambda person: [] if person.chat is None else [str(person.chat)]),
            scan="no key leads to a phone in user_data, or to a user's state in a group chat",
        ),
    ),
    Kind(
        "bot_update_applied",
        "bot_state",
        _format_key("bot_update_applied"),
        "an update's state writes were committed (its event id): no personal data",
        Retention(_IDEMPOTENCY, "the update"),
        _NO_PERSON,
    ),
)

TABLES: tuple[str, ...] = tuple(dict.fromkeys(kind.table for kind in KINDS))


def kind_of(table: str, key: str) -> Kind | None:
    """The kind claiming an item of `table` by its key (`formats.key_of`); None: unclaimed."""
    found = [kind for kind in KINDS if kind.table == table and kind.key.fullmatch(key)]
    return found[0] if len(found) == 1 else None


def unlisted_formats() -> list[str]:
    """Stored formats (`pipeline.formats`) no kind here describes: each must get one."""
    names = {kind.name for kind in KINDS}
    return [fmt.name for fmt in FORMATS if fmt.where != "queue" and fmt.name not in names]


def markdown_table() -> str:
    """docs/forget.md's table of stores (tests/unit/test_personal.py keeps the page equal to it)."""
    rows = ["| table | item kind | holds | kept | `ops forget` | found by |", "|---|---|---|---|---|---|"]
    for kind in KINDS:
        erase = kind.forget.erase.describe() if kind.forget.erase else "nothing personal: kept"
        ways = ["key"] if kind.forget.keys else []
        ways += ["index query" if kind.forget.partitions[0] else "query"] if kind.forget.partitions else []
        ways += [f"scan ({kind.forget.scan})"] if kind.forget.scan else []
        found = ", ".join(ways) if kind.personal else "-"
        cells = [kind.table, f"`{kind.name}`", kind.holds, kind.retention.describe(), erase, found]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)
