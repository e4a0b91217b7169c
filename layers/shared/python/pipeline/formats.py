"""Every format this pipeline stores or queues, with the `schema_version` its writer writes today.

A deployed stack keeps items for days (idempotency records, the SMS journal) and messages for up to
two weeks (queues and DLQs), so the code of one release reads what the previous release wrote.
Each item and message carries `schema_version`; one without it is version 0 (every format before
release 0.5.0). A writer that changes its format bumps `version` here and keeps reading the
previous one; `tests/unit/test_formats.py` fails when a format has no sample of each version up to
the current one (`tests/fixtures/formats/<name>/v<N>.json`) that its reader accepts, and when a
release's captured items (`tests/fixtures/upgrade/`) hold a kind no format here claims.

The Powertools idempotency record is Powertools' own item; what is ours in it is its key,
`<consumer>#<md5 of the consumer's idempotency_key JMESPath result>`: version 0 here names that
derivation (Powertools v2 changed it once, and every record in flight was missed). The upgrade
test (`tests/unit/consumers/test_upgrade.py`) proves it still finds the previous release's keys.

No import of boto3 or pydantic: `ops doctor` and the tests read this at no cost.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SCHEMA_VERSION = "schema_version"


class FormatTooNew(ValueError):
    """An item or message written by a newer release than this code (a rollback): not guessed at."""


@dataclass(frozen=True)
class Format:
    name: str
    # Where it lives: a table's logical name ("journal", "conversations", "bot_state") or "queue".
    where: str
    # Its key (`id`, or `pk` with `sk` joined by a space) matches this; for "queue", the body's event_id.
    key: re.Pattern[str]
    # The schema_version its writer writes today (0: not written yet, the item has none).
    version: int
    writer: str
    # The first version that existed (a format new in a release starts at its version, not at 0).
    first: int = 0

    def version_of(self, item: Mapping[str, Any]) -> int:
        """The item's schema_version (DynamoDB JSON or plain), 0 when it has none; a version newer
        than this code's is refused, never read as if it were the current one."""
        raw = item.get(SCHEMA_VERSION)
        if isinstance(raw, Mapping):
            raw = raw.get("N")
        version = 0 if raw is None else int(raw)
        if version > self.version:
            raise FormatTooNew(
                f"{self.name} has schema_version {version}; this code reads up to {self.version}"
            )
        return version


_CONSUMER = r"[a-z][a-z0-9_]*"
FORMATS: tuple[Format, ...] = (
    # -- the journal table (key "id") --
    Format(
        "idempotency_record",
        "journal",
        re.compile(rf"{_CONSUMER}#[0-9a-f]{{32}}"),
        0,
        "aws_lambda_powertools idempotency (pipeline.worker: key_prefix=consumer, event_key_jmespath)",
    ),
    Format("sms_notification", "journal", re.compile(r"sms#[0-9a-f]{64}"), 0, "pipeline.sms.journal"),
    Format("sms_order", "journal", re.compile(r"sms-order#[0-9a-f]{64}"), 0, "pipeline.sms.orders"),
    Format(
        "sms_reconcile_cursor", "journal", re.compile(r"sms-reconcile-cursor#\w+"), 0, "pipeline.sms.journal"
    ),
    Format("crm_lead_contact", "journal", re.compile(r"contact#-?\d+"), 1, "functions/crm/contacts.py"),
    Format("crm_history_marks", "journal", re.compile(r"crm-history#.+"), 0, "pipeline.crm.sync"),
    Format("crm_sweep_cursor", "journal", re.compile(r"crm-sweep-cursor#\w+"), 1, "pipeline.crm.sweep"),
    Format("bot_api_call", "journal", re.compile(r"botcall#.+#\d+"), 0, "pipeline.telegram_bot.calls"),
    Format("chat_blocked", "journal", re.compile(r"blocked#-?\d+"), 0, "pipeline.bot_api"),
    Format("broadcast_job", "journal", re.compile(r"broadcast#bc-[\w-]+"), 1, "pipeline.broadcast", first=1),
    Format(
        "broadcast_chat",
        "journal",
        re.compile(r"broadcast#bc-[\w-]+#-?\d+"),
        1,
        "functions/broadcast/logic.py",
        first=1,
    ),
    Format("consumer_paused", "journal", re.compile(rf"{_CONSUMER}#paused"), 1, "pipeline.pause", first=1),
    # -- the conversations table (keys "pk", "sk") --
    Format(
        "conversation_update",
        "conversations",
        re.compile(r"(chat#-?\d+|user#-?\d+|update#\w+) update#\d{12}"),
        0,
        "functions/store/logic.py, functions/ai/logic.py",
    ),
    # -- the bot_state table (key "pk") --
    Format(
        "bot_state",
        "bot_state",
        re.compile(r"conversation#.+|chat#-?\d+|user#-?\d+|bot"),
        0,
        "pipeline.telegram_bot.state, pipeline.telegram_bot.persistence",
    ),
    Format("bot_update_applied", "bot_state", re.compile(r"applied#.+"), 0, "pipeline.telegram_bot.state"),
    # -- queues and DLQs: the envelope SNS delivers raw (a DLQ holds it unchanged) --
    Format("envelope", "queue", re.compile(r"[a-z0-9_]+:.+"), 0, "pipeline.envelope"),
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
