"""Dead-letter queues: how deep and how old (list), what is in them (peek), send them back (redrive).

Message bodies may hold personal data (phone numbers, message text): only the envelope's ids and
type and the worker's `dead_letter_reason` are ever printed.

An ordered consumer's DLQ is a FIFO queue: each message keeps its MessageGroupId, the chat it
held back (`telegram:<bot>:chat:<id>`), which list and peek show; redrive moves it by hand,
keeping the group and giving it a new deduplication id (the queue dedupes per group for five
minutes: a redrive under the old id would be dropped as a repeat).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from infra.outputs import OutputKey
from ops.context import Context
from ops.errors import OpsError
from ops.stack import ConsumerQueues, StackOutputs
from ops.text import format_age
from pipeline import aws

SQS_BATCH = 10
# ClientError codes meaning "this SQS does not offer StartMessageMoveTask" (moto, ElasticMQ...).
_UNSUPPORTED_CODES = frozenset(
    {
        "InvalidAction",
        "UnknownOperation",
        "UnknownOperationException",
        "UnsupportedOperation",
        "NotImplemented",
    }
)
MOVE_TASK_DONE = frozenset({"COMPLETED", "CANCELLED", "FAILED"})


def _sqs() -> Any:
    return aws.client("sqs")


def _chunks(items: list[Any], size: int = SQS_BATCH) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _attributes(queue_url: str, *names: str, sqs: Any | None = None) -> dict[str, str]:
    return dict(
        (sqs or _sqs()).get_queue_attributes(QueueUrl=queue_url, AttributeNames=list(names))["Attributes"]
    )


# -- list ------------------------------------------------------------------------------------------
def _age_from_metric(queue_url: str, now: datetime) -> float | None:
    """SQS's own ApproximateAgeOfOldestMessage (exact for any depth; absent outside AWS)."""
    answer = aws.client("cloudwatch").get_metric_statistics(
        Namespace="AWS/SQS",
        MetricName="ApproximateAgeOfOldestMessage",
        Dimensions=[{"Name": "QueueName", "Value": queue_url.rstrip("/").rsplit("/", 1)[-1]}],
        StartTime=now - timedelta(minutes=15),
        EndTime=now + timedelta(minutes=1),
        Period=60,
        Statistics=["Maximum"],
    )
    points = sorted(answer.get("Datapoints", []), key=lambda p: p["Timestamp"])
    return float(points[-1]["Maximum"]) if points else None


def _sample(queue_url: str, attribute: str) -> list[dict[str, Any]]:
    """Up to 10 messages with this system attribute, received without hiding them."""
    messages: list[dict[str, Any]] = (
        _sqs()
        .receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=SQS_BATCH,
            VisibilityTimeout=0,
            MessageSystemAttributeNames=[attribute],
        )
        .get("Messages", [])
    )
    return messages


def _age_from_sample(queue_url: str, now: datetime) -> float | None:
    """Oldest SentTimestamp among up to 10 messages, received without hiding them."""
    messages = _sample(queue_url, "SentTimestamp")
    sent = [
        int(m["Attributes"]["SentTimestamp"]) / 1000
        for m in messages
        if "SentTimestamp" in m.get("Attributes", {})
    ]
    return max(0.0, now.timestamp() - min(sent)) if sent else None


def is_fifo(queue_url: str) -> bool:
    return queue_url.rstrip("/").endswith(".fifo")


# How many message groups (chats) `dlq list` names per FIFO DLQ before "+N more".
SHOWN_GROUPS = 3


def _groups_from_sample(queue_url: str) -> list[str]:
    """The message groups (chats) among up to 10 messages of a FIFO DLQ, without hiding them."""
    messages = _sample(queue_url, "MessageGroupId")
    return sorted(
        {m["Attributes"]["MessageGroupId"] for m in messages if "MessageGroupId" in m.get("Attributes", {})}
    )


def _depth(queue_url: str, sqs: Any | None = None) -> int:
    return int(_attributes(queue_url, "ApproximateNumberOfMessages", sqs=sqs)["ApproximateNumberOfMessages"])


@dataclass(frozen=True)
class DeadLetterQueue:
    """One DLQ of the stack; `consumer` names the `dlq peek`/`redrive` argument (None: the SMS
    delivery events' DLQs, which those commands do not handle)."""

    label: str
    url: str
    consumer: str | None


def dead_letter_queues(stack: StackOutputs) -> list[DeadLetterQueue]:
    """Every DLQ of the stack: each consumer's, its SNS delivery DLQ, the SMS delivery events' ones."""
    found: list[DeadLetterQueue] = []
    for queues in stack.consumer_queues():
        found.append(DeadLetterQueue(f"{queues.consumer} DLQ", queues.dlq_url, queues.consumer))
        if queues.delivery_dlq_url:
            found.append(
                DeadLetterQueue(f"{queues.consumer} delivery DLQ", queues.delivery_dlq_url, queues.consumer)
            )
    for role in OutputKey.SMS_EVENTS_DLQ_ROLES:
        url = stack.get(OutputKey.sms_events_dlq_url(role))
        if url:
            found.append(DeadLetterQueue(f"SMS events {role} DLQ", url, None))
    return found


def held(queue_url: str) -> int:
    """Messages a queue holds, visible or in flight; receives nothing."""
    attrs = _attributes(queue_url, "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible")
    return sum(int(attrs.get(name, "0")) for name in attrs)


def dlq_rows(stack: StackOutputs, sample: bool = False) -> list[dict[str, Any]]:
    """One row per deployed consumer's DLQ (what `dlq list` prints and the console shows)."""
    now = datetime.now(UTC)
    found: list[dict[str, Any]] = []
    for queues in stack.consumer_queues():
        attrs = _attributes(
            queues.dlq_url, "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"
        )
        depth = int(attrs.get("ApproximateNumberOfMessages", "0"))
        age, source = None, None
        fifo = is_fifo(queues.dlq_url)
        groups: list[str] | None = [] if fifo else None
        if depth:
            age = _age_from_metric(queues.dlq_url, now)
            source = None if age is None else "cloudwatch"
            # Only on request: a sample is a receive, and counts in each message's receive_count.
            if age is None and sample:
                age, source = _age_from_sample(queues.dlq_url, now), "sample"
            if groups is not None:
                groups = _groups_from_sample(queues.dlq_url) if sample else None
        found.append(
            {
                "consumer": queues.consumer,
                "dlq_depth": depth,
                "in_flight": int(attrs.get("ApproximateNumberOfMessagesNotVisible", "0")),
                "oldest_age_seconds": None if age is None else int(age),
                "age_source": source,
                "delivery_dlq_depth": _depth(queues.delivery_dlq_url) if queues.delivery_dlq_url else None,
                # FIFO DLQs (ordered consumers): the chats held back, from a sample of 10
                # (--sample; None: not read).
                "groups": groups,
                "fifo": fifo,
            }
        )
    return found


def list_dlqs(ctx: Context) -> int:
    """One row per deployed consumer; `delivery_dlq` holds what SNS could not deliver to its queue.

    Exit code 1 with --fail-on-messages when any of them holds a message. Nothing is received
    unless --sample asks for it (the age when CloudWatch has no datapoint yet, a FIFO DLQ's
    chats): SQS has no read that does not count, and `dlq peek` should show a message's own
    receive count, not ours."""
    found = dlq_rows(ctx.stack(), sample=bool(ctx.option("sample")))
    if ctx.wants_json():
        ctx.json({"dlqs": found})
    else:
        _print_table(ctx, found)
    has_messages = any(row["dlq_depth"] or row["delivery_dlq_depth"] for row in found)
    return 1 if has_messages and ctx.option("fail_on_messages") else 0


def _print_table(ctx: Context, found: list[dict[str, Any]]) -> None:
    rows = [("consumer", "dlq_depth", "in_flight", "oldest", "age_source", "delivery_dlq", "groups")]
    for dlq in found:
        delivery = dlq["delivery_dlq_depth"]
        rows.append(
            (
                dlq["consumer"],
                str(dlq["dlq_depth"]),
                str(dlq["in_flight"]),
                format_age(dlq["oldest_age_seconds"]) if dlq["age_source"] or not dlq["dlq_depth"] else "?",
                dlq["age_source"] or "-",
                "-" if delivery is None else str(delivery),
                _groups_cell(dlq["groups"], dlq["fifo"] and bool(dlq["dlq_depth"])),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        ctx.line("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    if any(row["age_source"] == "sample" for row in found):
        ctx.line("")
        ctx.line("sample: oldest of up to 10 messages looked at (no CloudWatch datapoint yet), a lower bound")
    if any(row["dlq_depth"] and (row["age_source"] is None or _unsampled(row)) for row in found):
        ctx.line("")
        ctx.line(
            "?: not read without --sample (a sample receives up to 10 messages, adding one to their"
            " receive_count); or see them with dlq peek"
        )


def _unsampled(row: dict[str, Any]) -> bool:
    """A FIFO DLQ with messages whose chats were not sampled."""
    return bool(row["dlq_depth"]) and row["groups"] is None and row["fifo"]


def _groups_cell(groups: list[str] | None, fifo: bool = False) -> str:
    if groups is None and fifo:
        return "?"
    if not groups:
        return "-"
    more = len(groups) - SHOWN_GROUPS
    return ",".join(groups[:SHOWN_GROUPS]) + (f" +{more} more" if more > 0 else "")


# -- peek ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BodySummary:
    event_id: str | None
    type: str | None
    correlation_id: str | None
    note: str | None = None


def summarize_body(body: str) -> BodySummary:
    """The envelope's ids and type; SNS's JSON wrapper (no raw delivery) is unwrapped first."""
    try:
        data = json.loads(body)
        if (
            isinstance(data, dict)
            and data.get("Type") == "Notification"
            and isinstance(data.get("Message"), str)
        ):
            data = json.loads(data["Message"])
    except ValueError:
        return BodySummary(None, None, None, f"body is not JSON ({len(body.encode())} bytes)")
    if not isinstance(data, dict):
        return BodySummary(None, None, None, "body is not an envelope object")

    def text(key: str) -> str | None:
        value = data.get(key)
        return value if isinstance(value, str) else None

    note = None if text("event_id") else "no event_id: not an envelope"
    return BodySummary(text("event_id"), text("type"), text("correlation_id"), note)


def _sent_at(message: dict[str, Any]) -> str | None:
    millis = message.get("Attributes", {}).get("SentTimestamp")
    return datetime.fromtimestamp(int(millis) / 1000, UTC).isoformat(timespec="seconds") if millis else None


def _string_attribute(message: dict[str, Any], name: str) -> str | None:
    value = message.get("MessageAttributes", {}).get(name, {}).get("StringValue")
    return str(value) if value is not None else None


def _release(queue_url: str, messages: list[dict[str, Any]], sqs: Any | None = None) -> None:
    """Make received messages visible again at once."""
    for chunk in _chunks(messages):
        (sqs or _sqs()).change_message_visibility_batch(
            QueueUrl=queue_url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
                for i, m in enumerate(chunk)
            ],
        )


def peek_messages(
    stack: StackOutputs, consumer: str, limit: int = SQS_BATCH, visibility_timeout: int = 30
) -> tuple[ConsumerQueues, list[dict[str, Any]]]:
    """Up to `limit` messages of a consumer's DLQ as `dlq peek` shows them (ids, type, reason;
    never the payload), all visible again on return (`peek` says why reading counts)."""
    queues = stack.consumer_queue(consumer)
    received = read_and_release(queues.dlq_url, limit, visibility_timeout)
    return queues, [_shown_message(message) for message in received]


def read_and_release(
    queue_url: str, limit: int, visibility_timeout: int = 30, sqs: Any | None = None
) -> list[dict[str, Any]]:
    """Up to `limit` messages of a DLQ with their attributes, each visible again on return: hidden
    only while they are read, so that one is never read twice (`peek` says why reading counts).
    `sqs`: a client of the caller's (the chaos campaign's, on its own runtime)."""
    received: list[dict[str, Any]] = []
    try:
        while len(received) < limit:
            batch = (
                (sqs or _sqs())
                .receive_message(
                    QueueUrl=queue_url,
                    MaxNumberOfMessages=min(SQS_BATCH, limit - len(received)),
                    VisibilityTimeout=visibility_timeout,
                    MessageSystemAttributeNames=["All"],
                    MessageAttributeNames=["All"],
                )
                .get("Messages", [])
            )
            if not batch:
                break
            received.extend(batch)
    finally:
        _release(queue_url, received, sqs)
    return received


def peek(ctx: Context) -> None:
    """ReceiveMessage, then ChangeMessageVisibility 0 at once: SQS has no read that does not
    count, so each peek adds one to the DLQ copy's ApproximateReceiveCount. That count has no
    effect: a DLQ has no redrive policy of its own, its retention runs from the original enqueue
    time, and a redrive sends new messages to the source queue, whose receive count starts at 0
    (so peeking can never push a message over the source queue's maxReceiveCount)."""
    queues, shown = peek_messages(
        ctx.stack(), ctx.option("consumer"), ctx.option("max"), ctx.option("visibility_timeout")
    )
    if ctx.wants_json():
        ctx.json({"consumer": queues.consumer, "messages": shown})
        return
    for item in shown:
        ctx.line(f"message {item['message_id']}")
        for name in (
            "event_id",
            "type",
            "correlation_id",
            "message_group",
            "dead_letter_reason",
            "receive_count",
            "sent_at",
        ):
            ctx.field(f"  {name}", item[name])
        if item["note"]:
            ctx.field("  note", item["note"])
    ctx.line(f"{len(shown)} message(s) shown from the {queues.consumer} DLQ; all visible again")


def _shown_message(message: dict[str, Any]) -> dict[str, Any]:
    """What peek prints of a message: the envelope's ids, never its payload."""
    summary = summarize_body(message["Body"])
    count = message.get("Attributes", {}).get("ApproximateReceiveCount")
    return {
        "message_id": message["MessageId"],
        "event_id": summary.event_id,
        "type": summary.type,
        "correlation_id": summary.correlation_id,
        # A FIFO DLQ's (ordered consumer's) message group: the chat it held back.
        "message_group": message.get("Attributes", {}).get("MessageGroupId"),
        "dead_letter_reason": _string_attribute(message, "dead_letter_reason"),
        # Counts this DLQ's receives, peeks included; a redrive sends new messages (count 0).
        "receive_count": int(count) if count is not None else None,
        "sent_at": _sent_at(message),
        "note": summary.note,
    }


# -- redrive ---------------------------------------------------------------------------------------
def _move_task_unsupported(error: Exception) -> bool:
    if isinstance(error, NotImplementedError):  # moto in-process
        return True
    if not isinstance(error, ClientError):
        return False
    code = aws.error_code(error)
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    # moto's server answers an unimplemented action with an HTML 500 (code "500", no AWS code).
    return code in _UNSUPPORTED_CODES or status == 501 or code in ("500", "501")


def _move_with_task(queues: ConsumerQueues, timeout_seconds: float, ctx: Context) -> int | None:
    """StartMessageMoveTask, then wait for it; None when this SQS does not offer the API."""
    dlq_arn = _attributes(queues.dlq_url, "QueueArn")["QueueArn"]
    source_arn = _attributes(queues.queue_url, "QueueArn")["QueueArn"]
    try:
        handle = _sqs().start_message_move_task(SourceArn=dlq_arn, DestinationArn=source_arn)["TaskHandle"]
    except (ClientError, NotImplementedError) as error:
        if _move_task_unsupported(error):
            return None
        raise
    ctx.line(f"started message move task {handle}")
    deadline = time.monotonic() + timeout_seconds
    while True:
        tasks = _sqs().list_message_move_tasks(SourceArn=dlq_arn, MaxResults=10).get("Results", [])
        task = next((t for t in tasks if t.get("TaskHandle") == handle), tasks[0] if tasks else {})
        moved = int(task.get("ApproximateNumberOfMessagesMoved", 0))
        status = task.get("Status", "RUNNING")
        if status in MOVE_TASK_DONE:
            if status != "COMPLETED":
                ctx.line(f"move task {status}: {task.get('FailureReason', 'no reason given')}")
            return moved
        if time.monotonic() >= deadline:
            ctx.line(f"move task still running after {timeout_seconds:.0f}s; `dlq list` shows progress")
            return moved
        time.sleep(2)


def _receive_for_move(
    queues: ConsumerQueues, sqs: Any | None = None, limit: int = SQS_BATCH
) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = (
        (sqs or _sqs())
        .receive_message(
            QueueUrl=queues.dlq_url,
            MaxNumberOfMessages=min(SQS_BATCH, limit),
            VisibilityTimeout=60,
            WaitTimeSeconds=1,
            MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["MessageGroupId"],
        )
        .get("Messages", [])
    )
    return messages


def _send_back(
    queues: ConsumerQueues, messages: list[dict[str, Any]], moved: int, sqs: Any | None = None
) -> int:
    """Send received DLQ messages to the source queue, delete only what was sent; how many."""
    sqs = sqs or _sqs()
    entries = []
    for i, message in enumerate(messages):
        entry: dict[str, Any] = {"Id": str(i), "MessageBody": message["Body"]}
        attributes = {
            name: {k: v for k, v in value.items() if k in ("DataType", "StringValue", "BinaryValue")}
            for name, value in message.get("MessageAttributes", {}).items()
        }
        if attributes:
            entry["MessageAttributes"] = attributes
        group = message.get("Attributes", {}).get("MessageGroupId")
        if is_fifo(queues.queue_url):
            # The same group (chat), in the DLQ's order; a new deduplication id, else the
            # queue drops a message redriven within 5 minutes of its first send.
            entry["MessageGroupId"] = group or "no-group"
            entry["MessageDeduplicationId"] = f"redrive-{uuid.uuid4().hex}"
        entries.append(entry)
    sent = sqs.send_message_batch(QueueUrl=queues.queue_url, Entries=entries)
    sent_ids = {int(s["Id"]) for s in sent.get("Successful", [])}
    done = [messages[i] for i in sorted(sent_ids)]
    if done:
        sqs.delete_message_batch(
            QueueUrl=queues.dlq_url,
            Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)],
        )
    if sent.get("Failed"):
        # The rest stays in the DLQ (visible again after the timeout); stop rather than spin.
        failed = sent["Failed"]
        raise OpsError(
            f"moved {moved + len(done)} message(s); {len(failed)} could not be sent back "
            f"({failed[0].get('Code')}: {failed[0].get('Message', '')}) and stay in the DLQ"
        )
    return len(done)


def move_by_hand(queues: ConsumerQueues, sqs: Any | None = None) -> int:
    """Receive from the DLQ, send to the source queue, delete only what was sent; how many.

    Only as many as the DLQ held when the move began (what the operator confirmed), as a move
    task's `ApproximateNumberOfMessagesToMove` is: a record its consumer dead-letters again at once
    (an SMS the gateway refused for good) comes back while the move runs, and a move until the DLQ
    is empty never ended. `sqs`: a client of the caller's (the chaos campaign's operator)."""
    sqs = sqs or _sqs()
    to_move = _depth(queues.dlq_url, sqs)
    moved = 0
    while moved < to_move:
        messages = _receive_for_move(queues, sqs, limit=to_move - moved)
        if not messages:
            return moved
        moved += _send_back(queues, messages, moved, sqs)
    return moved


def _move_one(queues: ConsumerQueues, message_id: str) -> bool:
    """Move the DLQ message `message_id` (as `dlq peek` names it) back; the others it receives on
    the way are made visible again at once. False when the DLQ does not hold it."""
    passed: list[dict[str, Any]] = []
    try:
        while True:
            messages = _receive_for_move(queues)
            if not messages:
                return False
            wanted = [m for m in messages if m["MessageId"] == message_id]
            passed.extend(m for m in messages if m["MessageId"] != message_id)
            if wanted:
                return _send_back(queues, wanted[:1], 0) == 1
    finally:
        _release(queues.dlq_url, passed)


def _redrive_one(ctx: Context, queues: ConsumerQueues, message_id: str) -> None:
    if not ctx.confirm(
        f"move message {message_id} of the {queues.consumer} DLQ back to its queue {queues.queue_url}"
    ):
        return
    if not _move_one(queues, message_id):
        raise OpsError(f"the {queues.consumer} DLQ holds no message {message_id!r} (dlq peek lists them)")
    ctx.line(f"moved message {message_id} from the {queues.consumer} DLQ to its queue")


def redrive(ctx: Context) -> None:
    """Every message of a consumer's DLQ back to its queue, or only `--message-id`'s."""
    queues = ctx.stack().consumer_queue(ctx.option("consumer"))
    if ctx.option("message_id"):
        _redrive_one(ctx, queues, ctx.option("message_id"))
        return
    waiting = _depth(queues.dlq_url)
    if not ctx.confirm(
        f"move the {waiting} message(s) of the {queues.consumer} DLQ back to its queue {queues.queue_url}"
    ):
        return
    # A FIFO DLQ is moved by hand: a move task would resend each message under its old
    # deduplication id, which the queue drops within five minutes of the first send.
    moved = None if is_fifo(queues.dlq_url) else _move_with_task(queues, ctx.option("timeout"), ctx)
    if moved is None:
        if is_fifo(queues.dlq_url):
            ctx.line("a FIFO DLQ: moving by receive, send (same group, new deduplication id), delete")
        else:
            ctx.line("StartMessageMoveTask is not available here; moving by receive, send, delete")
        moved = move_by_hand(queues)
    ctx.line(f"moved {moved} message(s) from the {queues.consumer} DLQ to its queue")
