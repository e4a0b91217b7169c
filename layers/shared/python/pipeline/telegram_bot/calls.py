"""The Bot API call journal: each call a handler makes for an update is answered at most once
by Telegram, even when the update is processed again.

`JournaledRequest` wraps the transport (`pipeline.telegram_bot.transport.PooledRequest`). While an
update is processed (`journaled(event_id)`), its n-th call is looked up in the journal table as
`botcall#<event id>#<n>`: a call answered before (same method, same parameters and uploaded
files, whatever names PTB gave the uploads: `call_digest`) gets the stored answer and Telegram
is not called; otherwise Telegram is called and a successful answer is stored before the
handler goes on. So a replay after a crash (between a handler's sendMessage
and the state commit or the idempotency record) continues the same step without repeating it.

A replay whose n-th call differs from the stored one is never sent: the step has already said
something to the chat, and a different message after it (a ticket number read afresh after the
commit lost to another chat's step, a time of day) would contradict it. The call raises
`ReplayDiverged` (a PermanentError: the record is dead-lettered, its notice on the alarm topic),
naming the call, its method and which parameters differ, never their values; every later call
of the step is refused too, even if the handler catches the error. Each entry keeps a short hash
per parameter (`parts`) for that; an entry written before has none and reads "parameters".

Every answer that is not a success is judged by the Bot API error table the reply consumer reads
too (`pipeline.bot_api_errors`, through `pipeline.bot_api.verdict`), in or outside a step. One
whose effect already held (`done`: a replayed edit answered "message is not modified", a callback
query already answered) is taken for `{"ok": true, "result": true}` and journaled as such, so
the handler goes on. Any other is raised as the error PTB would raise for it (`BadRequest`,
`Forbidden`, `RetryAfter`, ...: handlers catch them as usual) carrying the table's verdict and
the chat the call was made to (`Refused`): the engine turns it into the worker's error, and takes
a `chat` refusal for a chat the user closed only when it came from the update's own private chat
(pipeline.telegram_bot.engine).

A call whose answer never arrived (a crash or timeout mid-call) has no entry: it is made again on
replay. Telegram has no idempotency key, so in that window, the one HTTP round trip plus one
journal write, a message may be sent twice; failing the step instead would lose it.

Calls outside an update (getMe at initialize) go straight to Telegram. Entries expire with the
idempotency records (pipeline.retention), which outlive every redelivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import json
import os
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Conflict,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
)
from telegram.request import BaseRequest, RequestData

from pipeline import aws, pacing
from pipeline.bot_api import TIMEOUT_SECONDS, already_done, verdict
from pipeline.bot_api_errors import Verdict
from pipeline.errors import PermanentError
from pipeline.formats import by_name as by_format
from pipeline.http import JsonResponse
from pipeline.retention import IDEMPOTENCY_TTL_SECONDS
from pipeline.telegram_bot.reference import CRASH_HEADER, CRASH_HOOKS_ENV

if TYPE_CHECKING:
    from telegram._utils.types import ODVInput

DEFAULT_NONE = BaseRequest.DEFAULT_NONE
logger = Logger(child=True)

# With CRASH_HOOKS_ENV (local runtime only), a Bot API answer carrying CRASH_HEADER from the
# Telegram stand-in ends the process right after the answer is journaled, as a crash would.
CRASH_EXIT_CODE = 70
# DynamoDB's item limit is 400 KB; a larger answer (rare: a huge message list) is not journaled.
MAX_JOURNALED_BYTES = 300_000
# What a call whose effect already held (the table's `done`) is taken for.
ANSWERED = b'{"ok":true,"result":true}'
# An upload referenced from a parameter (InputMedia.media, thumbnail): `attach://<part name>`.
_ATTACH = re.compile(r"attach://([A-Za-z0-9_-]+)")


@dataclass
class Step:
    """The update being processed: its event id and how many Bot API calls it made so far."""

    event_id: str
    calls: int = 0
    replayed: int = 0
    # Why the step was stopped: the first call that differed from its journal entry.
    diverged: str | None = None
    crash_requested: bool = field(default=False, repr=False)


_STEP: contextvars.ContextVar[Step | None] = contextvars.ContextVar("bot_step", default=None)


@contextlib.contextmanager
def journaled(event_id: str) -> Iterator[Step]:
    step = Step(event_id)
    token = _STEP.set(step)
    try:
        yield step
    finally:
        _STEP.reset(token)


def current_event_id() -> str | None:
    """The event id of the update being processed (handlers may key their own side effects on it)."""
    step = _STEP.get()
    return step.event_id if step else None


# The journal entry's format (`pipeline.formats`).
CALL_FORMAT = by_format("bot_api_call")


def recorded_call(item: dict[str, Any] | None) -> dict[str, Any] | None:
    """A journal entry as read (None: none), of a version this code reads (1 only adds the version)."""
    if item:
        CALL_FORMAT.version_of(item)
    return item


class CallJournal:
    """`botcall#...` entries in the journal table (JOURNAL_TABLE)."""

    def __init__(self, table_name: str | None = None) -> None:
        self._table_name = table_name

    @property
    def table_name(self) -> str:
        return self._table_name or os.environ["JOURNAL_TABLE"]

    @staticmethod
    def key(event_id: str, index: int) -> str:
        return f"botcall#{event_id}#{index}"

    def get(self, event_id: str, index: int) -> dict[str, Any] | None:
        response = aws.client("dynamodb").get_item(
            TableName=self.table_name, Key={"id": {"S": self.key(event_id, index)}}, ConsistentRead=True
        )
        return recorded_call(response.get("Item"))

    def put(
        self,
        event_id: str,
        index: int,
        method: str,
        digest: str,
        status: int,
        payload: bytes,
        parts: dict[str, str] | None = None,
    ) -> None:
        item: dict[str, Any] = {
            "id": {"S": self.key(event_id, index)},
            **CALL_FORMAT.written(),
            "method": {"S": method},
            "digest": {"S": digest},
            "status": {"N": str(status)},
            "payload": {"B": payload},
            "expiration": {"N": str(int(time.time()) + IDEMPOTENCY_TTL_SECONDS)},
        }
        if parts:
            item["parts"] = {"M": {name: {"S": value} for name, value in parts.items()}}
        aws.client("dynamodb").put_item(TableName=self.table_name, Item=item)


class ReplayDiverged(PermanentError):
    """A replayed step's call differs from the one its journal says went out (module docstring)."""


def divergence(index: int, method: str, parts: dict[str, str], stored: dict[str, Any]) -> str:
    """Why the replay stopped: which call, its method, the names of what differs (no values:
    they may hold phone numbers or other personal data)."""
    journaled = stored["method"]["S"]
    if journaled != method:
        what = f"{method} where the journal has {journaled}"
    else:
        before = {name: value["S"] for name, value in stored.get("parts", {}).get("M", {}).items()}
        names = sorted(n for n in set(parts) | set(before) if parts.get(n) != before.get(n))
        what = f"{method} with different {', '.join(names) if before and names else 'parameters'}"
    return (
        f"replay diverged at call {index + 1}: {what}; stopped before sending it, since the "
        "journaled call already went out (the step read state another step changed since, or "
        "its handler is not deterministic)"
    )


class Refused:
    """What the errors a refused call raises add to PTB's: the table's `verdict` and the chat the
    call was made to (None: the call names no chat)."""

    verdict: Verdict
    chat_id: object

    @property
    def method(self) -> str:
        return self.verdict.method


class RefusedBadRequest(Refused, BadRequest):
    """HTTP 400."""


class ForbiddenCall(Refused, Forbidden):
    """HTTP 403."""


class RefusedToken(Refused, InvalidToken):
    """HTTP 401 or 404 (PTB takes both for an invalid token)."""


class RefusedConflict(Refused, Conflict):
    """HTTP 409."""


class RefusedFloodControl(Refused, RetryAfter):
    """An answer with `parameters.retry_after` (429)."""


class RefusedChatMigrated(Refused, ChatMigrated):
    """An answer with `parameters.migrate_to_chat_id`: the group became a supergroup."""


class RefusedNetworkError(Refused, NetworkError):
    """Any other status (5xx): PTB's NetworkError."""


def refused(found: Verdict, chat_id: object) -> TelegramError:
    """The error PTB would raise for the answer `found` judged, with the verdict and the chat."""
    message = found.description or f"HTTP {found.status}"
    error: TelegramError
    if found.migrate_to_chat_id is not None:
        error = RefusedChatMigrated(found.migrate_to_chat_id)
    elif found.retry_after is not None:
        error = RefusedFloodControl(int(found.retry_after))
    elif found.status == 403:
        error = ForbiddenCall(message)
    elif found.status in (401, 404):
        error = RefusedToken(message)
    elif found.status == 400:
        error = RefusedBadRequest(message)
    elif found.status == 409:
        error = RefusedConflict(message)
    else:
        error = RefusedNetworkError(message)
    assert isinstance(error, Refused)
    error.verdict, error.chat_id = found, chat_id
    return error


def judged(method: str, request_data: RequestData | None, status: int, payload: bytes) -> tuple[int, bytes]:
    """The answer to hand PTB: a success as it is, a `done` one as ANSWERED; any other is raised
    as `refused` (the table's verdict on it, `pipeline.bot_api_errors`)."""
    if 200 <= status < 300:
        return status, payload
    try:
        body = json.loads(payload)
    except ValueError:
        body = None
    found = verdict(method, JsonResponse(status, body))
    assert found is not None  # not a 2xx
    if found.error() is None:
        already_done(found)
        return 200, ANSWERED
    chat_id = request_data.parameters.get("chat_id") if request_data is not None else None
    raise refused(found, chat_id)


def call_digest(method: str, request_data: RequestData | None) -> str:
    """What makes a call the same call on replay: its method, parameters and uploads."""
    return call_fingerprint(method, request_data)[0]


def call_fingerprint(method: str, request_data: RequestData | None) -> tuple[str, dict[str, str]]:
    """The call's digest, and a short hash per parameter or upload (what a divergence names).

    PTB names each upload of a call `attach://attached<random>` anew (an album's photos): the
    names are replaced by their order of appearance, and each uploaded part is keyed by that
    name (or its parameter's, `photo=`) with its file's hash, name and type. So the same files
    in the same order digest the same, and different files do not (an unread file handle,
    `read_file_handle=False`, counts by its name only). A call without uploads digests as it
    always did, so journal entries written before still match."""
    parameters = request_data.json_parameters if request_data is not None else {}
    names: dict[str, str] = {}

    def stable(match: re.Match[str]) -> str:
        return "attach://" + names.setdefault(match[1], f"upload{len(names)}")

    lines = {name: f"{name}={_ATTACH.sub(stable, parameters[name])}" for name in sorted(parameters)}
    text = method + "\n" + "\n".join(lines.values())
    if request_data is not None and request_data.contains_files:
        uploads = {names.get(field, field): part for field, part in request_data.multipart_data.items()}
        for field in sorted(uploads):
            filename, content, mimetype = uploads[field]
            fingerprint = hashlib.sha256(content).hexdigest() if isinstance(content, bytes) else "stream"
            line = f"{field}<{fingerprint} {filename} {mimetype}"
            text += "\n" + line
            lines[f"{field} (upload)"] = line
    parts = {name: hashlib.sha256(line.encode()).hexdigest()[:16] for name, line in lines.items()}
    return hashlib.sha256(text.encode()).hexdigest(), parts


def crash_hook(headers: Mapping[str, str]) -> None:
    """The transport's response hook (local runtime only): note a crash the stand-in asks for."""
    step = _STEP.get()
    if step is not None and headers.get(CRASH_HEADER):
        step.crash_requested = True


class JournaledRequest(BaseRequest):
    """A BaseRequest answering an update's repeated calls from the journal (module docstring)."""

    def __init__(self, inner: BaseRequest, journal: CallJournal | None = None) -> None:
        self.inner = inner
        self.journal = journal or CallJournal()

    @property
    def read_timeout(self) -> float | None:
        return self.inner.read_timeout

    async def initialize(self) -> None:
        await self.inner.initialize()

    async def shutdown(self) -> None:
        await self.inner.shutdown()

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: ODVInput[float] = DEFAULT_NONE,
        write_timeout: ODVInput[float] = DEFAULT_NONE,
        connect_timeout: ODVInput[float] = DEFAULT_NONE,
        pool_timeout: ODVInput[float] = DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        timeouts = {
            "read_timeout": read_timeout,
            "write_timeout": write_timeout,
            "connect_timeout": connect_timeout,
            "pool_timeout": pool_timeout,
        }
        step = _STEP.get()
        api_method = url.rsplit("/", 1)[-1]
        if step is None:
            status, payload = await self.inner.do_request(url, method, request_data, **timeouts)
            return judged(api_method, request_data, status, payload)
        index = step.calls
        step.calls += 1
        if step.diverged is not None:  # the handler caught the divergence and went on
            raise ReplayDiverged(step.diverged)
        digest, parts = call_fingerprint(api_method, request_data)
        stored = self.journal.get(step.event_id, index)
        if stored:
            if stored["method"]["S"] == api_method and stored["digest"]["S"] == digest:
                step.replayed += 1
                return int(stored["status"]["N"]), bytes(stored["payload"]["B"])
            step.diverged = divergence(index, api_method, parts, stored)
            raise ReplayDiverged(step.diverged)
        pacer = pacing.shared()
        if pacer is not None and pacing.is_message(api_method):
            chat_id = (request_data.parameters if request_data is not None else {}).get("chat_id")
            await asyncio.sleep(pacer.reserve(chat_id, TIMEOUT_SECONDS))
        status, payload = await self.inner.do_request(url, method, request_data, **timeouts)
        if status == 429 and pacer is not None:  # the whole bot waits (`pipeline.pacing`)
            raise pacer.flood(payload, pacer.clock())
        status, payload = judged(api_method, request_data, status, payload)
        if 200 <= status < 300 and len(payload) <= MAX_JOURNALED_BYTES:
            self.journal.put(step.event_id, index, api_method, digest, status, payload, parts)
        if step.crash_requested and os.environ.get(CRASH_HOOKS_ENV) == "1":
            os._exit(CRASH_EXIT_CODE)
        return status, payload
