"""Every format this pipeline stores or queues: the `schema_version` its writer writes and the
versions its reader reads.

A deployed stack keeps items for days (idempotency records, the SMS journal) and messages for up to
two weeks (queues and DLQs), so the code of one release reads what the previous release wrote.
Every item and message written carries `schema_version` (`version` here, the one source: writers
take it from `by_name(...)`, never a constant of their own); one without it is version 0 (every
format before release 0.5.0). A reader reads every version from `first` to `version`, and refuses a
newer one (`FormatTooNew`, a rollback past the release that wrote it) instead of guessing.

Changing a format: bump `version`, keep the reader (`reader`, the function the code reads the
item with) reading the previous versions, add a sample of the new version. `tests/unit/
test_formats.py` runs every version's sample (`tests/fixtures/formats/<name>/v<N>.json`) through
the reader and fails when one is missing or refused, and when a release's captured items
(`tests/fixtures/upgrade/`) hold a kind no format here claims. A new kind of item is one entry
here (with `first` = `version` = 1) and its sample.

The Powertools idempotency record is Powertools' own item; what is ours in it is its key,
`<consumer>#<md5 of the consumer's idempotency_key JMESPath result>` (Powertools v2 changed that
derivation once, and every record in flight was missed), its saved response (`data`) and the
`schema_version` our persistence layer adds (`pipeline.idempotency_store`). The upgrade test
(`tests/unit/consumers/test_upgrade.py`) proves this release still finds the previous one's keys.

No import of boto3 or pydantic: `ops doctor` and the tests read this at no cost.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from functools import cached_property
from typing import Any, Literal

SCHEMA_VERSION = "schema_version"
# A version in text (DynamoDB JSON's "N"): ASCII digits only, not the rest int() reads
# (" 1", "1_0", other scripts' digits).
_WHOLE_TEXT = re.compile(r"-?[0-9]+")


class FormatTooNew(ValueError):
    """An item or message written by a newer release than this code (a rollback): not guessed at."""


class FormatUnreadable(FormatTooNew):
    """A `schema_version` that is no whole number: refused as a version this code does not read,
    by every reader that refuses a newer one (never a TypeError its caller does not expect)."""


# How a format's reader takes the item: as DynamoDB's low-level client returns it ("client",
# `{"id": {"S": ...}}`), as boto3's Table resource does ("resource", plain values), or the message
# body's text ("body").
ReadsFrom = Literal["client", "resource", "body"]


def whole_number(raw: Any) -> int | None:
    """`raw` as the whole number it is (an int; an integral float or Decimal, as JSON and boto3's
    resource give numbers; digits in text), else None: never a bool as 1, a fraction cut to its
    whole part, or infinity's OverflowError."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str):
        return int(raw) if _WHOLE_TEXT.fullmatch(raw) else None
    if isinstance(raw, float | Decimal):
        try:
            whole = int(raw)
        except (OverflowError, ValueError):  # infinity, NaN
            return None
        return whole if whole == raw else None
    return None


@dataclass(frozen=True)
class Format:
    name: str
    # Where it lives: a table's logical name ("journal", "conversations", "bot_state") or "queue".
    where: str
    # Its key (`id`, or `pk` with `sk` joined by a space) matches this regular expression (`key`);
    # for "queue", the body's event_id.
    key_pattern: str
    # The schema_version its writer writes (0: none written, before release 0.5.0).
    version: int
    writer: str
    # The function the code reads an item of this format with ("module:attribute.path"), which
    # reads every version from `first` to `version` (`tests/unit/test_formats.py` runs the samples);
    # None: no code of ours reads it back (the team's own tools do, by `schema_version`).
    reader: str | None
    reads_from: ReadsFrom = "client"
    # The first version that existed (a format new in a release starts at its version, not at 0).
    first: int = 0

    @cached_property
    def key(self) -> re.Pattern[str]:
        """`key_pattern`, compiled when first matched: only `ops` and the tests match keys, so no
        function's init compiles the patterns (about 2 ms)."""
        return re.compile(self.key_pattern)

    @property
    def readable(self) -> range:
        """The versions this code reads: every one since the format's first."""
        return range(self.first, self.version + 1)

    def version_of(self, item: Mapping[str, Any]) -> int:
        """The item's schema_version (DynamoDB JSON or plain), 0 when it has none; a version newer
        than this code's is refused, never read as if it were the current one."""
        raw = item.get(SCHEMA_VERSION)
        if isinstance(raw, Mapping):
            raw = raw.get("N")
        version = 0 if raw is None else whole_number(raw)
        if version is None:  # the message names no value: a body may carry anything
            raise FormatUnreadable(
                f"{self.name} has a schema_version that is no whole number (a {type(raw).__name__})"
            )
        if version not in self.readable:
            raise FormatTooNew(
                f"{self.name} has schema_version {version}; this code reads "
                f"{self.readable.start} to {self.version} (a newer release wrote it: deploy that one)"
            )
        return version

    def written(self) -> dict[str, dict[str, str]]:
        """The attribute its writer adds to an item (DynamoDB JSON, the low-level client's form)."""
        return {SCHEMA_VERSION: {"N": str(self.version)}}


_CONSUMER = r"[a-z][a-z0-9_]*"
_J = "journal"
FORMATS: tuple[Format, ...] = (
    # -- the journal table (key "id") --
    Format(
        "idempotency_record",
        _J,
        rf"{_CONSUMER}#[0-9a-f]{{32}}",
        1,
        "pipeline.idempotency_store (Powertools idempotency: key_prefix=consumer, event_key_jmespath)",
        "pipeline.idempotency_store:data_record",
    ),
    Format(
        "consumer_attempts",
        _J,
        rf"{_CONSUMER}#attempts#.+",
        1,
        "pipeline.worker (an ordered consumer's failed attempts at one message)",
        "pipeline.worker:attempts_of",
    ),
    Format(
        "sms_notification",
        _J,
        r"sms#[0-9a-f]{64}",
        1,
        "pipeline.sms.journal",
        "pipeline.sms.records:Notification.from_item",
        "resource",
    ),
    Format(
        "sms_order",
        _J,
        r"sms-order#[0-9a-f]{64}",
        1,
        "pipeline.sms.orders",
        "pipeline.sms.orders:OrderState.from_item",
        "resource",
    ),
    Format(
        "sms_reconcile_cursor",
        _J,
        r"sms-reconcile-cursor#\w+",
        1,
        "pipeline.sms.journal_reads (the reconciler's turns)",
        "pipeline.sms.records:cursor_of",
        "resource",
    ),
    Format(
        "crm_lead_contact",
        _J,
        r"contact#-?\d+",
        1,
        "functions/crm/contacts.py",
        "crm.contacts:contact_record",
        "resource",
    ),
    Format(
        "crm_history_marks",
        _J,
        r"crm-history#.+",
        1,
        "pipeline.crm.sync",
        "pipeline.crm.sync:marks_of",
    ),
    Format(
        "crm_sweep_cursor",
        _J,
        r"crm-sweep-cursor#\w+",
        1,
        "pipeline.crm.sweep",
        "pipeline.crm.sweep:cursor_of",
    ),
    Format(
        "bot_api_call",
        _J,
        r"botcall#.+#\d+",
        1,
        "pipeline.telegram_bot.calls",
        "pipeline.telegram_bot.calls:recorded_call",
    ),
    Format(
        "chat_blocked",
        _J,
        r"blocked#-?\d+",
        1,
        "pipeline.blocked",
        None,
        "resource",
    ),
    Format(
        "consumer_paused",
        _J,
        rf"{_CONSUMER}#paused",
        1,
        "pipeline.pause",
        "pipeline.pause:pause_of",
        first=1,
    ),
    Format(
        "telegram_not_before",
        _J,
        r"telegram#not_before",
        1,
        "pipeline.pacing",
        "pipeline.pacing:not_before_of",
        first=1,
    ),
    Format(
        "sms_suppression",
        _J,
        r"sms-optout#[0-9a-f]{64}",
        1,
        "pipeline.sms.suppression",
        None,
        first=1,
    ),
    Format(
        "broadcast_job",
        _J,
        r"broadcast#bc-[\w-]+",
        2,
        "pipeline.broadcast",
        None,
        first=1,
    ),
    Format(
        "broadcast_index",
        _J,
        r"broadcasts",
        1,
        "pipeline.broadcast",
        "pipeline.broadcast:index_ids",
        "resource",
        first=1,
    ),
    Format(
        "broadcast_page",
        _J,
        r"broadcast#bc-[\w-]+#page#\d+",
        1,
        "pipeline.broadcast",
        "pipeline.broadcast:stored_page",
        "resource",
        first=1,
    ),
    Format(
        "broadcast_chat",
        _J,
        r"broadcast#bc-[\w-]+#-?\d+",
        1,
        "functions/broadcast/logic.py",
        None,
        first=1,
    ),
    # -- the conversations table (keys "pk", "sk") --
    Format(
        "conversation_update",
        "conversations",
        r"(chat#-?\d+|user#-?\d+|update#\w+) update#\d{12}",
        1,
        "functions/store/logic.py, functions/ai/logic.py",
        None,
        "resource",
    ),
    Format(
        "conversation_tag",
        "conversations",
        r"chat#\d+ tag#[A-Za-z0-9_-]{1,64}",
        1,
        "functions/store/logic.py",
        None,
        "resource",
        first=1,
    ),
    # -- the bot_state table (key "pk") --
    Format(
        "bot_state",
        "bot_state",
        r"conversation#.+|chat#-?\d+|user#-?\d+|bot",
        1,
        "pipeline.telegram_bot.state, pipeline.telegram_bot.persistence",
        "pipeline.telegram_bot.state:stored_of",
    ),
    Format(
        "bot_update_applied",
        "bot_state",
        r"applied#.+",
        1,
        "pipeline.telegram_bot.state",
        "pipeline.telegram_bot.state:applied_of",
    ),
    # -- queues and DLQs: the envelope SNS delivers raw (a DLQ holds it unchanged) --
    Format(
        "envelope",
        "queue",
        r"[a-z0-9_]+:.+",
        1,
        "pipeline.envelope",
        "pipeline.envelope:Envelope.from_json",
        "body",
    ),
)


def key_of(where: str, item: Mapping[str, Any]) -> str:
    """The key `Format.key` matches: the item's id, pk (and sk), or a message's event_id."""

    def text(name: str) -> str:
        value = item.get(name)
        return str(value.get("S", "")) if isinstance(value, Mapping) else str(value or "")

    if where == "journal":
        return text("id")
    if where == "queue":
        return text("event_id")
    return " ".join(part for part in (text("pk"), text("sk")) if part)


def format_of(where: str, item: Mapping[str, Any]) -> Format | None:
    """The one format claiming this item (None: a kind no format claims)."""
    key = key_of(where, item)
    found = [fmt for fmt in FORMATS if fmt.where == where and fmt.key.fullmatch(key)]
    return found[0] if len(found) == 1 else None


def by_name(name: str) -> Format:
    return next(fmt for fmt in FORMATS if fmt.name == name)
