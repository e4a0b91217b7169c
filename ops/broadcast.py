"""`ops broadcast create|status|pause|resume|cancel`: one message to every subscriber (`pipeline.broadcast`).

The audience is read from the store (the conversations table): every private chat the bot has
an update from (a user cannot write to a bot before pressing Start), less the chats noted
`blocked#<chat>` in the journal since their last update; `--language` keeps the users whose
latest update says that language (Telegram's `language_code`, "de" also matches "de-AT"), `--tag`
the chats that have a `tag#<name>` item in the conversations table (the store writes one for a
deep link's "/start <name>"; your own code may write more).
`create` writes its plan (the pages, one language each) and the job, then publishes the pages to
the events topic for the `broadcast` consumer, noting each; `--dry-run` prints the count and the
message as sent (per language for `--template`, `ops.broadcast_texts`), and changes nothing.
`resume` publishes the pages an interrupted create left (so does the same create run again), and
moves a paused broadcast back to sending. The console runs these same functions.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from infra.outputs import OutputKey
from ops.broadcast_texts import Template, TemplateError, team_template
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
    return sorted(audience_languages(ctx, language, tag))


def audience_languages(
    ctx: Context, language: str | None = None, tag: str | None = None
) -> dict[int, str | None]:
    """The chats a broadcast goes to, each with its language as the store knows it (or None)."""
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
    chats = {chat: _language(latest[chat][1]) for chat in sorted(latest)}
    if tag:
        chats = {chat: found for chat, found in chats.items() if chat in tagged}
    if language:
        wanted = language.lower()
        chats = {
            chat: found
            for chat, found in chats.items()
            if found is not None and (found == wanted or found.startswith(wanted + "-"))
        }
    blocked = _blocked_since(dynamodb, stack.require(OutputKey.JOURNAL_TABLE), list(chats))
    return {
        chat: found
        for chat, found in chats.items()
        if not (chat in blocked and blocked[chat] >= latest[chat][0])
    }


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


def _message(ctx: Context) -> tuple[str, Template | None]:
    """The plain text, or the template: exactly one of --text and --template."""
    text, name = ctx.option("text"), ctx.option("template")
    if bool(text) == bool(name):
        raise OpsError("give the message as --text TEXT or --template NAME (one of them)")
    if name:
        try:
            return "", team_template(str(name))
        except TemplateError as error:
            raise OpsError(str(error)) from None
    try:
        return jobs.check_text(str(text)), None
    except jobs.BroadcastError as error:
        raise OpsError(str(error)) from None


def create(ctx: Context) -> None:
    text, template = _message(ctx)
    at = _at(ctx.option("at"))
    language, tag = ctx.option("language"), ctx.option("tag")
    chats = audience_languages(ctx, language, tag)
    groups: dict[str | None, list[int]] = {}
    for chat, found in chats.items():
        groups.setdefault(template.language_for(found) if template else None, []).append(chat)
    planned = jobs.plan(groups)
    texts = template.texts if template else {}
    if ctx.option("dry_run"):
        shown = {
            str(key or "-"): {"recipients": len(members), "text": texts.get(key or "", text)}
            for key, members in sorted(groups.items(), key=lambda kv: kv[0] or "")
        }
        if ctx.wants_json():
            ctx.json(
                {
                    "recipients": len(chats),
                    "pages": len(planned),
                    "messages": shown,
                    "message": {"text": next(iter(shown.values()))["text"] if shown else text},
                }
            )
            return
        ctx.field("recipients", len(chats))
        ctx.field("pages", len(planned))
        for key, message in shown.items():
            where = f" (language {key}, {message['recipients']} chats)" if template else ""
            ctx.line(f"message, as each recipient gets it{where}:")
            ctx.line(str(message["text"]))
        if template and not groups:
            ctx.line(f"message ({template.fallback}):")
            ctx.line(template.texts[template.fallback])
        ctx.line("dry run: nothing sent")
        return
    if not chats:
        raise OpsError("nobody to send to: the audience is empty")
    table = _table(ctx)
    audience_note = {key: value for key, value in {"language": language, "tag": tag}.items() if value}
    sent_as = template.texts[template.fallback] if template else text
    if (unfinished := _interrupted(table, sent_as, texts, audience_note)) is not None:
        # The same create run again after it was cut: finish that one, never a second broadcast.
        ctx.line(f"broadcast {unfinished['broadcast_id']} (this message, this audience) was interrupted")
        _resume(ctx, str(unfinished["broadcast_id"]))
        return
    ctx.confirm(f"send this message to {len(chats)} chats")
    now = time.time()
    broadcast_id = jobs.new_id(now)
    jobs.store_pages(table, broadcast_id, planned, now)
    job = jobs.job_item(
        broadcast_id,
        sent_as,
        len(chats),
        at=at,
        now=now,
        audience=audience_note,
        texts=texts or None,
        pages=len(planned),
        template=template.name if template else None,
    )
    jobs.create(table, job)
    published = _publish(ctx, table, broadcast_id, planned)
    if ctx.wants_json():
        ctx.json({"id": broadcast_id, "recipients": len(chats), "pages": published})
        return
    ctx.field("id", broadcast_id)
    ctx.field("recipients", len(chats))
    ctx.field("pages", published)
    ctx.line(f"follow it: bin/ops broadcast status {broadcast_id}")


def _interrupted(
    table: Any, text: str, texts: dict[str, str], audience: dict[str, Any]
) -> dict[str, Any] | None:
    """A recent broadcast of this very message and audience whose create was cut before all its
    pages were published (and that nobody cancelled), if any."""
    for job in jobs.recent(table, LISTED):
        if (
            job.get("stored_pages")
            and job.get("state") in (jobs.SENDING, jobs.SCHEDULED, jobs.PAUSED)
            and len(job.get("published", ())) < int(job.get("pages", 0))
            and (job.get("text"), dict(job.get("texts") or {}), dict(job.get("audience") or {}))
            == (text, texts, audience)
        ):
            return job
    return None


def _publish(ctx: Context, table: Any, broadcast_id: str, planned: list[jobs.PlannedPage]) -> int:
    """Publish the pages; a failure says how to finish (the job and its pages are written)."""
    try:
        return jobs.publish_pages(
            aws.client("sns"), ctx.stack().require(OutputKey.EVENTS_TOPIC_ARN), table, broadcast_id, planned
        )
    except (ClientError, BotoCoreError) as error:
        raise OpsError(
            f"broadcast {broadcast_id} is written but not all its pages were published ({error}); "
            f"nobody gets it twice: finish it with bin/ops broadcast resume {broadcast_id}"
        ) from error


def _table(ctx: Context) -> Any:
    # The stack first: with --local, reading it points the clients at the local runtime.
    name = ctx.stack().require(OutputKey.JOURNAL_TABLE)
    return aws.resource("dynamodb").Table(name)


# How many of the newest broadcasts the console lists.
LISTED = 20


def recent(ctx: Context) -> list[dict[str, Any]]:
    """The newest broadcasts' progress (`Progress.as_dict`) with their text and creation time."""
    return [
        {**jobs.progress(job).as_dict(), "text": job.get("text"), "created_at": job.get("created_at")}
        for job in jobs.recent(_table(ctx), LISTED)
    ]


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


def _steer(ctx: Context, state: str, allowed: tuple[str, ...], broadcast_id: str | None = None) -> None:
    broadcast_id = broadcast_id or str(ctx.option("id"))
    if ctx.option("dry_run"):  # the console's question: what would change, checked, nothing done
        job = jobs.read_job(_table(ctx), broadcast_id)
        if job is None:
            raise OpsError(f"no broadcast {broadcast_id!r}")
        if job.get("state") not in allowed:
            raise OpsError(f"broadcast {broadcast_id} is {job.get('state')}: it cannot become {state}")
        shown = jobs.progress(job)
        ctx.line(f"broadcast {broadcast_id}: {shown.state}, {shown.remaining} of {shown.total} remaining")
        ctx.confirm(f"make broadcast {broadcast_id} {state}")
        return
    try:
        job = jobs.steer(_table(ctx), broadcast_id, state, allowed)
    except jobs.BroadcastError as error:
        raise OpsError(str(error)) from None
    ctx.field(broadcast_id, job.get("state"))


def pause(ctx: Context) -> None:
    _steer(ctx, jobs.PAUSED, (jobs.SENDING, jobs.SCHEDULED))


def resume(ctx: Context) -> None:
    """Publish the pages an interrupted create left unpublished (from its stored plan), and/or
    move a paused broadcast back to sending."""
    _resume(ctx, str(ctx.option("id")))


def _resume(ctx: Context, broadcast_id: str) -> None:
    table = _table(ctx)
    job = jobs.read_job(table, broadcast_id)
    if job is None:
        raise OpsError(f"no broadcast {broadcast_id!r}")
    try:
        missing = jobs.unpublished(table, job)
    except jobs.BroadcastError as error:
        raise OpsError(str(error)) from None
    if missing and job.get("state") not in (jobs.CANCELLED, jobs.DONE):
        numbers = ", ".join(str(page.number) for page in missing)
        if ctx.confirm(f"publish the {len(missing)} unpublished pages ({numbers}) of {broadcast_id}"):
            ctx.field("pages published", _publish(ctx, table, broadcast_id, missing))
        if job.get("state") != jobs.PAUSED:
            return
    _steer(ctx, jobs.SENDING, (jobs.PAUSED,), broadcast_id)


def cancel(ctx: Context) -> None:
    _steer(ctx, jobs.CANCELLED, (jobs.SENDING, jobs.SCHEDULED, jobs.PAUSED))
