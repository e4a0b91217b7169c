"""A minimal Telegram Bot API client: one `call(method, params)` on the shared JSON client.

Requests go to `<TELEGRAM_API_BASE>/bot<token>/<method>`; the base is overridable so the local
runtime and tests can point it at a fake on loopback. The token is part of every URL, so it is
handed to the HTTP client as a secret: no error reason or log line can contain it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from pipeline import deadline, pacing
from pipeline.errors import PermanentError
from pipeline.http import JsonHttpClient

DEFAULT_API_BASE = "https://api.telegram.org"
# Telegram's description when a callback query was not answered in time.
EXPIRED_QUERY = "query is too old"
TIMEOUT_SECONDS = 8.0
# "<bot id>:<35 characters>", as BotFather issues them.
_TOKEN = re.compile(r"[0-9]{1,20}:[A-Za-z0-9_-]{20,}")


def api_base() -> str:
    """The Bot API root: TELEGRAM_API_BASE (the local runtime, tests) or Telegram's."""
    return (os.environ.get("TELEGRAM_API_BASE") or DEFAULT_API_BASE).rstrip("/")


def record_blocked(chat_id: int, description: str, event_id: str) -> None:
    """Note in the journal table that the user blocked the bot (or it left the chat): a 403 is
    recorded and acknowledged, never retried (retrying cannot help, and it is not a fault)."""
    from datetime import UTC, datetime

    from pipeline import aws

    aws.resource("dynamodb").Table(os.environ["JOURNAL_TABLE"]).put_item(
        Item={
            "id": f"blocked#{chat_id}",
            "chat_id": chat_id,
            "description": description,
            "event_id": event_id,
            "blocked_at": datetime.now(UTC).isoformat(),
        }
    )


class BotBlockedError(PermanentError):
    """HTTP 403: the user blocked the bot, or the bot was removed from the chat."""

    def __init__(self, reason: str, description: str) -> None:
        super().__init__(reason)
        self.description = description


class BotApi:
    def __init__(self, token: str, base_url: str | None = None, pacer: pacing.Pacer | None = None) -> None:
        token = token.strip()
        if not _TOKEN.fullmatch(token):
            # Say what is wrong without quoting the value.
            raise PermanentError("TELEGRAM_BOT_TOKEN_SECRET_ID secret is not a bot token (<id>:<secret>)")
        self._token = token
        self.base_url = (base_url or api_base()).rstrip("/")
        # Messages are spaced by the environment's share of Telegram's limits (`pipeline.pacing`).
        self.pacer = pacer or pacing.shared()

    def call(self, method: str, params: Mapping[str, Any]) -> Any:
        """The method's `result`; BotBlockedError on 403 (one chat), AccountRefused on 401 (the bot
        token revoked: every call), else TransientError/PermanentError as classified."""
        if self.pacer is not None and pacing.is_message(method):
            self.pacer.wait(params.get("chat_id"), TIMEOUT_SECONDS)
        deadline.require(TIMEOUT_SECONDS, f"telegram {method}")
        http = JsonHttpClient(f"telegram {method}", secrets=(self._token,), timeout=TIMEOUT_SECONDS)
        response = http.post(f"{self.base_url}/bot{self._token}/{method}", dict(params))
        if response.status == 429 and self.pacer is not None:  # the whole bot waits (`pipeline.pacing`)
            raise self.pacer.flood(
                response.body if isinstance(response.body, Mapping) else {}, self.pacer.clock()
            )
        body = response.body if isinstance(response.body, Mapping) else {}
        if response.ok and body.get("ok") is True:
            return body.get("result")
        description = http.redact(str(body.get("description") or ""))
        if response.status == 403:
            raise BotBlockedError(f"telegram {method}: HTTP 403 {description}", description)
        http.check(response, detail=description)
        raise http.permanent(f"HTTP {response.status} without ok=true")
