"""A python-telegram-bot persistence on the `bot_state` table (pipeline.telegram_bot.state).

What differs from PTB's file-based persistences, and why (several Lambda instances run the same
bot, each for a while, and any of them may get a chat's next update):

- nothing is loaded in bulk: `get_chat_data`/`get_user_data`/`get_conversations` answer empty at
  `initialize()` (no table scan at a cold start), and the data of the update's chat, user and bot
  is read in `refresh_*_data`, which PTB calls before a handler runs; the conversation states of
  the update's keys are read by `reload_conversations` before the update is processed;
- `update_*` only stages what changed in this update (compared with what it read; an item it
  did not read is not written); `commit(event_id)` writes it all in one conditional transaction
  after the update, so a warm instance never writes over a state another instance has moved
  on, and a lost race retries the update on fresh state.

Values must be JSON-serializable (dicts with string keys, lists, numbers, strings, booleans); a
conversation's key is the handler's own tuple. Arbitrary callback data is not stored (the engine
refuses it at build: pipeline.telegram_bot.inspection).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger
from telegram.ext import BasePersistence, PersistenceInput

from pipeline.telegram_bot.state import StateTable, Stored, conversation_key, dumps

if TYPE_CHECKING:
    from telegram import Update
    from telegram.ext import ConversationHandler
    from telegram.ext._utils.types import CDCData, ConversationDict, ConversationKey

logger = Logger(child=True)

BOT_DATA = "bot"
# PTB calls update_persistence on this interval only from `Application.start()`, which the bot
# consumer never calls: it commits after each update itself.
UPDATE_INTERVAL_SECONDS = 3600.0


def chat_key(chat_id: int) -> str:
    return f"chat#{chat_id}"


def user_key(user_id: int) -> str:
    return f"user#{user_id}"


def persistent_conversations(handlers: Iterable[Any]) -> list[ConversationHandler[Any]]:
    """The persistent ConversationHandlers among `handlers`, nested ones included.

    Reads `ConversationHandler._child_conversations` (private in PTB 22.8, pinned by a test):
    the conversations a handler's states hold."""
    from telegram.ext import ConversationHandler

    found: list[ConversationHandler[Any]] = []
    pending = [h for h in handlers if isinstance(h, ConversationHandler)]
    while pending:
        handler = pending.pop()
        if handler.persistent and handler.name:
            found.append(handler)
        pending.extend(handler._child_conversations)
    return found


class DynamoDBPersistence(BasePersistence[dict[Any, Any], dict[Any, Any], dict[Any, Any]]):
    def __init__(self, table: StateTable | None = None) -> None:
        super().__init__(
            store_data=PersistenceInput(callback_data=False), update_interval=UPDATE_INTERVAL_SECONDS
        )
        self.table = table or StateTable()
        # pk -> the value's JSON and version as last read or written by this instance.
        self._known: dict[str, tuple[str | None, int]] = {}
        # pk -> the JSON to write (None: delete), staged by PTB's update_persistence.
        self._staged: dict[str, str | None] = {}

    # -- reading --------------------------------------------------------------------------------
    def _read(self, pk: str) -> Any:
        stored: Stored = self.table.get(pk)
        self._known[pk] = (None if stored.value is None else dumps(stored.value, pk), stored.version)
        return stored.value

    async def get_user_data(self) -> dict[int, dict[Any, Any]]:
        return {}

    async def get_chat_data(self) -> dict[int, dict[Any, Any]]:
        return {}

    async def get_bot_data(self) -> dict[Any, Any]:
        return {}

    async def get_callback_data(self) -> CDCData | None:
        return None

    async def get_conversations(self, name: str) -> ConversationDict:
        return {}

    async def refresh_user_data(self, user_id: int, user_data: dict[Any, Any]) -> None:
        _replace(user_data, self._read(user_key(user_id)))

    async def refresh_chat_data(self, chat_id: int, chat_data: dict[Any, Any]) -> None:
        _replace(chat_data, self._read(chat_key(chat_id)))

    async def refresh_bot_data(self, bot_data: dict[Any, Any]) -> None:
        _replace(bot_data, self._read(BOT_DATA))

    def reload_conversations(self, handlers: Iterable[Any], update: Update) -> None:
        """Set each persistent conversation's state for this update's key to the stored one.

        PTB keeps conversation states in memory from `initialize()` on; another instance may
        have moved this chat's conversation on since. Writes `ConversationHandler._conversations`
        (a TrackingDict, private in PTB 22.8, pinned by a test) without marking it changed."""
        for handler in persistent_conversations(handlers):
            try:
                key = handler._get_key(update)
            except RuntimeError:
                continue  # the update has no chat/user this handler keys on
            assert handler.name is not None  # persistent_conversations keeps named ones only
            state = self._read(conversation_key(handler.name, key))
            conversations = handler._conversations
            if state is None:
                conversations.data.pop(key, None)  # type: ignore[attr-defined]
            else:
                conversations.update_no_track({key: state})  # type: ignore[attr-defined]

    # -- staging --------------------------------------------------------------------------------
    def _stage(self, pk: str, value: Any) -> None:
        """Stage a change of an item this update read. PTB hands over `bot_data` after every
        update, read or not, and the data of any chat or user marked for an update: an item this
        update did not read is in memory as some earlier update left it, so it is not written."""
        known = self._known.get(pk)
        if known is None:
            if pk != BOT_DATA and value not in (None, {}):
                logger.warning(
                    "bot state changed without being read in this update: not saved", extra={"pk": pk}
                )
            return
        data = None if value is None or value == {} else dumps(value, pk)
        if known[0] != data:
            self._staged[pk] = data

    async def update_conversation(self, name: str, key: ConversationKey, new_state: object | None) -> None:
        self._stage(conversation_key(name, key), new_state)

    async def update_user_data(self, user_id: int, data: dict[Any, Any]) -> None:
        self._stage(user_key(user_id), data)

    async def update_chat_data(self, chat_id: int, data: dict[Any, Any]) -> None:
        self._stage(chat_key(chat_id), data)

    async def update_bot_data(self, data: dict[Any, Any]) -> None:
        self._stage(BOT_DATA, data)

    async def update_callback_data(self, data: CDCData) -> None:
        """Never called: callback data is not stored (`store_data.callback_data` is False)."""

    async def drop_chat_data(self, chat_id: int) -> None:
        self._stage(chat_key(chat_id), None)

    async def drop_user_data(self, user_id: int) -> None:
        self._stage(user_key(user_id), None)

    async def flush(self) -> None:
        """Nothing to do: each update's changes are committed by `commit`."""

    # -- per update -----------------------------------------------------------------------------
    def discard(self) -> None:
        """Forget staged changes and what was read (after a failed update: read afresh)."""
        self._staged.clear()
        self._known.clear()

    @property
    def staged(self) -> dict[str, str | None]:
        return dict(self._staged)

    def commit(self, event_id: str) -> int:
        """Write the staged changes (StateConflict if any item moved on); returns how many."""
        writes = {pk: (data, self._known.get(pk, (None, 0))[1]) for pk, data in self._staged.items()}
        try:
            versions = self.table.commit(writes, event_id)
        except Exception:
            self.discard()
            raise
        for pk, version in versions.items():
            self._known[pk] = (self._staged[pk], version)
        self._staged.clear()
        return len(versions)


def _replace(target: dict[Any, Any], value: Any) -> None:
    target.clear()
    if isinstance(value, dict):
        target.update(value)
