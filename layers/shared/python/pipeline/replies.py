"""The autoreply consumer's reply table: env AUTOREPLY_REPLIES, read by `functions/autoreply`
at run time and checked by the stack at synth (`infra.environment`), with this one parser.

AUTOREPLY_REPLIES is a JSON object merged over DEFAULT_REPLIES, e.g.
`{"/start": "Hi!", "/help": "...", "default": "We'll be in touch."}`; a null or "" value turns a
default off. Command keys match case-insensitively (they are lower-cased here).
"""

from __future__ import annotations

import functools
import json

REPLIES_ENV = "AUTOREPLY_REPLIES"
DEFAULT_REPLIES: dict[str, str] = {
    "/start": "Hello! Thanks for reaching out. Tell us what you need and our team will answer here.",
    "/help": "Write your question in this chat and a person from our team will reply here.",
}
# The reply to any message without a command reply of its own (none unless configured).
DEFAULT_KEY = "default"


class RepliesError(ValueError):
    """An AUTOREPLY_REPLIES value the autoreply consumer cannot use."""


@functools.lru_cache(maxsize=4)
def parse_replies(raw: str) -> dict[str, str]:
    """The reply table in force for AUTOREPLY_REPLIES = `raw` ("" or blank: the defaults)."""
    try:
        configured = json.loads(raw) if raw.strip() else {}
    except ValueError:
        raise RepliesError(f"{REPLIES_ENV} is not valid JSON") from None
    if not isinstance(configured, dict) or not all(
        (key.startswith("/") or key == DEFAULT_KEY) and (value is None or isinstance(value, str))
        for key, value in configured.items()
    ):
        raise RepliesError(f'{REPLIES_ENV} must map "/command" or "{DEFAULT_KEY}" to a string or null')
    merged: dict[str, str | None] = dict(DEFAULT_REPLIES)
    merged.update((key.lower(), value) for key, value in configured.items())
    return {key: value for key, value in merged.items() if value}
