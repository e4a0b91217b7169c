"""Send one page of a broadcast: each chat claimed in the journal, sent once, its outcome kept.

The rules (exactly once per chat, resuming, counting) are `pipeline.broadcast`'s. Here, per page:

- the job is read first, and again every CHECK_EVERY chats: `paused` or `scheduled` for later
  hands the page back (it comes back in at most RECHECK_SECONDS), `cancelled` counts the chats
  not yet claimed as cancelled and acknowledges the page;
- a chat is claimed (`broadcast#<id>#<chat>`, only if absent), sent with `sendMessage`, and its
  outcome written: `sent`; `blocked` (a 403: the chat is also noted `blocked#<chat>` as replies
  note it, counted BroadcastBlocked, and the page goes on); `failed` (any other refusal of this
  chat: never retried). A chat already claimed is skipped, its entry's outcome counted (a claim
  without one is `unknown`: the worker died during the call, and it is never sent again);
- a 429, a pacing wait the invocation cannot make, a 5xx, a refused connection or a refused token
  send nothing: the claim is released and the error raised, so the worker hands the page back or
  retries it (a 429 moves the bot-wide not-before first, `pipeline.pacing`; an invocation out of
  time for its next call after it sent some hands the rest back, uncounted: a page that advances
  never runs out of attempts); a request that left without an answer (a timeout, a dropped
  connection) may have been delivered: `unknown`, never sent again, and the page retried;
- once every chat has an entry, the page's outcomes are added to the job's counters, once.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from botocore.exceptions import ClientError

from pipeline import aws
from pipeline import broadcast as jobs
from pipeline.blocked import unreachable
from pipeline.bot_api import BotApi
from pipeline.bot_api_errors import ChatUnreachable
from pipeline.deadline import NotStarted
from pipeline.envelope import Envelope
from pipeline.errors import ConsumerError, HandedBack, PermanentError, TransientError
from pipeline.formats import by_name as format_named
from pipeline.secrets import secret_string

logger = Logger(child=True)
metrics = Metrics()
# The jobs' items are read and written through boto3's resource: built at the init (`pipeline.aws.prepare`).
aws.prepare(resources=("dynamodb",))
TOKEN_SECRET = "telegram_bot_token"  # noqa: S105 - the registry name of the secret, not a value
# How many chats are sent between two reads of the job (pause and cancel take effect this soon).
CHECK_EVERY = 10
UNKNOWN = "unknown"
# A chat's entry's version (`pipeline.formats`; the job's is jobs.JOB_VERSION).
CHAT_VERSION = format_named("broadcast_chat").version
_METRICS = {
    jobs.SENT: "BroadcastSent",
    jobs.BLOCKED: "BroadcastBlocked",
    jobs.FAILED: "BroadcastFailed",
    UNKNOWN: "BroadcastUnknown",
}
REMAINING_METRIC = "BroadcastRemaining"
# What `pipeline.http` says when a request may have reached Telegram but no answer came back.
_NO_ANSWER = ("no answer within", "RemoteDisconnected", "ConnectionResetError", "IncompleteRead")


def may_have_arrived(error: TransientError) -> bool:
    """Whether Telegram may have taken the message although no answer came (a timeout, a
    connection dropped mid-answer); a hand-back, an HTTP answer or a refused connection sent
    nothing."""
    return not isinstance(error, HandedBack) and any(mark in str(error) for mark in _NO_ANSWER)


def _table() -> Any:
    return aws.resource("dynamodb").Table(os.environ["JOURNAL_TABLE"])


def _conditional_failed(error: ClientError) -> bool:
    return error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"


class Page:
    def __init__(self, envelope: Envelope) -> None:
        payload = envelope.payload
        if envelope.source != jobs.SOURCE or payload.get("schema_version", 0) > jobs.JOB_VERSION:
            raise PermanentError(f"not a broadcast page this code reads ({envelope.source})")
        chats = payload.get("chats")
        if not isinstance(payload.get("broadcast_id"), str) or not isinstance(chats, list):
            raise PermanentError("a broadcast page needs broadcast_id and chats")
        self.envelope = envelope
        self.broadcast_id: str = payload["broadcast_id"]
        self.number = int(payload.get("page", 0))
        language = payload.get("language")
        self.language = str(language) if language else None
        self.chats = [int(chat) for chat in chats]
        self.table = _table()
        self.outcomes: dict[int, str] = {}
        # Chats this invocation wrote an outcome for: a page that advanced and ran out of time
        # hands the rest back, uncounted (chaos seed 46 dead-lettered pages that advanced a few
        # chats in each of their attempts).
        self.settled_here = 0

    def job(self) -> dict[str, Any]:
        job = jobs.read_job(self.table, self.broadcast_id)
        if job is None:
            raise PermanentError(f"no broadcast {self.broadcast_id} in the journal")
        return job

    def hold(self, job: dict[str, Any]) -> bool:
        """Raise HandedBack while the job waits (paused, scheduled); True when it is cancelled."""
        state = job.get("state")
        now = time.time()
        if state == jobs.PAUSED:
            raise HandedBack(f"broadcast {self.broadcast_id} is paused", jobs.RECHECK_SECONDS)
        if state == jobs.SCHEDULED or float(job.get("not_before", 0)) > now:
            wait = min(jobs.RECHECK_SECONDS, max(1.0, float(job.get("not_before", 0)) - now))
            if float(job.get("not_before", 0)) > now:
                raise HandedBack(f"broadcast {self.broadcast_id} is scheduled later", wait)
            with contextlib.suppress(jobs.BroadcastError):  # another page started it first
                jobs.steer(self.table, self.broadcast_id, jobs.SENDING, (jobs.SCHEDULED,))
        return state == jobs.CANCELLED

    # -- one chat ---------------------------------------------------------------------------------
    def claim(self, chat_id: int) -> str | None:
        """None when this invocation now holds the chat; else the outcome its entry records."""
        key = jobs.chat_key(self.broadcast_id, chat_id)
        try:
            self.table.put_item(
                Item={
                    "id": key,
                    "schema_version": CHAT_VERSION,
                    "state": jobs.CLAIMED,
                    "claimed_at": int(time.time()),
                    "expiration": int(time.time()) + jobs.KEPT_SECONDS,
                },
                ConditionExpression="attribute_not_exists(id)",
            )
            return None
        except ClientError as error:
            if not _conditional_failed(error):
                raise
        item = self.table.get_item(Key={"id": key}, ConsistentRead=True).get("Item") or {}
        state = str(item.get("state", jobs.CLAIMED))
        return "unknown" if state == jobs.CLAIMED else state

    def settle(self, chat_id: int, state: str, detail: str | None = None) -> None:
        values: dict[str, Any] = {":s": state, ":claimed": jobs.CLAIMED, ":now": int(time.time())}
        expression = "SET #state = :s, settled_at = :now"
        if detail:
            expression += ", detail = :d"
            values[":d"] = detail
        self.table.update_item(
            Key={"id": jobs.chat_key(self.broadcast_id, chat_id)},
            UpdateExpression=expression,
            ConditionExpression="#state = :claimed",
            ExpressionAttributeNames={"#state": "state"},
            ExpressionAttributeValues=values,
        )
        self.settled_here += 1
        metrics.add_metric(name=_METRICS[state], unit=MetricUnit.Count, value=1)

    def release(self, chat_id: int) -> None:
        """Nothing was sent: the chat goes back to unclaimed (best effort: a claim left would count
        it `unknown`, never send it twice)."""
        try:
            self.table.delete_item(
                Key={"id": jobs.chat_key(self.broadcast_id, chat_id)},
                ConditionExpression="#state = :claimed",
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues={":claimed": jobs.CLAIMED},
            )
        except ClientError as error:
            logger.warning("could not release a broadcast claim", extra={"error": aws.error_code(error)})

    def send(self, api: BotApi, job: dict[str, Any], chat_id: int) -> str:
        found = self.claim(chat_id)
        if found is not None:
            return found
        text = (job.get("texts") or {}).get(self.language) if self.language else None
        params: dict[str, Any] = {"chat_id": chat_id, "text": text or job["text"]}
        if os.environ.get(jobs.PAID_ENV):
            params["allow_paid_broadcast"] = True
        try:
            api.call("sendMessage", params)
        except ChatUnreachable as error:
            unreachable(error, self.envelope.event_id, chat_id)
            self.settle(chat_id, jobs.BLOCKED, error.description)
            return jobs.BLOCKED
        except PermanentError as error:
            self.settle(chat_id, jobs.FAILED, str(error)[:300])
            logger.warning(
                "broadcast message refused", extra={"chat_id": chat_id, "reason": str(error)[:300]}
            )
            return jobs.FAILED
        except TransientError as error:
            if may_have_arrived(error):
                # The request left and no answer came: it may have been delivered. Never again.
                self.settle(chat_id, UNKNOWN, str(error)[:300])
            else:  # a 429, a pacing hand-back, a 5xx, a refused connection: nothing was sent
                self.release(chat_id)
            if isinstance(error, NotStarted) and self.settled_here:
                reason = f"out of time after {self.settled_here} chats: a fresh invocation resumes"
                raise HandedBack(reason, 1.0) from error
            raise
        except (ConsumerError, OSError):
            # A refused token, a secret not readable: Telegram sent nothing.
            self.release(chat_id)
            raise
        self.settle(chat_id, jobs.SENT)
        return jobs.SENT

    # -- the page ---------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        job = self.job()
        if self.number in {int(n) for n in job.get("done_pages", ())}:
            jobs.finish(self.table, job)  # the worker that counted it may have died before this
            return {"broadcast": self.broadcast_id, "page": self.number, "counted": "before"}
        cancelled = self.hold(job)
        api: BotApi | None = None
        for n, chat_id in enumerate(self.chats):
            if n and n % CHECK_EVERY == 0:
                job = self.job()
                cancelled = cancelled or self.hold(job)
            if cancelled:
                found = self.claim_for_cancel(chat_id)
                self.outcomes[chat_id] = found
                continue
            if api is None:
                api = BotApi(secret_string(TOKEN_SECRET))
            self.outcomes[chat_id] = self.send(api, job, chat_id)
        counted = jobs.count_page(
            self.table, self.broadcast_id, self.number, jobs.tally(self.outcomes.values()), time.time()
        )
        if counted:
            # The progress as a metric: what the broadcast has left after this page (its Maximum
            # over a period is the newest figure of one broadcast at a time).
            left = jobs.progress(counted).remaining
            metrics.add_metric(name=REMAINING_METRIC, unit=MetricUnit.Count, value=left)
        result = {"broadcast": self.broadcast_id, "page": self.number, **jobs.tally(self.outcomes.values())}
        logger.info("broadcast page done", extra={**result, "counted": bool(counted)})
        return result

    def claim_for_cancel(self, chat_id: int) -> str:
        """A cancelled broadcast's chat: its outcome if it had one, else `cancelled` for good (an
        entry, so a resumed page does not send it either)."""
        key = jobs.chat_key(self.broadcast_id, chat_id)
        try:
            self.table.put_item(
                Item={
                    "id": key,
                    "schema_version": CHAT_VERSION,
                    "state": "cancelled",
                    "expiration": int(time.time()) + jobs.KEPT_SECONDS,
                },
                ConditionExpression="attribute_not_exists(id)",
            )
            return "cancelled"
        except ClientError as error:
            if not _conditional_failed(error):
                raise
        return self.claim(chat_id) or "unknown"


def send_page(envelope: Envelope) -> dict[str, Any]:
    """The worker's `process` for the broadcast consumer: one page."""
    return Page(envelope).run()
