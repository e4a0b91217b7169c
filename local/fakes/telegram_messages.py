"""What the Telegram stand-in remembers of its own messages and callback queries, so a call made
again answers as Telegram does (`local.fakes.telegram`).

- An edit (`editMessageText`, `editMessageCaption`, `editMessageReplyMarkup`) leaving a message
  exactly as it is gets 400 "message is not modified: ..."; an edit of a deleted message gets
  "message to edit not found".
- Deleting a message already deleted gets "message to delete not found".
- Answering a callback query already answered gets "query is too old and response timeout
  expired or query ID is invalid".

Messages the stand-in did not send (ids a test made up) are not known: edits and deletes of
them succeed, as before, since the stand-in cannot tell what they hold.
"""

from __future__ import annotations

import json
import threading
from typing import Any

NOT_MODIFIED = (
    "message is not modified: specified new message content and reply markup are exactly the same as "
    "a current content and reply markup of the message"
)
EDIT_NOT_FOUND = "message to edit not found"
DELETE_NOT_FOUND = "message to delete not found"
QUERY_TOO_OLD = "query is too old and response timeout expired or query ID is invalid"

# The parts of a message each edit method sets (a missing reply_markup removes the keyboard).
_EDITED: dict[str, tuple[str, ...]] = {
    "editmessagetext": ("text", "entities", "reply_markup"),
    "editmessagecaption": ("caption", "caption_entities", "reply_markup"),
    "editmessagereplymarkup": ("reply_markup",),
}
_CONTENT = ("text", "entities", "caption", "caption_entities", "reply_markup")
Key = tuple[str, str]


def _canonical(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True)


def _key(params: dict[str, Any]) -> Key | None:
    chat_id, message_id = params.get("chat_id"), params.get("message_id")
    return None if chat_id is None or message_id is None else (str(chat_id), str(message_id))


class SentMessages:
    """The content of each message the stand-in sent (None once deleted), and answered queries."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._content: dict[Key, dict[str, str | None] | None] = {}
        self._answered: set[str] = set()

    def refusal(self, method: str, params: dict[str, Any]) -> str | None:
        """Telegram's description ("Bad Request: " left out) of why it refuses this call now, or
        None; a call that goes through changes what is remembered (`record` the result after)."""
        with self._lock:
            if method == "answercallbackquery":
                query = str(params.get("callback_query_id"))
                if query in self._answered:
                    return QUERY_TOO_OLD
                self._answered.add(query)
                return None
            key = _key(params)
            if key is None or key not in self._content:
                return None
            content = self._content[key]
            if method in ("deletemessage",):
                self._content[key] = None
                return DELETE_NOT_FOUND if content is None else None
            if method in _EDITED:
                if content is None:
                    return EDIT_NOT_FOUND
                edited = {**content, **{name: _canonical(params.get(name)) for name in _EDITED[method]}}
                if edited == content:
                    return NOT_MODIFIED
                self._content[key] = edited
            return None

    def record(self, message: Any) -> None:
        """Remember a `Message` the stand-in sent (an edit of a known message is remembered by
        `refusal`; one of an unknown message is not: the stand-in knows only part of it)."""
        if not isinstance(message, dict) or not isinstance(message.get("chat"), dict):
            return
        key = (str(message["chat"].get("id")), str(message.get("message_id")))
        with self._lock:
            self._content.setdefault(key, {name: _canonical(message.get(name)) for name in _CONTENT})
