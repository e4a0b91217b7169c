"""`ops broadcast create|status|pause|resume|cancel`: one message to every subscriber (`pipeline.broadcast`).

The audience is read from the store (the conversations table): every private chat the bot has
an update from (a user cannot write to a bot before pressing Start), less the chats noted
`blocked#<chat>` in the journal since their last update; `--language` keeps the users whose
latest update says that language (Telegram's `language_code`, "de" also matches "de-AT"), `--tag`
the chats that have a `tag#<name>` item in the conversations table (written by your own code).
`create` writes the job, then publishes its pages to the events topic for the `broadcast`
consumer; `--dry-run` prints the count and the message as sent, and changes nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from infra.outputs import OutputKey
from ops.context import Context
from ops.errors import OpsError
from pipeline import aws
from pipeline import broadcast as jobs

# BatchGetItem's most keys a request.
_BATCH_GET = 100


def _scan(table: Any, **request: Any) -> Iterator[dict[str, Any]]:
    while True:
        page = table.scan(**request)
        yield from page.get("Items", [])
        if "LastEvaluatedKey" not in page:
            return
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _language(payload: str) -> str | None:
    try:
        update = json.loads(payload)
    except ValueError:
        return None
    for value in update.values() if isinstance(update, dict) else ():
        user = value.get("from") if isinstance(value, dict) else None
        if isinstance(user, dict) and isinstance(user.get("language_code"), str):
            return str(user["language_code"]).lower()
    return None


def audience(ctx: Context, language: str | None = None, tag: str | None = None) -> list[int]:
    """The chats a broadcast goes to, sorted (see the module docstring)."""
    stack = ctx.stack()
    dynamodb = aws.resource("dynamodb")
    conversations = dynamodb.Table(stack.require(OutputKey.table_name("conversations")))
    latest: dict[int, tuple[str, str]] = {}  # chat -> (received_at, payload) of its latest update
    tagged: set[int] = set()
    for item in _scan(conversations, ProjectionExpression="pk, sk, chat_type, received_at, payload"):
        pk, sk = str(item.get("pk", "")), str(item.get("sk", ""))
        if not pk.startswith("chat#") or not pk[5:].isdigit():
            continue  # users, update kinds without a chat, groups and channels (negative ids)
        chat = int(pk[5:])
        if sk.startswith("tag#"):
            if tag and sk[4:] == tag:
                tagged.add(chat)
            continue
        if item.get("chat_type") != "private":
            continue
        received = str(item.get("received_at", ""))
        if chat not in latest or received > latest[chat][0]:
            latest[chat] = (received, str(item.get("payload", "")))
    chats = sorted(latest)
    if tag:
        chats = [chat for chat in chats if chat in tagged]
    if language:
        wanted = language.lower()
        chats = [
            chat
            for chat in chats
            if (found := _language(latest[chat][1])) is not None
            and (found == wanted or found.startswith(wanted + "-"))
        ]
    blocked = _blocked_since(dynamodb, stack.require(OutputKey.JOURNAL_TABLE), chats)
    return [chat for chat in chats if not (chat in blocked and blocked[chat] >= latest[chat][0])]


def _blocked_since(dynamodb: Any, journal: str, chats: list[int]) -> dict[int, str]:
    """chat -> when it was noted blocked, for the chats that are."""
    found: dict[int, str] = {}
    for start in range(0, len(chats), _BATCH_GET):
        keys: list[dict[str, Any]] = [{"id": f"blocked#{chat}"} for chat in chats[start : start + _BATCH_GET]]
        request: dict[str, Any] = {journal: {"Keys": keys, "ProjectionExpression": "id, blocked_at"}}
        while request:
            answer = dynamodb.batch_get_item(RequestItems=request)
            for item in answer.get("Responses", {}).get(journal, []):
                found[int(str(item["id"]).split("#", 1)[1])] = str(item.get("blocked_at", ""))
            request = answer.get("UnprocessedKeys") or {}
    return found


def _at(text: str | None) -> float:
    if not text:
        return time.time()
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise OpsError(
            f"--at {text!r}: give an ISO time with its offset, e.g. 2026-12-24T18:00+01:00"
        ) from None
    if moment.tzinfo is None:
        raise OpsError("--at needs a time zone offset (e.g. +00:00): a broadcast is not scheduled by guess")
    return moment.timestamp()


def create(ctx: Context) -> None:
    text = str(ctx.option("text") or "")
    try:
        jobs.check_text(text)
    except jobs.BroadcastError as error:
        raise OpsError(str(error)) from None
    at = _at(ctx.option("at"))
    language, tag = ctx.option("language"), ctx.option("tag")
    chats = audience(ctx, language, tag)
    if ctx.option("dry_run"):
        if ctx.wants_json():
            ctx.json({"recipients": len(chats), "message": {"text": text}, "pages": -(-len(chats) // 100)})
            return
        ctx.field("recipients", len(chats))
        ctx.field("pages", -(-len(chats) // jobs.PAGE_SIZE))
        ctx.line("message, as each recipient gets it:")
        ctx.line(text)
        ctx.line("dry run: nothing sent")
        return
    if not chats:
        raise OpsError("nobody to send to: the audience is empty")
    ctx.confirm(f"send this message to {len(chats)} chats")
    stack = ctx.stack()
    table = aws.resource("dynamodb").Table(stack.require(OutputKey.JOURNAL_TABLE))
    now = time.time()
    broadcast_id = jobs.new_id(now)
    audience_note = {key: value for key, value in {"language": language, "tag": tag}.items() if value}
    jobs.create(table, jobs.job_item(broadcast_id, text, len(chats), at=at, now=now, audience=audience_note))
    published = jobs.publish_pages(
        aws.client("sns"), stack.require(OutputKey.EVENTS_TOPIC_ARN), broadcast_id, chats
    )
    if ctx.wants_json():
        ctx.json({"id": broadcast_id, "recipients": len(chats), "pages": published})
        return
    ctx.field("id", broadcast_id)
    ctx.field("recipients", len(chats))
    ctx.field("pages", published)
    ctx.line(f"follow it: bin/ops broadcast status {broadcast_id}")


def _table(ctx: Context) -> Any:
    # The stack first: `--local` points boto3 at the local stack when it is read (the chaos
    # campaign's `broadcast pause --local` failed with "no AWS region" the other way round).
    name = ctx.stack().require(OutputKey.JOURNAL_TABLE)
    return aws.resource("dynamodb").Table(name)


def status(ctx: Context) -> None:
    job = jobs.read_job(_table(ctx), str(ctx.option("id")))
    if job is None:
        raise OpsError(f"no broadcast {ctx.option('id')!r}")
    shown = jobs.progress(job).as_dict()
    if ctx.wants_json():
        ctx.json(shown)
        return
    for name, value in shown.items():
        ctx.field(name.replace("_", " "), value)


def _steer(ctx: Context, state: str, allowed: tuple[str, ...]) -> None:
    broadcast_id = str(ctx.option("id"))
    try:
        job = jobs.steer(_table(ctx), broadcast_id, state, allowed)
    except jobs.BroadcastError as error:
        raise OpsError(str(error)) from None
    ctx.field(broadcast_id, job.get("state"))


def pause(ctx: Context) -> None:
    _steer(ctx, jobs.PAUSED, (jobs.SENDING, jobs.SCHEDULED))


def resume(ctx: Context) -> None:
    _steer(ctx, jobs.SENDING, (jobs.PAUSED,))


def cancel(ctx: Context) -> None:
    _steer(ctx, jobs.CANCELLED, (jobs.SENDING, jobs.SCHEDULED, jobs.PAUSED))
