"""Every Bot API error answer, classified once: what it means, and what the worker does with it.

The reply consumer (`pipeline.bot_api.BotApi`) and the bot engine (`pipeline.telegram_bot.calls`)
hand every answer that is not `{"ok": true}` to `classify` and act on its `Verdict`; neither has
rules of its own. The classes (`Scope`), each with exactly one worker action (`ACTIONS`):

- `done`: the call's intended effect already holds. Typically a call whose answer was lost is
  made again and Telegram says so: an edit already applied ("message is not modified"), a
  message already deleted, a callback query already answered (or too late to answer: nothing is
  left to do). The call counts as answered with `true`, and the step goes on.
- `message`: this call can never succeed as it is (a malformed call, a message that cannot be
  edited): `PermanentError`, the record is dead-lettered with Telegram's description.
- `chat`: the chat can no longer be written to (the user blocked the bot or was deleted, the
  bot was removed from the group, the chat is gone): `ChatUnreachable`. A consumer acknowledges
  it when the chat is the update's own (recorded as `blocked#<chat id>`, `pipeline.bot_api`);
  any other chat's refusal is dead-lettered, naming the chat (the step is kept for a redrive).
- `bot`: the token is refused for every call (revoked, the bot deleted): `AccountRefused`, the
  worker pauses the record until the token works (`pipeline.pause`).
- `retry`: 429 (after Telegram's `retry_after`), 5xx, no answer: `TransientError`.

Rows match Telegram's `description` case-insensitively, as a substring (Telegram prefixes it
with "Bad Request: " or "Forbidden: " and may append details), for one status and, for `done`
rows, only the methods whose effect the description proves. The descriptions are Telegram's own,
as the libraries that match them quote them (aiogram 2's `utils/exceptions.py`, telegraf's
errors). An answer no row knows falls to its status's class (`FALLBACK`), never to `done`: a
wrong `done` would lose a call silently, a wrong `message` keeps it in the DLQ with its reason.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.errors import UNAUTHORIZED, AccountRefused, ConsumerError, PermanentError, TransientError


class Scope(enum.StrEnum):
    """What an error answer is about (module docstring)."""

    DONE = "done"
    MESSAGE = "message"
    CHAT = "chat"
    BOT = "bot"
    RETRY = "retry"


# What the worker does for each class: one action each.
ACTIONS: dict[Scope, str] = {
    Scope.DONE: "the call counts as answered (true); the step goes on",
    Scope.MESSAGE: "dead-lettered with Telegram's description (PermanentError)",
    Scope.CHAT: "the update's own chat recorded as unreachable and acknowledged, any other dead-lettered",
    Scope.BOT: "paused until the token works (AccountRefused)",
    Scope.RETRY: "retried, after retry_after when Telegram gives one (TransientError)",
}

_EDITS = frozenset(
    {
        "editMessageText",
        "editMessageCaption",
        "editMessageMedia",
        "editMessageReplyMarkup",
        "editMessageLiveLocation",
        "editMessageChecklist",
    }
)
_DELETES = frozenset({"deleteMessage", "deleteMessages"})
_QUERY_ANSWERS = frozenset({"answerCallbackQuery", "answerInlineQuery"})


@dataclass(frozen=True)
class Row:
    """One kind of error answer: `status` and a `text` found in the description."""

    scope: Scope
    status: int
    text: str
    why: str
    methods: frozenset[str] | None = None
    """Only these Bot API methods (a `done` row: where the description proves the effect)."""
    example: str = ""
    """The whole description as Telegram writes it (tests answer with it), when `text` is a part."""

    @property
    def description(self) -> str:
        return self.example or ("Bad Request: " if self.status == 400 else "Forbidden: ") + self.text


ROWS: tuple[Row, ...] = (
    # done: the intended effect holds
    Row(
        Scope.DONE,
        400,
        "message is not modified",
        "the edit is already applied: the message has exactly this content (a replayed step's edit)",
        _EDITS,
        "Bad Request: message is not modified: specified new message content and reply markup are "
        "exactly the same as a current content and reply markup of the message",
    ),
    Row(
        Scope.DONE,
        400,
        "message to delete not found",
        "the message is gone already (deleted by a first attempt whose answer was lost, or by the user)",
        _DELETES,
    ),
    Row(
        Scope.DONE,
        400,
        "query is too old",
        "the query was answered already, or its answer window passed: nothing is left to do",
        _QUERY_ANSWERS,
        "Bad Request: query is too old and response timeout expired or query ID is invalid",
    ),
    Row(
        Scope.DONE,
        400,
        "query id is invalid",
        "the same answer as 'query is too old', as some servers word it",
        _QUERY_ANSWERS,
        "Bad Request: QUERY_ID_INVALID: query ID is invalid",
    ),
    Row(
        Scope.DONE,
        400,
        "chat description is not modified",
        "the description already reads so (a replayed setChatDescription)",
        frozenset({"setChatDescription"}),
    ),
    # message: this call never succeeds as it is
    Row(
        Scope.MESSAGE,
        400,
        "message can't be edited",
        "not the bot's message, or not editable (too old, wrong kind): the edit did not happen, "
        "so counting it done would hide it",
    ),
    Row(
        Scope.MESSAGE,
        400,
        "message to edit not found",
        "the message is gone (deleted by the user): the edit did not happen",
    ),
    Row(
        Scope.MESSAGE,
        400,
        "message can't be deleted",
        "too old to delete, or not the bot's to delete: the message is still there",
    ),
    Row(Scope.MESSAGE, 400, "message text is empty", "a handler sent no text"),
    Row(Scope.MESSAGE, 400, "message is too long", "over 4096 characters"),
    Row(Scope.MESSAGE, 400, "can't parse entities", "malformed Markdown or HTML in the text"),
    Row(Scope.MESSAGE, 400, "message to reply not found", "the replied-to message is gone"),
    Row(Scope.MESSAGE, 400, "message thread not found", "the forum topic is gone"),
    # chat: the chat can no longer be written to
    Row(Scope.CHAT, 403, "bot was blocked by the user", "the user blocked the bot"),
    Row(
        Scope.CHAT,
        403,
        "bot was kicked from",
        "removed from the group, supergroup or channel",
        example="Forbidden: bot was kicked from the supergroup chat",
    ),
    Row(
        Scope.CHAT,
        403,
        "bot is not a member of",
        "not (or no longer) in the channel or supergroup",
        example="Forbidden: bot is not a member of the channel chat",
    ),
    Row(Scope.CHAT, 403, "user is deactivated", "the user deleted their account"),
    Row(
        Scope.CHAT,
        403,
        "bot can't initiate conversation with a user",
        "the user never started the bot (or stopped it)",
    ),
    Row(Scope.CHAT, 403, "bot can't send messages to bots", "the chat is another bot"),
    Row(Scope.CHAT, 403, "the group chat was deleted", "the group is gone"),
    Row(Scope.CHAT, 400, "chat not found", "the chat does not exist (any more) for this bot"),
    Row(
        Scope.CHAT,
        400,
        "group chat was upgraded to a supergroup chat",
        "the group moved to a new id (parameters.migrate_to_chat_id, named in the reason)",
    ),
    Row(
        Scope.CHAT,
        400,
        "not enough rights to send",
        "an admin took the bot's right to post in the group",
        example="Bad Request: not enough rights to send text messages to the chat",
    ),
    Row(Scope.CHAT, 400, "have no rights to send a message", "the bot may not post in the group"),
    # bot: every call is refused
    Row(Scope.BOT, 401, "unauthorized", "the token is revoked or wrong", example="Unauthorized"),
    Row(Scope.BOT, 404, "not found", "no bot has this token (deleted)", example="Not Found"),
    # retry later
    Row(
        Scope.RETRY,
        429,
        "too many requests",
        "flood control: wait parameters.retry_after",
        example="Too Many Requests: retry after 7",
    ),
    Row(Scope.RETRY, 502, "bad gateway", "Telegram restarting or overloaded", example="Bad Gateway"),
    Row(
        Scope.RETRY,
        500,
        "internal server error",
        "Telegram's own fault",
        example="Internal Server Error",
    ),
)


def fallback(status: int) -> Scope:
    """The class of an answer no row knows, by its status alone: never `done`."""
    if status in (401, 404):
        return Scope.BOT  # PTB takes both for an invalid token: every call fails alike
    if status == 403:
        return Scope.CHAT  # every 403 Telegram documents is about the bot's access to a chat
    if status in (408, 420, 429) or status >= 500 or status < 400:
        return Scope.RETRY  # Telegram may answer later; the redrive bound stops an endless loop
    return Scope.MESSAGE


@dataclass(frozen=True)
class Verdict:
    """What one error answer is: its class, the row that said so (None: by status) and details."""

    scope: Scope
    row: Row | None
    method: str
    status: int
    description: str
    retry_after: float | None = None
    migrate_to_chat_id: int | None = None

    @property
    def reason(self) -> str:
        return self.reason_to(None)

    def reason_to(self, chat_id: object) -> str:
        """Safe to log: the method (and the chat, when given), the status, Telegram's description
        (no token, no URL)."""
        to = f" to chat {chat_id}" if chat_id is not None else ""
        reason = f"telegram {self.method}{to}: HTTP {self.status}"
        reason += f" {self.description[:300]}" if self.description else ""
        if self.migrate_to_chat_id is not None:
            reason += f" (now chat {self.migrate_to_chat_id})"
        return reason

    def error(self, chat_id: object = None) -> ConsumerError | None:
        """The worker's exception for this answer (None for `done`); `chat_id` is the chat the call
        was made to, which a `chat` refusal names."""
        if self.scope is Scope.DONE:
            return None
        if self.scope is Scope.RETRY:
            return TransientError(self.reason, retry_after=self.retry_after)
        if self.scope is Scope.BOT:
            return AccountRefused(self.reason, UNAUTHORIZED)
        if self.scope is Scope.CHAT:
            return ChatUnreachable(self, chat_id)
        return PermanentError(self.reason)


class ChatUnreachable(PermanentError):
    """A `chat` answer: the chat `chat_id` can no longer be written to (module docstring)."""

    def __init__(self, verdict: Verdict, chat_id: object) -> None:
        super().__init__(verdict.reason_to(chat_id))
        self.verdict = verdict
        self.chat_id = chat_id
        self.description = verdict.description


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
    return float(value) if ok else None


def classify(method: str, status: int, body: Any) -> Verdict:
    """The verdict on an answer of `status` (not 2xx, or `ok` not true) with JSON `body` (any
    value: a body that is not Telegram's object is classified by its status)."""
    document = body if isinstance(body, Mapping) else {}
    description = document.get("description")
    description = description if isinstance(description, str) else ""
    parameters = document.get("parameters")
    parameters = parameters if isinstance(parameters, Mapping) else {}
    retry_after = _number(parameters.get("retry_after"))
    migrate = parameters.get("migrate_to_chat_id")
    migrate = migrate if isinstance(migrate, int) and not isinstance(migrate, bool) else None
    lowered = description.casefold()
    row = next(
        (
            r
            for r in ROWS
            if r.status == status and r.text in lowered and (r.methods is None or method in r.methods)
        ),
        None,
    )
    scope = row.scope if row is not None else fallback(status)
    if migrate is not None:
        scope = Scope.CHAT  # the old id is gone for good, whatever the wording
    elif retry_after is not None and scope is not Scope.DONE:
        scope = Scope.RETRY  # Telegram asked to wait: that is what the call needs
    return Verdict(scope, row, method, status, description, retry_after, migrate)
