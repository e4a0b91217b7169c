"""A python-telegram-bot persistence on the `bot_state` table (pipeline.telegram_bot.state).

What differs from PTB's file-based persistences, and why (several Lambda instances run the same
bot, each for a while, and any of them may get a chat's next update):

- nothing is loaded in bulk: `get_chat_data`/`get_user_data`/`get_conversations` answer empty at
  `initialize()` (no table scan at a cold start). Instead `begin(application)` starts each
  update with the Application's chat and user data emptied and read on first use:
  `application.chat_data[any id]` (the update's chat via `refresh_chat_data`, which PTB calls
  before a handler runs, or another chat a handler reaches, as `migrate_chat_data` does) is the
  stored item as of this update, never a copy an earlier update left in this instance's memory.
  The bot's data is read by `refresh_bot_data`; the conversation states of the update's keys by
  `reload_conversations`. Each item is read once per update (`refresh_chat_data` finds the
  chat already read by its first use);
- `update_*` and `drop_*` only stage what changed in this update (compared with what it read).
  Chat and user data PTB hands over (the update's, one marked with
  `mark_data_for_update_persistence`, the new id of `migrate_chat_data`) are written, and
  dropped ones deleted, each conditional on the version read in this update (an item first met
  at staging is read then: PTB's "overridden" of a migration's new id). The bot's data and a
  conversation this update did not read are not written: what PTB holds of them is as some
  earlier update left it. `commit(event_id)` writes it all in one conditional transaction after
  the update, so a warm instance never writes over a state another instance has moved on, and
  a lost race retries the update on fresh state; `flush()` (PTB's `Application.stop`) commits
  whatever is staged outside an update.

Values must be JSON-serializable (dicts with string keys, lists, numbers, strings, booleans); a
conversation's key is the handler's own tuple. Arbitrary callback data is not stored (the engine
refuses it at build: pipeline.telegram_bot.inspection): `get_callback_data` answers None and
`update_callback_data` is never called.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger
from telegram.ext import BasePersistence, PersistenceInput

from pipeline.telegram_bot.state import CONVERSATION_PREFIX, StateTable, Stored, conversation_key, dumps

if TYPE_CHECKING:
    from telegram import Update
    from telegram.ext import Application, ConversationHandler
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


class StoredData(defaultdict[int, Any]):
    """`Application.chat_data`/`user_data` during an update: an id's entry is read from the table
    the first time it is used (`begin` empties it before each update)."""

    def __init__(self, factory: Callable[[], Any], read: Callable[[int], Any]) -> None:
        super().__init__(factory)
        self._read_value = read

    def __missing__(self, key: int) -> Any:
        assert self.default_factory is not None
        value = self.default_factory()
        _replace(value, self._read_value(key))
        self[key] = value
        return value


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
    def begin(self, application: Application[Any, Any, Any, Any, Any, Any]) -> None:
        """Start an update: forget what the last one read and staged, and empty the Application's
        chat and user data, read again on first use (`StoredData`). Replaces PTB 22.8's
        `Application._chat_data`/`_user_data` and their read-only views (pinned by a test)."""
        self.discard()
        chat_data, user_data = application._chat_data, application._user_data
        if not isinstance(chat_data, StoredData):
            chat_data = StoredData(application.context_types.chat_data, self._chat_value)
            application._chat_data = chat_data
            application.chat_data = MappingProxyType(chat_data)
        if not isinstance(user_data, StoredData):
            user_data = StoredData(application.context_types.user_data, self._user_value)
            application._user_data = user_data
            application.user_data = MappingProxyType(user_data)
        chat_data.clear()
        user_data.clear()

    def _chat_value(self, chat_id: int) -> Any:
        return self._read(chat_key(chat_id))

    def _user_value(self, user_id: int) -> Any:
        return self._read(user_key(user_id))

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

    def _refresh(self, pk: str, target: dict[Any, Any]) -> None:
        """Fill `target` with the stored value, unless this update read it already (its first use
        in `StoredData`): read again, it would lose what was changed since."""
        if pk not in self._known:
            _replace(target, self._read(pk))

    async def refresh_user_data(self, user_id: int, user_data: dict[Any, Any]) -> None:
        self._refresh(user_key(user_id), user_data)

    async def refresh_chat_data(self, chat_id: int, chat_data: dict[Any, Any]) -> None:
        self._refresh(chat_key(chat_id), chat_data)

    async def refresh_bot_data(self, bot_data: dict[Any, Any]) -> None:
        self._refresh(BOT_DATA, bot_data)

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
        """Stage a change (None: a deletion) of an item, conditional on the version this update
        read. PTB hands over `bot_data` after every update, read or not, and conversation states
        it holds from earlier updates: unread, they are as some earlier update left them, so they
        are not written. Chat and user data are only ever this update's (`begin`): one not read
        yet (a migration's new id, a drop) is read now, and written over."""
        known = self._known.get(pk)
        if known is None:
            if pk == BOT_DATA or pk.startswith(CONVERSATION_PREFIX):
                if pk != BOT_DATA and value is not None:
                    logger.warning(
                        "bot state changed without being read in this update: not saved", extra={"pk": pk}
                    )
                return
            self._read(pk)
            known = self._known[pk]
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
        """Commit what is staged (PTB's `Application.stop` and `shutdown` call
        `update_persistence` and then this). The engine commits each update itself."""
        if self._staged:
            self.commit(None)

    # -- per update -----------------------------------------------------------------------------
    def discard(self) -> None:
        """Forget staged changes and what was read (after a failed update: read afresh)."""
        self._staged.clear()
        self._known.clear()

    @property
    def staged(self) -> dict[str, str | None]:
        return dict(self._staged)

    def commit(self, event_id: str | None) -> int:
        """Write the staged changes with the event's marker (StateConflict if any item moved on);
        returns how many."""
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
