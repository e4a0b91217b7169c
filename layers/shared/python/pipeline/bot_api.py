"""A minimal Telegram Bot API client: one `call(method, params)` on the shared JSON client, and
what the reply consumer and the bot engine share about every call's answer.

Requests go to `<TELEGRAM_API_BASE>/bot<token>/<method>`; the base is overridable so the local
runtime and tests can point it at a fake on loopback. The token is part of every URL, so it is
handed to the HTTP client as a secret: no error reason or log line can contain it.

Every answer that is not `{"ok": true}` is judged by the one table (`pipeline.bot_api_errors`),
here for the reply consumer and in `pipeline.telegram_bot.calls` for the bot engine: `verdict`
reads the answer, `already_done` notes a call whose effect held, and `pipeline.blocked.unreachable`
records a chat the update came from that can no longer be written to.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from pipeline import deadline, pacing
from pipeline.bot_api_errors import Verdict, classify
from pipeline.errors import PermanentError
from pipeline.http import JsonHttpClient, JsonResponse

logger = Logger(child=True)
metrics = Metrics()

DEFAULT_API_BASE = "https://api.telegram.org"
# What a call whose effect already held (`Scope.DONE`) is answered with.
DONE_RESULT = True
TIMEOUT_SECONDS = pacing.BOT_API_TIMEOUT_SECONDS
# "<bot id>:<35 characters>", as BotFather issues them.
_TOKEN = re.compile(r"[0-9]{1,20}:[A-Za-z0-9_-]{20,}")


def api_base() -> str:
    """The Bot API root: TELEGRAM_API_BASE (the local runtime, tests) or Telegram's."""
    return (os.environ.get("TELEGRAM_API_BASE") or DEFAULT_API_BASE).rstrip("/")


def verdict(method: str, response: JsonResponse, redact: Callable[[str], str] = str) -> Verdict | None:
    """None for an answer `{"ok": true}`; else the table's verdict on it (description redacted)."""
    body = response.body if isinstance(response.body, Mapping) else {}
    if response.ok and body.get("ok") is True:
        return None
    if isinstance(body.get("description"), str):
        body = {**body, "description": redact(body["description"])}
    return classify(method, response.status, body)


def already_done(found: Verdict) -> None:
    """Log and count a call Telegram refused because its effect already held (`Scope.DONE`)."""
    metrics.add_metric(name="BotCallsAlreadyDone", unit=MetricUnit.Count, value=1)
    logger.info(
        "telegram call already had its effect: counted as answered",
        extra={"method": found.method, "description": found.description},
    )


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
        """The method's `result` (DONE_RESULT when its effect already held); otherwise the table's
        error (`pipeline.bot_api_errors`): ChatUnreachable, AccountRefused, TransientError or
        PermanentError."""
        if self.pacer is not None and pacing.is_message(method):
            self.pacer.wait(params.get("chat_id"), TIMEOUT_SECONDS)
        deadline.require(TIMEOUT_SECONDS, f"telegram {method}")
        http = JsonHttpClient(f"telegram {method}", secrets=(self._token,), timeout=TIMEOUT_SECONDS)
        response = http.post(f"{self.base_url}/bot{self._token}/{method}", dict(params))
        if response.status == 429 and self.pacer is not None:  # the whole bot waits (`pipeline.pacing`)
            raise self.pacer.flood(
                response.body if isinstance(response.body, Mapping) else {}, self.pacer.clock()
            )
        found = verdict(method, response, http.redact)
        if found is None:
            body = response.body
            return body.get("result") if isinstance(body, Mapping) else None
        error = found.error(params.get("chat_id"))
        if error is None:
            already_done(found)
            return DONE_RESULT
        raise error
