"""Broadcasts: one message to every subscriber, exactly once per chat, resumable, paced below replies.

A broadcast is a durable job in the journal table, `broadcast#<id>` (`schema_version` 1): its
text, its audience's size, its state (`scheduled` or `sending`, `paused`, `cancelled`, `done`) and
its counters (sent, blocked, failed, unknown, cancelled), which only ever grow page by page. Its
audience is fanned out in pages of PAGE_SIZE chats, one `broadcast` envelope each, published to
the events topic; the `broadcast` consumer (functions/broadcast) sends each page's messages.

Exactly once per chat: before a message is sent its chat is claimed in the journal,
`broadcast#<id>#<chat>` written only if absent (state `sending`); the outcome (`sent`, `blocked`,
`failed`) is written after Telegram answers. A page restarted after a crash or a redeploy skips
every chat already claimed, so nobody gets the message twice: a chat whose claim never got its
outcome (the worker died during the call) is counted `unknown`, never sent again. A call that
certainly sent nothing (a 429, the pacing's hand-back, an outage's error, a refused token)
releases its claim and hands the page back, to resume later from that chat.

Texts: a job has its `text` (every chat's, or the fallback) and, from a template, `texts` by
language (version 2); a page groups chats of one language and names it (`language`), the
consumer sends that language's text.

Pages are written to the journal before they are published (`broadcast#<id>#page#<n>`, the
audience as planned), and each published one is noted in the job (`published`): a create
interrupted between two publishes is finished by `republish`, which publishes only the pages not
noted, from the stored plan (never a re-read audience).

A page is acknowledged only when all its chats have their entry; its outcomes are then added to
the job's counters in one conditional update that names the page (`done_pages`), so a page
counted once is never counted again.

Pacing: the consumer's environments share `broadcast_share` of the bot's rate (`pipeline.pacing`),
leaving the rest to interactive replies; a 429 anywhere moves the bot-wide not-before, which both
the broadcast and the replies obey.
"""

from __future__ import annotations

import contextlib
import math
import secrets
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from pipeline.formats import by_name as format_named
from pipeline.retention import CONSUMER_QUEUE_RETENTION

SOURCE: Final = "broadcast"
PAGE_TYPE = "page"
# The job's and its pages' version (`pipeline.formats`).
JOB_VERSION = format_named("broadcast_job").version
PAGE_VERSION = format_named("broadcast_page").version
# Chats per queued page: one SQS message (well under its 256 KiB), one claim per chat.
PAGE_SIZE = 100
JOB_PREFIX = "broadcast#"
# The journal item listing every broadcast's id (`broadcast_index`), for the console's list: the
# journal is keyed by id alone, and a scan for jobs would read every claim of every broadcast.
INDEX_KEY = "broadcasts"
INDEX_VERSION = format_named("broadcast_index").version
# The environment variable that sends every message with allow_paid_broadcast.
PAID_ENV = "BROADCAST_PAID"
# A paused or scheduled page comes back after at most this long (SQS's longest delay is 900 s).
RECHECK_SECONDS = 60.0
# Telegram's longest message text.
MAX_TEXT_LENGTH = 4096
# Job and chat entries outlive the queue's longest retention, then the table's TTL drops them.
KEPT_SECONDS = int(CONSUMER_QUEUE_RETENTION.total_seconds()) * 2

SCHEDULED, SENDING, PAUSED, CANCELLED, DONE = "scheduled", "sending", "paused", "cancelled", "done"
STATES = (SCHEDULED, SENDING, PAUSED, CANCELLED, DONE)
# A chat's entry: claimed, then one of the outcomes.
CLAIMED, SENT, BLOCKED, FAILED = "sending", "sent", "blocked", "failed"
# Counted outcomes of a chat (a claim without an outcome is `unknown`; never claimed: `cancelled`).
OUTCOMES = ("sent", "blocked", "failed", "unknown", "cancelled")


class BroadcastError(ValueError):
    """A broadcast that cannot be created or steered as asked (the message says why)."""


def new_id(now: float | None = None) -> str:
    """`bc-<UTC time>-<random>`: sortable, and never 32 hex digits (an idempotency record's key)."""
    stamp = datetime.fromtimestamp(time.time() if now is None else now, UTC).strftime("%Y%m%d%H%M%S")
    return f"bc-{stamp}-{secrets.token_hex(3)}"


def job_key(broadcast_id: str) -> str:
    return f"{JOB_PREFIX}{broadcast_id}"


def chat_key(broadcast_id: str, chat_id: int) -> str:
    return f"{JOB_PREFIX}{broadcast_id}#{chat_id}"


def page_event_id(broadcast_id: str, page: int) -> str:
    return f"{SOURCE}:{broadcast_id}:{page}"


def check_text(text: str) -> str:
    if not text.strip():
        raise BroadcastError("the broadcast text is empty")
    if len(text) > MAX_TEXT_LENGTH:
        raise BroadcastError(
            f"the broadcast text is {len(text)} characters; Telegram takes {MAX_TEXT_LENGTH}"
        )
    return text


def pages(chats: Sequence[int], size: int = PAGE_SIZE) -> Iterator[tuple[int, list[int]]]:
    for start in range(0, len(chats), size):
        yield start // size, list(chats[start : start + size])


def page_payload(
    broadcast_id: str, page: int, chats: Sequence[int], language: str | None = None
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "schema_version": JOB_VERSION,
        "broadcast_id": broadcast_id,
        "page": page,
        "chats": list(chats),
    }
    if language:
        payload["language"] = language
    return payload


@dataclass(frozen=True)
class PlannedPage:
    number: int
    language: str | None  # the key of the job's `texts` its chats get (None: the job's `text`)
    chats: list[int]


def plan(groups: Mapping[str | None, Sequence[int]]) -> list[PlannedPage]:
    """The pages of an audience grouped by the text each chat gets (None, the plain text, last)."""
    order = sorted(groups, key=lambda language: (language is None, language or ""))
    planned: list[PlannedPage] = []
    for language in order:
        for _, members in pages(sorted(groups[language])):
            planned.append(PlannedPage(len(planned), language, members))
    return planned


def page_key(broadcast_id: str, page: int) -> str:
    return f"{JOB_PREFIX}{broadcast_id}#page#{page}"


def store_pages(table: Any, broadcast_id: str, planned: Sequence[PlannedPage], now: float) -> None:
    """Write the planned pages (before the job: a job never names pages that are not stored)."""
    with table.batch_writer() as batch:
        for page in planned:
            batch.put_item(
                Item={
                    "id": page_key(broadcast_id, page.number),
                    "schema_version": PAGE_VERSION,
                    "chats": [int(chat) for chat in page.chats],
                    **({"language": page.language} if page.language else {}),
                    "expiration": int(now) + KEPT_SECONDS,
                }
            )


def stored_page(item: Mapping[str, Any]) -> PlannedPage:
    """A stored page item as planned (its number from its key)."""
    format_named("broadcast_page").version_of(item)
    number = int(str(item["id"]).rsplit("#", 1)[1])
    language = item.get("language")
    return PlannedPage(number, str(language) if language else None, [int(c) for c in item.get("chats", ())])


def job_item(
    broadcast_id: str,
    text: str,
    total: int,
    *,
    at: float,
    now: float,
    audience: Mapping[str, Any],
    texts: Mapping[str, str] | None = None,
    pages: int | None = None,
    template: str | None = None,
) -> dict[str, Any]:
    """The job's item (plain values, for the resource API). `pages`: how many were planned
    (stored with `store_pages`, noted as published one by one); None: ceil(total / PAGE_SIZE),
    published without a stored plan."""
    extra: dict[str, Any] = {"texts": {k: check_text(v) for k, v in texts.items()}} if texts else {}
    if template:
        extra["template"] = template
    if pages is not None:
        extra["stored_pages"] = True
    return {
        "id": job_key(broadcast_id),
        "schema_version": JOB_VERSION,
        "broadcast_id": broadcast_id,
        "text": check_text(text),
        "audience": dict(audience),
        **extra,
        "total": total,
        "pages": math.ceil(total / PAGE_SIZE) if pages is None else pages,
        "state": SCHEDULED if at > now else SENDING,
        "not_before": int(at),
        "created_at": int(now),
        "expiration": int(now) + KEPT_SECONDS,
        **{outcome: 0 for outcome in OUTCOMES},
    }


def read_job(table: Any, broadcast_id: str) -> dict[str, Any] | None:
    """The job's item, or None; one written by a newer release is refused (`FormatTooNew`)."""
    item = table.get_item(Key={"id": job_key(broadcast_id)}, ConsistentRead=True).get("Item")
    if item is not None:
        format_named("broadcast_job").version_of(item)
    return dict(item) if item else None


def create(table: Any, item: Mapping[str, Any]) -> None:
    """Write a new job (never over an existing one), then list it in the index."""
    table.put_item(Item=dict(item), ConditionExpression="attribute_not_exists(id)")
    table.update_item(
        Key={"id": INDEX_KEY},
        UpdateExpression="ADD ids :id SET schema_version = :v, expiration = :e",
        ExpressionAttributeValues={
            ":id": {item["broadcast_id"]},
            ":v": INDEX_VERSION,
            ":e": int(item["expiration"]),
        },
    )


def index_ids(item: Mapping[str, Any]) -> list[str]:
    """The ids an index item lists, newest first (an id starts with its UTC time)."""
    format_named("broadcast_index").version_of(item)
    return sorted((str(i) for i in item.get("ids", ())), reverse=True)


def recent(table: Any, limit: int) -> list[dict[str, Any]]:
    """The `limit` newest jobs still kept (an id whose job expired is skipped)."""
    index = table.get_item(Key={"id": INDEX_KEY}, ConsistentRead=True).get("Item")
    found = []
    for broadcast_id in index_ids(index) if index else []:
        job = read_job(table, broadcast_id)
        if job is not None:
            found.append(job)
        if len(found) >= limit:
            break
    return found


def steer(table: Any, broadcast_id: str, state: str, allowed_from: Iterable[str]) -> dict[str, Any]:
    """Move the job to `state` from one of `allowed_from`; BroadcastError when it is not there."""
    from botocore.exceptions import ClientError

    allowed = sorted(set(allowed_from))
    values = {f":s{n}": value for n, value in enumerate(allowed)}
    try:
        answer = table.update_item(
            Key={"id": job_key(broadcast_id)},
            UpdateExpression="SET #state = :state, updated_at = :now",
            ConditionExpression=f"attribute_exists(id) AND #state IN ({', '.join(values)})",
            ExpressionAttributeNames={"#state": "state"},
            ExpressionAttributeValues={":state": state, ":now": int(time.time()), **values},
            ReturnValues="ALL_NEW",
        )
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
            raise
        job = read_job(table, broadcast_id)
        if job is None:
            raise BroadcastError(f"no broadcast {broadcast_id!r}") from None
        raise BroadcastError(
            f"broadcast {broadcast_id} is {job.get('state')}: it cannot become {state} (only from "
            f"{', '.join(allowed)})"
        ) from None
    return dict(answer["Attributes"])


def count_page(
    table: Any, broadcast_id: str, page: int, tally: Mapping[str, int], now: float
) -> dict[str, Any]:
    """Add one page's outcomes to the job, once: None-like (an empty dict) when it was counted
    before. A job whose every page is counted becomes `done` (unless cancelled)."""
    from botocore.exceptions import ClientError

    adds = {f":{outcome}": int(tally.get(outcome, 0)) for outcome in OUTCOMES}
    try:
        answer = table.update_item(
            Key={"id": job_key(broadcast_id)},
            UpdateExpression=(
                "ADD done_pages :page, "
                + ", ".join(f"#{o} :{o}" for o in OUTCOMES)
                + " SET updated_at = :now, started_at = if_not_exists(started_at, :now)"
            ),
            ConditionExpression="attribute_exists(id) AND NOT contains(done_pages, :number)",
            ExpressionAttributeNames={f"#{o}": o for o in OUTCOMES},
            ExpressionAttributeValues={**adds, ":page": {str(page)}, ":number": str(page), ":now": int(now)},
            ReturnValues="ALL_NEW",
        )
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
            return {}
        raise
    job = dict(answer["Attributes"])
    finish(table, job)
    return job


def finish(table: Any, job: Mapping[str, Any]) -> None:
    """A job whose every page is counted becomes `done`. Asked after each page's count and again
    whenever a page counted before comes back: a worker lost between the last count and this
    write (a crash, a redeploy) would otherwise leave the job `sending` for good."""
    if len(job.get("done_pages", ())) >= int(job.get("pages", 0)) and job.get("state") in (SENDING, PAUSED):
        with contextlib.suppress(BroadcastError):  # cancelled (or finished) meanwhile: it stays so
            steer(table, str(job["broadcast_id"]), DONE, (SENDING, PAUSED))


@dataclass(frozen=True)
class Progress:
    """What `ops broadcast status` and the console show of a job."""

    broadcast_id: str
    state: str
    total: int
    counts: dict[str, int]
    pages: int
    pages_done: int
    # Pages published so far (None: a job without a stored plan, all published at create).
    pages_published: int | None
    rate: float | None  # messages a second since the first page was counted
    seconds_left: float | None

    @property
    def remaining(self) -> int:
        return max(0, self.total - sum(self.counts.values()))

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.broadcast_id,
            "state": self.state,
            "total": self.total,
            **self.counts,
            "remaining": self.remaining,
            "pages": self.pages,
            "pages_done": self.pages_done,
            "pages_published": self.pages if self.pages_published is None else self.pages_published,
            "rate_per_second": None if self.rate is None else round(self.rate, 2),
            "seconds_left": None if self.seconds_left is None else round(self.seconds_left),
        }


def progress(job: Mapping[str, Any], now: float | None = None) -> Progress:
    now = time.time() if now is None else now
    counts = {outcome: int(job.get(outcome, 0)) for outcome in OUTCOMES}
    total = int(job.get("total", 0))
    started, updated = job.get("started_at"), job.get("updated_at")
    done = sum(counts.values())
    rate = None
    if started is not None and updated is not None and float(updated) > float(started) and done:
        rate = done / (float(updated) - float(started))
    left = max(0, total - done)
    seconds_left = (left / rate) if rate else (0.0 if not left else None)
    return Progress(
        broadcast_id=str(job.get("broadcast_id")),
        state=str(job.get("state")),
        total=total,
        counts=counts,
        pages=int(job.get("pages", 0)),
        pages_done=len(job.get("done_pages", ())),
        pages_published=len(job.get("published", ())) if job.get("stored_pages") else None,
        rate=rate,
        seconds_left=seconds_left,
    )


def tally(outcomes: Iterable[str]) -> Counter[str]:
    return Counter(outcomes)


def page_envelope(
    broadcast_id: str, page: int, chats: Sequence[int], language: str | None = None
) -> tuple[Any, dict[str, str]]:
    """One page's envelope and its SNS routing attributes (the `broadcast` consumer's filter)."""
    from pipeline.envelope import Envelope, utc_now

    envelope = Envelope(
        event_id=page_event_id(broadcast_id, page),
        source=SOURCE,
        type=PAGE_TYPE,
        correlation_id=f"{broadcast_id}-p{page}",
        received_at=utc_now(),
        payload=page_payload(broadcast_id, page, chats, language),
    )
    return envelope, {"source": SOURCE, "type": PAGE_TYPE}


def publish_pages(
    sns: Any, topic_arn: str, table: Any, broadcast_id: str, planned: Iterable[PlannedPage]
) -> int:
    """Publish pages to the events topic, noting each in the job's `published` once SNS took it;
    returns how many. Publishing one again (a create interrupted after SNS took a page, before it
    was noted) is harmless: SNS drops repeats within five minutes, a page counted is not sent
    again, and a chat with an entry is skipped."""
    from pipeline.envelope import publish_request, sns_attributes

    count = 0
    for page in planned:
        envelope, attributes = page_envelope(broadcast_id, page.number, page.chats, page.language)
        sns.publish(**publish_request(topic_arn, envelope, sns_attributes(dict(attributes))))
        table.update_item(
            Key={"id": job_key(broadcast_id)},
            UpdateExpression="ADD published :page",
            ExpressionAttributeValues={":page": {str(page.number)}},
        )
        count += 1
    return count


def unpublished(table: Any, job: Mapping[str, Any]) -> list[PlannedPage]:
    """The job's stored pages not yet noted as published (none for a job without a stored plan)."""
    if not job.get("stored_pages"):
        return []
    done = {int(n) for n in job.get("published", ())}
    missing = [n for n in range(int(job.get("pages", 0))) if n not in done]
    broadcast_id = str(job["broadcast_id"])
    found = []
    for number in missing:
        item = table.get_item(Key={"id": page_key(broadcast_id, number)}, ConsistentRead=True).get("Item")
        if item is None:
            raise BroadcastError(f"broadcast {broadcast_id}: its page {number} is not stored (expired?)")
        found.append(stored_page(item))
    return found
