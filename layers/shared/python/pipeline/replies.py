"""The autoreply consumer's reply table: the team's `team/autoreply.json` (the shipped one is an
example), read by the stack and the local runtime at synth or start, checked there with this one
parser, and passed to `functions/autoreply` in env AUTOREPLY_REPLIES; without that variable the
function reads the file itself.

The file is `{"version": 1, "replies": {"/start": "Hi!", "/help": "...", "default": "..."}}`;
AUTOREPLY_REPLIES carries its `replies` object alone. That object is the whole table: a command
without a reply of its own gets the `default` reply, if there is one. A null or "" value is no
reply. Command keys match case-insensitively (they are lower-cased here).
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

from pipeline.team import team_file

REPLIES_ENV = "AUTOREPLY_REPLIES"
REPLIES_FILE_NAME = "autoreply.json"
REPLIES_FILE_VERSION = 1
# The reply to any message without a command reply of its own (none unless configured).
DEFAULT_KEY = "default"


class RepliesError(ValueError):
    """A reply table the autoreply consumer cannot use."""


def _table(configured: Any, name: str) -> dict[str, str]:
    if not isinstance(configured, dict) or not all(
        (key.startswith("/") or key == DEFAULT_KEY) and (value is None or isinstance(value, str))
        for key, value in configured.items()
    ):
        raise RepliesError(f'{name} must map "/command" or "{DEFAULT_KEY}" to a string or null')
    return {key.lower(): value for key, value in configured.items() if value}


@functools.lru_cache(maxsize=4)
def parse_replies(raw: str) -> dict[str, str]:
    """The reply table AUTOREPLY_REPLIES = `raw` holds (a JSON object; "" or blank: none)."""
    try:
        configured = json.loads(raw) if raw.strip() else {}
    except ValueError:
        raise RepliesError(f"{REPLIES_ENV} is not valid JSON") from None
    return _table(configured, REPLIES_ENV)


def replies_file_table(text: str, name: str) -> dict[str, str | None]:
    """The `replies` object of an autoreply.json's `text` as written (`name` names the file in
    errors); refused as the function would refuse it."""
    try:
        document = json.loads(text)
    except ValueError as error:
        raise RepliesError(f"{name} is not valid JSON ({error})") from None
    if not isinstance(document, dict) or set(document) != {"version", "replies"}:
        raise RepliesError(f'{name} must be {{"version": {REPLIES_FILE_VERSION}, "replies": {{...}}}}')
    if document["version"] != REPLIES_FILE_VERSION:
        raise RepliesError(f"{name}: version must be {REPLIES_FILE_VERSION}, not {document['version']!r}")
    _table(document["replies"], f"{name}: replies")
    return dict(document["replies"])


def team_replies() -> str:
    """The team's reply table (`team/autoreply.json`), compact, as AUTOREPLY_REPLIES carries it."""
    path = team_file(REPLIES_FILE_NAME)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise RepliesError(f"{path}: cannot read the autoreply texts: {error.strerror}") from None
    table = replies_file_table(text, str(path))
    return json.dumps(table, ensure_ascii=False, separators=(",", ":"))


def replies_in_force() -> dict[str, str]:
    """The table the function answers with: AUTOREPLY_REPLIES, else (unset or blank) the team's file."""
    raw = os.environ.get(REPLIES_ENV, "")
    return parse_replies(raw if raw.strip() else team_replies())
