"""Key schemas of the DynamoDB tables named in the registry (no CDK import).

The CDK stack (`infra.constructs.journal`) and the local runtime (`local.resources`) both build
their tables from `TABLE_KEYS`, so the local tables are the deployed ones.
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.environment import JOURNAL
from pipeline.sms.journal import BY_STATE_INDEX
from pipeline.telegram_bot.state import BY_CHAT_INDEX, CHAT_ATTRIBUTE

TTL_ATTRIBUTE = "expiration"


@dataclass(frozen=True)
class GlobalIndex:
    """A string-keyed GSI projecting only the keys (its readers fetch whole items by key)."""

    name: str
    partition: str
    sort: str | None = None


@dataclass(frozen=True)
class TableKeys:
    partition: str
    sort: str | None = None
    indexes: tuple[GlobalIndex, ...] = ()

    @property
    def key_attributes(self) -> list[str]:
        """Every attribute a key of the table or one of its indexes uses (all strings)."""
        names = [self.partition, self.sort, *(k for i in self.indexes for k in (i.partition, i.sort))]
        return sorted({name for name in names if name})


# Key schema per logical table name used in `Consumer.tables`.
TABLE_KEYS: dict[str, TableKeys] = {
    # Powertools idempotency's default schema: partition key "id", TTL attribute "expiration".
    # The SMS journal shares the table; its sparse `by_state` index (only records someone may
    # have to act on carry `sms_state`) lets the reconciler find `unknown` ones without a scan.
    JOURNAL: TableKeys(
        partition="id",
        indexes=(GlobalIndex(name=BY_STATE_INDEX, partition="sms_state", sort="state_since"),),
    ),
    # pk = "chat#<chat_id>", sk = "update#<update_id zero-padded to 12 digits>".
    "conversations": TableKeys(partition="pk", sort="sk"),
    # The bot consumer's python-telegram-bot state (pipeline.telegram_bot.state): one item per
    # "<kind>#<key>" (a conversation of a handler, a chat's or a user's data, the bot's data).
    # Its sparse `by_chat` index (conversation items carry their chat id) lets the console read
    # one chat's conversations by that key, never scanning other chats' items.
    "bot_state": TableKeys(
        partition="pk", indexes=(GlobalIndex(name=BY_CHAT_INDEX, partition=CHAT_ATTRIBUTE, sort="pk"),)
    ),
}
