"""A stand-in for the Telegram Bot API: `/bot<token>/<method>`, answered the way Telegram does.

Every answer is `{"ok": true, "result": ...}` or `{"ok": false, "error_code": ..., "description":
...}` (429 adds `parameters.retry_after`). The methods, their required parameters and the type of
their result come from aiogram's model of the Bot API (`telegram_api.json`, written by
`telegram_api_gen`): every method a real bot calls is accepted, an unknown one gets 404 "Not
Found", a missing required parameter 400 "Bad Request: <param> is empty" (or Telegram's own
wording where it has one). `send*`/`forward*`/`edit*` methods return a `Message`, setters `true`,
getters a minimal valid object; `setWebhook`/`deleteWebhook` change what `getWebhookInfo` shows.
A wrong token gets 401 like the real API. The token is masked in `/_calls`. The token revoked or
a new one issued (`local.fakes.accounts`: `POST /_account/block {"cause": "revoked"}`,
`POST /_credential/rotate {"value": "<new token>"}`): 401 `{"ok": false, "error_code": 401,
"description": "Unauthorized"}`, as Telegram answers a revoked token.

The stand-in remembers the messages it sent and the callback queries it answered, so a call made
again is answered as Telegram answers it: an edit changing nothing "message is not modified", a
second delete "message to delete not found", a second answer "query is too old ..."
(`local.fakes.telegram_messages`). `POST /_refuse {"method": "sendMessage", "status": 403,
"description": "Forbidden: bot was blocked by the user", "parameters": {...}, "times": 1}`
answers the next calls of that method with that error body, as Telegram words it, without
their effect (`DELETE /_faults` forgets pending ones).

`POST /_crash_after {"method": "sendMessage", "nth": 1}` marks the nth next successful answer to
that method with a header asking the bot consumer (with the local runtime's LOCAL_CRASH_HOOKS) to
die right after it has journaled the answer: a worker crash between a handler's Bot API call and
its state commit, on cue (`DELETE /_crash_after`, or `DELETE /_faults`, forgets pending ones).

`POST /_blocked {"chat_ids": [...]}`: those users blocked the bot; every message to them is
answered 403 "Forbidden: bot was blocked by the user", as Telegram answers it.

`strict=True` (tests) also checks each call against aiogram's pydantic model of its method, and
refuses parameters the method does not have: a call aiogram would not make gets 400.

`limits=SendLimits()` (or `POST /_limits {"enforce": true}`; `GET /_limits` for the counts)
enforces Telegram's send limits with 429s (`local.fakes.telegram_limits`; a message sent with
`allow_paid_broadcast` is held to the paid rate, 1000 a second, instead); off by default.
"""

from __future__ import annotations

import contextlib
import copy
import email.parser
import email.policy
import functools
import itertools
import json
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from local.fakes.accounts import AccountSwitch
from local.fakes.base import FakeRequest, FakeResponse, FakeService, status_phrase
from local.fakes.telegram_limits import SendLimiter, SendLimits
from local.fakes.telegram_messages import SentMessages
from pipeline.pacing import is_message
from pipeline.telegram_bot.reference import CRASH_HEADER

# Shaped like a BotFather token ("<id>:<at least 20 of A-Z a-z 0-9 _ ->"): clients check the shape.
DEFAULT_BOT_TOKEN = "123456:LOCAL-fake-token-for-the-local-runtime"  # noqa: S105 - a fake's token
MAX_MESSAGE_LENGTH = 4096
DEFAULT_MAX_CONNECTIONS = 40
_METHOD_PATH = re.compile(r"^/bot(?P<token>[^/]+)/(?P<method>[A-Za-z]+)$")
_SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")
# Bot API methods by lowercased name (Telegram matches method names case-insensitively).
API_TABLE_PATH = Path(__file__).with_name("telegram_api.json")
API_METHODS: dict[str, dict[str, Any]] = json.loads(API_TABLE_PATH.read_text())
# Telegram's own wording for some missing parameters; the rest are "<param> is empty".
_MISSING: dict[tuple[str | None, str], str] = {
    ("sendmessage", "text"): "message text is empty",
    ("editmessagetext", "text"): "message text is empty",
    (None, "callback_query_id"): "query is too old and response timeout expired or query ID is invalid",
}
# Fields of a request copied into the returned Message.
_ECHOED_FIELDS = ("text", "caption", "reply_markup", "entities", "business_connection_id")


class TelegramFake(FakeService):
    name: ClassVar[str] = "telegram"

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str = DEFAULT_BOT_TOKEN,
        strict: bool = False,
        limits: SendLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(host, port)
        self.clock = clock
        self.limiter: SendLimiter | None = SendLimiter(limits, clock) if limits is not None else None
        self.token = token
        self.strict = strict
        self.bot_id = int(token.split(":", 1)[0]) if token.split(":", 1)[0].isdigit() else 1
        self._message_ids = itertools.count(1)
        self._state_lock = threading.Lock()
        self._webhook: dict[str, Any] = {}
        # Updates Telegram would be holding for the webhook; the fake makes none, tests may set it.
        self.pending_update_count = 0
        # Lowercased method -> answers to let pass before the one marked with CRASH_HEADER.
        self._crash_after: dict[str, int] = {}
        # The token revoked in @BotFather ("revoked": 401 to every call), or a new one issued.
        self.account = AccountSwitch({"revoked": lambda: self._error(401, "Unauthorized")}, self._new_token)
        self.messages = SentMessages()
        # Lowercased method -> error answers to give its next calls (`POST /_refuse`).
        self._refusals: dict[str, list[FakeResponse]] = {}
        # Private chats whose user blocked the bot (`POST /_blocked`): every message to them gets
        # Telegram's 403 "Forbidden: bot was blocked by the user", without its effect.
        self.blocked: set[int] = set()

    def block_chats(self, chat_ids: Any) -> None:
        """In-process `POST /_blocked {"chat_ids": [...]}`: those users block the bot."""
        with self._state_lock:
            self.blocked.update(int(chat) for chat in chat_ids)

    def _new_token(self, value: str) -> None:
        """@BotFather's "revoke current token": only `value` works from now on (same bot id)."""
        self.token = value

    def control(self, request: FakeRequest) -> FakeResponse:
        route = (request.method, request.path)
        if (switched := self.account.control(request)) is not None:
            return switched
        if route == ("POST", "/_crash_after"):
            document = request.json()
            method = document.get("method") if isinstance(document, dict) else None
            nth = document.get("nth", 1) if isinstance(document, dict) else None
            if not isinstance(method, str) or method.lower() not in API_METHODS:
                return FakeResponse(
                    400, {"error": "give the Bot API method to crash after, e.g. sendMessage"}
                )
            if not isinstance(nth, int) or nth < 1:
                return FakeResponse(400, {"error": "nth must be a positive integer"})
            with self._state_lock:
                self._crash_after[method.lower()] = nth
            return FakeResponse(200, {"crash_after": self.pending_crashes()})
        if route == ("POST", "/_refuse"):
            return self._add_refusal(request.json())
        if route == ("POST", "/_blocked"):
            document = request.json()
            chats = document.get("chat_ids") if isinstance(document, dict) else None
            if not isinstance(chats, list) or not all(isinstance(c, int) for c in chats):
                return FakeResponse(400, {"error": 'give {"chat_ids": [<chat id>, ...]}'})
            self.block_chats(chats)
            return FakeResponse(200, {"blocked": len(self.blocked)})
        if route == ("POST", "/_limits"):
            document = request.json()
            enforce = document.get("enforce") if isinstance(document, dict) else None
            if not isinstance(enforce, bool):
                return FakeResponse(400, {"error": 'give {"enforce": true} or {"enforce": false}'})
            self.limiter = SendLimiter(SendLimits(), self.clock) if enforce else None
            return FakeResponse(200, self.limit_counts())
        if route == ("GET", "/_limits"):
            return FakeResponse(200, self.limit_counts())
        if route == ("DELETE", "/_crash_after"):
            self.clear_crashes()
            return FakeResponse(200, {"crash_after": {}})
        return super().control(request)

    def refuse(self, method: str, status: int, description: str, **options: Any) -> None:
        """In-process `POST /_refuse`: the next `times` (1) calls of `method` get this error."""
        document = {"method": method, "status": status, "description": description, **options}
        response = self._add_refusal(document)
        if response.status != 200:
            raise ValueError(response.body["error"])

    def _add_refusal(self, document: Any) -> FakeResponse:
        document = document if isinstance(document, dict) else {}
        method, status = document.get("method"), document.get("status")
        description, parameters = document.get("description"), document.get("parameters")
        times = document.get("times", 1)
        if not isinstance(method, str) or method.lower() not in API_METHODS:
            return FakeResponse(400, {"error": "give the Bot API method to refuse, e.g. sendMessage"})
        if not isinstance(status, int) or not 400 <= status <= 599 or not isinstance(description, str):
            return FakeResponse(400, {"error": "give status (400..599) and Telegram's description"})
        if not isinstance(times, int) or times < 1 or not isinstance(parameters, dict | None):
            return FakeResponse(400, {"error": "times must be a positive integer, parameters an object"})
        with self._state_lock:
            answers = self._refusals.setdefault(method.lower(), [])
            answers.extend(self._error(status, description, parameters) for _ in range(times))
        return FakeResponse(200, {"refusals": self.pending_refusals()})

    def pending_refusals(self) -> dict[str, int]:
        with self._state_lock:
            return {method: len(answers) for method, answers in self._refusals.items() if answers}

    def _take_refusal(self, method: str) -> FakeResponse | None:
        with self._state_lock:
            answers = self._refusals.get(method)
            return answers.pop(0) if answers else None

    def limit_counts(self) -> dict[str, Any]:
        limiter = self.limiter
        return {"enforce": False} if limiter is None else {"enforce": True, **limiter.counts()}

    def pending_crashes(self) -> dict[str, int]:
        with self._state_lock:
            return dict(self._crash_after)

    def clear_crashes(self) -> None:
        with self._state_lock:
            self._crash_after.clear()

    def clear_faults(self) -> None:
        super().clear_faults()
        self.clear_crashes()
        with self._state_lock:
            self._refusals.clear()

    def _crash_requested(self, method: str) -> bool:
        with self._state_lock:
            remaining = self._crash_after.get(method)
            if remaining is None:
                return False
            if remaining > 1:
                self._crash_after[method] = remaining - 1
                return False
            del self._crash_after[method]
            return True

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

    @property
    def webhook_info(self) -> dict[str, Any]:
        """What `getWebhookInfo` answers now."""
        with self._state_lock:
            webhook = dict(self._webhook)
            pending = self.pending_update_count
        info: dict[str, Any] = {"url": webhook.get("url", ""), "has_custom_certificate": False}
        info["pending_update_count"] = pending
        if webhook:
            info["max_connections"] = webhook["max_connections"]
            for name in ("ip_address", "allowed_updates"):
                if webhook.get(name) is not None:
                    info[name] = webhook[name]
        return info

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
    def _bad_request(description: str) -> FakeResponse:
        return TelegramFake._error(400, f"Bad Request: {description}")

    @staticmethod
    def _ok(result: Any) -> FakeResponse:
        return FakeResponse(200, {"ok": True, "result": result})

    def fault_target(self, request: FakeRequest) -> str:
        """The path, then `?chat_id=<id>&` when the call names a chat: `"match": "chat_id=42&"`
        aims a fault at one chat (a poison update, a chat whose first attempts fail)."""
        chat_id = _params(request).get("chat_id")
        return f"{request.path}?chat_id={chat_id}&" if chat_id is not None else request.path

    def answer(self, request: FakeRequest) -> FakeResponse:
        match = _METHOD_PATH.match(request.path)
        if match is None:
            return self._error(404, "Not Found")
        if match["token"] != self.token:
            return self._error(401, "Unauthorized")
        if (refused := self.account.refusal()) is not None:
            return refused
        method = match["method"].lower()
        spec = API_METHODS.get(method)
        if spec is None:
            return self._error(404, "Not Found")
        if (injected := self._take_refusal(method)) is not None:
            return injected
        params = _params(request)
        if method == "setwebhook":
            return self._set_webhook(params)
        for name in spec["required"]:
            if _missing(params.get(name)):
                wording = _MISSING.get((method, name)) or _MISSING.get((None, name)) or f"{name} is empty"
                return self._bad_request(wording)
        if self.strict:
            refusal = strict_refusal(spec["name"], params)
            if refusal is not None:
                return self._bad_request(refusal)
        if is_message(method) and str(params.get("chat_id", "")).lstrip("-").isdigit():
            with self._state_lock:
                blocked = int(params["chat_id"]) in self.blocked
            if blocked:
                return self._error(403, "Forbidden: bot was blocked by the user")
        limiter = self.limiter
        if limiter is not None and is_message(method) and params.get("chat_id") is not None:
            wait = limiter.admit(params["chat_id"], paid=_truthy(params.get("allow_paid_broadcast")))
            if wait is not None:
                return self.error_response(429, max(1, math.ceil(wait)))
        if (again := self.messages.refusal(method, params)) is not None:
            return self._bad_request(again)
        response = self._result(method, spec, params)
        if (
            response.status == 200
            and isinstance(response.body, dict)
            and not method.startswith(("edit", "stop"))
        ):
            result = response.body.get("result")  # a new message (edits of known ones: `refusal`)
            for message in result if isinstance(result, list) else [result]:
                self.messages.record(message)
        if response.status == 200 and self._crash_requested(method):
            response.headers[CRASH_HEADER] = "1"
        return response

    def _result(self, method: str, spec: dict[str, Any], params: dict[str, Any]) -> FakeResponse:
        kind = spec["result"]
        if kind == "true":
            if method == "deletewebhook":
                self._delete_webhook(params)
            return self._ok(True)
        if kind == "bot_user":
            return self._ok(self.bot_user)
        if kind == "webhook_info":
            return self._ok(self.webhook_info)
        if method == "getupdates" and self.webhook_info["url"]:
            return self._error(
                409,
                "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to "
                "delete the webhook first",
            )
        if kind == "sample":
            return self._ok(copy.deepcopy(spec["sample"]))
        if kind == "message_or_true" and params.get("inline_message_id"):
            return self._ok(True)
        has_chat_id = "chat_id" in spec["required"] or "chat_id" in spec["optional"]
        chat = self._chat(params.get("chat_id") if has_chat_id else params.get("user_id", self.bot_id))
        if chat is None:
            return self._bad_request("chat not found" if "chat_id" in params else "chat_id is empty")
        if kind == "chat":
            return self._ok({**spec["sample"], **chat})
        if kind == "message_id":
            return self._ok({"message_id": self._next_message_id()})
        if kind == "message_ids":
            ids = params.get("message_ids")
            count = len(ids) if isinstance(ids, list) else 1
            return self._ok([{"message_id": self._next_message_id()} for _ in range(count)])
        if kind == "messages":
            media = params.get("media")
            count = len(media) if isinstance(media, list) else 1
            return self._ok([self._message(method, params, chat) for _ in range(count)])
        if method == "sendmessage":
            text = params.get("text")
            if not isinstance(text, str) or not text.strip():
                return self._bad_request("message text is empty")
            if len(text) > MAX_MESSAGE_LENGTH:
                return self._bad_request("message is too long")
        return self._ok(self._message(method, params, chat))

    def _next_message_id(self) -> int:
        with self._state_lock:
            return next(self._message_ids)

    def _message(self, method: str, params: dict[str, Any], chat: dict[str, Any]) -> dict[str, Any]:
        edited = method.startswith("edit") or method.startswith("stop")
        message_id = params.get("message_id") if edited else None
        message: dict[str, Any] = {
            "message_id": message_id if isinstance(message_id, int) else self._next_message_id(),
            "from": self.bot_user,
            "chat": chat,
            "date": int(time.time()),
        }
        if edited:
            message["edit_date"] = int(time.time())
        message.update({name: params[name] for name in _ECHOED_FIELDS if params.get(name) is not None})
        markup = message.get("reply_markup")
        if not (isinstance(markup, dict) and "inline_keyboard" in markup):
            # A Message carries only an inline keyboard: reply keyboards and their removal are
            # the client's, not part of the message Telegram returns.
            message.pop("reply_markup", None)
        return message

    def _set_webhook(self, params: dict[str, Any]) -> FakeResponse:
        url = params.get("url")
        if _missing(url):  # Telegram: an empty url removes the webhook
            self._delete_webhook(params)
            return self._ok(True)
        secret = params.get("secret_token")
        if secret is not None and not (isinstance(secret, str) and _SECRET_TOKEN.fullmatch(secret)):
            return self._bad_request("secret token contains unallowed characters")
        max_connections = params.get("max_connections", DEFAULT_MAX_CONNECTIONS)
        try:
            max_connections = int(max_connections)
        except (TypeError, ValueError):
            return self._bad_request("invalid max_connections specified")
        allowed = params.get("allowed_updates")
        if allowed is not None and not (
            isinstance(allowed, list) and all(isinstance(a, str) for a in allowed)
        ):
            return self._bad_request("can't parse allowed updates")
        if self.strict:
            refusal = strict_refusal("setWebhook", params)
            if refusal is not None:
                return self._bad_request(refusal)
        with self._state_lock:
            self._webhook = {
                "url": url,
                "secret_token": secret,
                "max_connections": min(max(max_connections, 1), 100),
                "allowed_updates": allowed,
                "ip_address": params.get("ip_address"),
            }
            if _truthy(params.get("drop_pending_updates")):
                self.pending_update_count = 0
        return self._ok(True)

    def _delete_webhook(self, params: dict[str, Any]) -> None:
        with self._state_lock:
            self._webhook = {}
            if _truthy(params.get("drop_pending_updates")):
                self.pending_update_count = 0

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


@dataclass(frozen=True)
class Upload:
    """A file sent in a multipart/form-data call (sendPhoto, sendDocument, uploadStickerFile...)."""

    filename: str
    data: bytes


def _params(request: FakeRequest) -> dict[str, Any]:
    """The call's parameters; multipart bodies too, their file parts as `Upload`s."""
    content_type = request.headers.get("content-type", "")
    params: dict[str, Any] = _decoded(request.query)
    if "application/x-www-form-urlencoded" in content_type:
        return {**params, **_decoded(request.params())}
    if "multipart/form-data" not in content_type:
        document = request.json()  # JSON values are already typed: a text of "[1]" stays a string
        return {**params, **document} if isinstance(document, dict) else params
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    document = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + request.body)
    for part in document.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            continue
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        filename = part.get_filename()
        params[name] = Upload(filename, data) if filename else data.decode("utf-8", "replace")
    return _decoded(params)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value)


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() in ("true", "1"))


def _decoded(params: dict[str, Any] | dict[str, str]) -> dict[str, Any]:
    """Form and query values that carry JSON (arrays, objects), decoded as Telegram does."""
    decoded: dict[str, Any] = dict(params)
    for name, value in params.items():
        if isinstance(value, str) and value[:1] in ("[", "{"):
            with contextlib.suppress(ValueError):
                decoded[name] = json.loads(value)
    return decoded


@functools.cache
def _method_models() -> dict[str, Any]:
    from local.fakes.telegram_api_gen import method_models  # aiogram: seconds to import, tests only

    return method_models()


def strict_refusal(api_name: str, params: dict[str, Any]) -> str | None:
    """Why aiogram's model of `api_name` refuses these parameters, or None when it accepts them."""
    from aiogram.types import BufferedInputFile
    from pydantic import ValidationError

    model = _method_models()[api_name]
    params = {
        name: BufferedInputFile(value.data, value.filename) if isinstance(value, Upload) else value
        for name, value in params.items()
    }
    known = {field.alias or name for name, field in model.model_fields.items()}
    unknown = sorted(set(params) - known)
    if unknown:
        return f"{api_name} has no parameter {', '.join(unknown)}"
    try:
        model.model_validate(params)
    except ValidationError as error:
        first = error.errors()[0]
        return f"{'.'.join(str(part) for part in first['loc'])}: {first['msg']}"
    return None
