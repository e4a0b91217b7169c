"""A stand-in for the Telegram Bot API: `/bot<token>/<method>`, answered the way Telegram does.

Every answer is `{"ok": true, "result": ...}` or `{"ok": false, "error_code": ..., "description":
...}` (429 adds `parameters.retry_after`). `send*` methods return a `Message`; a wrong token gets
401 like the real API, an unknown method 404. The token is masked in `/_calls`.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from typing import Any, ClassVar

from local.fakes.base import FakeRequest, FakeResponse, FakeService, status_phrase

# Shaped like a BotFather token ("<id>:<at least 20 of A-Z a-z 0-9 _ ->"): clients check the shape.
DEFAULT_BOT_TOKEN = "123456:LOCAL-fake-token-for-the-local-runtime"  # noqa: S105 - a fake's token
MAX_MESSAGE_LENGTH = 4096
_METHOD_PATH = re.compile(r"^/bot(?P<token>[^/]+)/(?P<method>[A-Za-z]+)$")

# Methods answered with `true` (lowercased: Telegram matches method names case-insensitively).
TRUE_METHODS = frozenset(
    {
        "answercallbackquery",
        "sendchataction",
        "setwebhook",
        "deletewebhook",
        "setmycommands",
        "deletemessage",
        "setmessagereaction",
    }
)
# Fields of a send* request copied into the returned Message.
_ECHOED_FIELDS = ("text", "caption", "reply_markup", "entities")


class TelegramFake(FakeService):
    name: ClassVar[str] = "telegram"

    def __init__(self, host: str = "127.0.0.1", port: int = 0, token: str = DEFAULT_BOT_TOKEN) -> None:
        super().__init__(host, port)
        self.token = token
        self.bot_id = int(token.split(":", 1)[0]) if token.split(":", 1)[0].isdigit() else 1
        self._message_ids = itertools.count(1)
        self._ids_lock = threading.Lock()

    @property
    def bot_user(self) -> dict[str, Any]:
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": "Local Pipeline Bot",
            "username": "local_pipeline_bot",
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }

    def redact_path(self, path: str) -> str:
        return _METHOD_PATH.sub(lambda m: f"/bot<token>/{m['method']}", path)

    def error_response(self, status: int, retry_after: int | None = None) -> FakeResponse:
        if status == 429:
            after = retry_after if retry_after is not None else 1
            return self._error(429, f"Too Many Requests: retry after {after}", {"retry_after": after})
        return self._error(status, status_phrase(status))

    @staticmethod
    def _error(status: int, description: str, parameters: dict[str, Any] | None = None) -> FakeResponse:
        body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
        if parameters:
            body["parameters"] = parameters
        return FakeResponse(status, body)

    @staticmethod
    def _ok(result: Any) -> FakeResponse:
        return FakeResponse(200, {"ok": True, "result": result})

    def answer(self, request: FakeRequest) -> FakeResponse:
        match = _METHOD_PATH.match(request.path)
        if match is None:
            return self._error(404, "Not Found")
        if match["token"] != self.token:
            return self._error(401, "Unauthorized")
        method = match["method"].lower()
        params = request.params()
        if method == "getme":
            return self._ok(self.bot_user)
        if method == "getwebhookinfo":
            return self._ok({"url": "", "has_custom_certificate": False, "pending_update_count": 0})
        if method.startswith("send") and method != "sendchataction":
            return self._send(method, params)
        if method == "answercallbackquery" and not params.get("callback_query_id"):
            return self._error(
                400, "Bad Request: query is too old and response timeout expired or query ID is invalid"
            )
        if method in TRUE_METHODS:
            return self._ok(True)
        return self._error(404, "Not Found")

    def _send(self, method: str, params: dict[str, Any]) -> FakeResponse:
        chat = self._chat(params.get("chat_id"))
        if chat is None:
            return self._error(400, "Bad Request: chat_id is empty")
        text = params.get("text")
        if method == "sendmessage":
            if not isinstance(text, str) or not text.strip():
                return self._error(400, "Bad Request: message text is empty")
            if len(text) > MAX_MESSAGE_LENGTH:
                return self._error(400, "Bad Request: message is too long")
        with self._ids_lock:
            message_id = next(self._message_ids)
        message: dict[str, Any] = {
            "message_id": message_id,
            "from": self.bot_user,
            "chat": chat,
            "date": int(time.time()),
        }
        message.update({name: params[name] for name in _ECHOED_FIELDS if params.get(name) is not None})
        return self._ok(message)

    @staticmethod
    def _chat(chat_id: Any) -> dict[str, Any] | None:
        """A `Chat` for the id the caller gave: private for positive ids, groups for negative ones."""
        if isinstance(chat_id, str) and chat_id.startswith("@"):
            return {"id": -1001000000000, "type": "channel", "title": chat_id[1:], "username": chat_id[1:]}
        try:
            numeric = int(chat_id)
        except (TypeError, ValueError):
            return None
        if numeric > 0:
            return {"id": numeric, "type": "private", "first_name": "Local user"}
        chat_type = "supergroup" if str(numeric).startswith("-100") else "group"
        return {"id": numeric, "type": chat_type, "title": "Local group"}
