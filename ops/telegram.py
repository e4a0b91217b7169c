"""A minimal Telegram Bot API client for the webhook methods, on the standard library.

The bot token is part of every request URL, so it is scrubbed from every message this module
raises; Telegram's own error descriptions never contain it.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import string
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from ops.errors import OpsError

DEFAULT_API_BASE = "https://api.telegram.org"
API_BASE_ENV = "TELEGRAM_API_BASE"
BOT_TOKEN_ENV = "TELEGRAM_BOT_TOKEN"  # noqa: S105 (a variable name)
# setWebhook's secret_token: 1-256 characters of A-Z a-z 0-9 _ -.
SECRET_TOKEN_ALPHABET = string.ascii_letters + string.digits + "_-"
SECRET_TOKEN_LENGTH = 64
# Telegram's own default for setWebhook's max_connections.
DEFAULT_MAX_CONNECTIONS = 40
# "<bot id>:<secret>"; checked so a placeholder left in the secret gets a clear message.
_BOT_TOKEN = re.compile(r"[0-9]{1,20}:[A-Za-z0-9_-]+")


class TelegramApiError(OpsError):
    """Telegram answered `ok: false`; `error_code` is its HTTP-like code (401, 400, 429...)."""

    def __init__(self, method: str, error_code: int | None, description: str) -> None:
        self.method = method
        self.error_code = error_code
        self.description = description
        if error_code in (401, 404):
            message = (
                f"Telegram rejected the bot token ({error_code} {description}): check the token in "
                "--bot-token-secret / TELEGRAM_BOT_TOKEN"
            )
        else:
            message = f"Telegram {method} failed: {error_code} {description}"
        super().__init__(message)


# The CRM token goes in URL paths and templates: letters and digits only, as the stack generates it.
CRM_TOKEN_ALPHABET = string.ascii_letters + string.digits


def generate_secret_token(alphabet: str = SECRET_TOKEN_ALPHABET) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(SECRET_TOKEN_LENGTH))


def check_bot_token(token: str, origin: str) -> str:
    token = token.strip()
    if not _BOT_TOKEN.fullmatch(token):
        raise OpsError(
            f"{origin} does not hold a bot token (<id>:<secret> from @BotFather; still a placeholder?)"
        )
    return token


def api_base_from_env() -> str:
    return os.environ.get(API_BASE_ENV) or DEFAULT_API_BASE


class BotApi:
    """`call(method, params)` posts JSON to `<base>/bot<token>/<method>` and returns `result`."""

    def __init__(self, token: str, base: str = DEFAULT_API_BASE, timeout: float = 15.0) -> None:
        if urlsplit(base).scheme not in ("https", "http"):
            raise OpsError(f"Telegram API base must be an http(s) URL, got {base!r}")
        self._token = token
        self.base = base.rstrip("/")
        self.timeout = timeout

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        request = urllib.request.Request(  # noqa: S310 (scheme checked in __init__)
            f"{self.base}/bot{self._token}/{method}",
            data=json.dumps(params or {}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                status, body = response.status, response.read()
        except urllib.error.HTTPError as error:
            # Telegram answers errors (401, 400, 429...) with a JSON body describing them.
            status, body = error.code, error.read()
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise OpsError(
                self._scrub(f"cannot reach the Telegram Bot API at {self.base}: {reason}")
            ) from None
        try:
            answer = json.loads(body)
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or "ok" not in answer:
            raise OpsError(
                f"the Telegram Bot API at {self.base} answered {method} with HTTP {status}, not JSON"
            )
        if not answer["ok"]:
            code = answer.get("error_code")
            raise TelegramApiError(
                method,
                code if isinstance(code, int) else status,
                self._scrub(str(answer.get("description", ""))),
            )
        return answer.get("result")

    def _scrub(self, text: str) -> str:
        return text.replace(self._token, "<bot token>")

    def set_webhook(
        self,
        url: str,
        secret_token: str,
        *,
        allowed_updates: list[str] | None,
        max_connections: int,
        drop_pending_updates: bool,
    ) -> Any:
        params: dict[str, Any] = {
            "url": url,
            "secret_token": secret_token,
            "max_connections": max_connections,
        }
        if allowed_updates is not None:
            params["allowed_updates"] = allowed_updates
        if drop_pending_updates:
            params["drop_pending_updates"] = True
        return self.call("setWebhook", params)

    def get_webhook_info(self) -> dict[str, Any]:
        result = self.call("getWebhookInfo")
        if not isinstance(result, dict):
            raise OpsError("getWebhookInfo returned no WebhookInfo object")
        return result

    def delete_webhook(self, drop_pending_updates: bool) -> Any:
        return self.call("deleteWebhook", {"drop_pending_updates": drop_pending_updates})
