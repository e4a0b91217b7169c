"""Lambda's SQS event source mapping, played locally: long-polls a queue, hands each batch to the
handler as a real SQS event, deletes only the records that succeeded (all but
`batchItemFailures`) and leaves failures to the visibility timeout, so retries and redrive to the
DLQ happen as in AWS. `local.worker_process` runs it; `local.sns_subscription` builds on it.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import sys
import time
import uuid
from collections import Counter
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from local.aws_calls import as_lambda_service
from local.lambda_host import EXIT_STOPPED, EXIT_TIMED_OUT, FunctionHost, Invocation, StatusChannel, Stopper

# Lambda's SQS poller waits up to 20 s; shorter here so the process notices a stop quickly.
LONG_POLL_SECONDS = 2
SQS_MAX_BATCH = 10


def event_id_of(body: str) -> str | None:
    """The envelope's event id in a queued body, SNS's wrapper (no raw delivery) taken off; here,
    not `ops.dlq.summarize_body`: the poller imports nothing its handler imports (the cold path)."""
    try:
        data = json.loads(body)
        if isinstance(data, dict) and data.get("Type") == "Notification":
            data = json.loads(data["Message"])
    except (ValueError, KeyError, TypeError):
        return None
    event_id = data.get("event_id") if isinstance(data, dict) else None
    return event_id if isinstance(event_id, str) else None


def sqs_record(message: dict[str, Any], queue_arn: str, region: str) -> dict[str, Any]:
    """A received SQS message in the shape Lambda's event source mapping delivers it."""
    attributes = {
        name: value
        for name, value in message.get("Attributes", {}).items()
        if name
        in (
            "ApproximateReceiveCount",
            "SentTimestamp",
            "SenderId",
            "ApproximateFirstReceiveTimestamp",
            "MessageGroupId",
            "MessageDeduplicationId",
            "SequenceNumber",
            "AWSTraceHeader",
        )
    }
    record: dict[str, Any] = {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": attributes,
        "messageAttributes": {
            name: _lambda_message_attribute(value)
            for name, value in message.get("MessageAttributes", {}).items()
        },
        "md5OfBody": message["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }
    if "MD5OfMessageAttributes" in message:
        record["md5OfMessageAttributes"] = message["MD5OfMessageAttributes"]
    return record


def _lambda_message_attribute(value: dict[str, Any]) -> dict[str, Any]:
    attribute: dict[str, Any] = {
        "stringListValues": [],
        "binaryListValues": [],
        "dataType": value["DataType"],
    }
    if "StringValue" in value:
        attribute["stringValue"] = value["StringValue"]
    if "BinaryValue" in value:
        attribute["binaryValue"] = base64.b64encode(value["BinaryValue"]).decode()
    return attribute


def failed_message_ids(result: Any, records: list[dict[str, Any]]) -> set[str]:
    """Records Lambda treats as failed after a successful invocation with ReportBatchItemFailures.

    A malformed response (an identifier that is empty or not in the batch) fails the whole batch,
    as Lambda does.
    """
    all_ids = {record["messageId"] for record in records}
    if not isinstance(result, dict) or not result.get("batchItemFailures"):
        return set()
    failures = result["batchItemFailures"]
    if not isinstance(failures, list):
        return all_ids
    failed: set[str] = set()
    for item in failures:
        identifier = item.get("itemIdentifier") if isinstance(item, dict) else None
        if not isinstance(identifier, str) or identifier not in all_ids:
            return all_ids
        failed.add(identifier)
    return failed


class SqsPoller:
    # Whose calls the poller's receives and deletes are: Lambda's event source mapping, made with
    # the function's role (a subclass standing in for another service says so).
    service_calls = staticmethod(as_lambda_service)

    def __init__(
        self, args: argparse.Namespace, host: FunctionHost, status: StatusChannel, stopper: Stopper
    ) -> None:
        self.args = args
        self.host = host
        self.status = status
        self.stopper = stopper
        # The poller is "the Lambda service": its own client, not the function's.
        self.sqs = boto3.session.Session().client(
            "sqs", config=Config(read_timeout=LONG_POLL_SECONDS + 10, retries={"mode": "standard"})
        )
        self.previous_counts: Counter[str] = Counter()

    @property
    def fifo(self) -> bool:
        return str(self.args.queue_url).endswith(".fifo")

    def fifo_receive(self) -> dict[str, str]:
        """On a FIFO queue, as Lambda's poller: a ReceiveRequestAttemptId per receive (botocore's
        retries of that receive resend it, so SQS answers a retried receive with the same
        messages instead of locking their groups for a visibility timeout). The records carry
        MessageGroupId, SequenceNumber and MessageDeduplicationId (`sqs_record`), which
        Powertools' FIFO processor reads."""
        return {"ReceiveRequestAttemptId": uuid.uuid4().hex} if self.fifo else {}

    def receive_batch(self) -> list[dict[str, Any]]:
        """Up to `batch_size` messages; with a batching window, gathers until it closes or fills."""
        messages: list[dict[str, Any]] = []
        deadline = 0.0
        while not self.stopper.stopping:
            wait = LONG_POLL_SECONDS
            if messages:
                remaining = deadline - time.monotonic()
                if len(messages) >= self.args.batch_size or remaining <= 0:
                    return messages
                wait = min(LONG_POLL_SECONDS, max(1, math.ceil(remaining)))
            try:
                with self.service_calls():
                    response = self.sqs.receive_message(
                        QueueUrl=self.args.queue_url,
                        MaxNumberOfMessages=min(SQS_MAX_BATCH, self.args.batch_size - len(messages)),
                        WaitTimeSeconds=wait,
                        MessageSystemAttributeNames=["All"],
                        MessageAttributeNames=["All"],
                        **self.fifo_receive(),
                    )
            except (BotoCoreError, ClientError) as error:
                print(
                    f"local poller: receive failed ({type(error).__name__}: {error})",
                    file=sys.stderr,
                    flush=True,
                )
                self.stopper.wait(1)
                continue
            received = response.get("Messages", [])
            if received and not messages:
                deadline = time.monotonic() + self.args.batching_window
            messages.extend(received)
            if messages and self.args.batching_window <= 0:
                return messages
        return messages

    def run(self) -> int:
        while not self.stopper.stopping:
            messages = self.receive_batch()
            if not messages:
                continue
            if self.stopper.stopping:
                # Asked to stop while a receive was open: hand the batch back rather than start an
                # invocation the stop would cut (Lambda starts none on an environment it shuts down).
                self.release(messages)
                break
            records = [sqs_record(message, self.args.queue_arn, self.host.region) for message in messages]
            # When SQS took each record (SentTimestamp, ms): the runtime's listeners see the queue hop.
            sent_at = [
                int(r["attributes"]["SentTimestamp"]) / 1000
                for r in records
                if "SentTimestamp" in r["attributes"]
            ]
            # The events it holds: what a kill in this invocation leaves undecided (`local.chaos`).
            events = [event_id_of(r["body"]) for r in records]
            self.status.send("busy", records=len(records), sent_at=sent_at, events=events)
            invocation = self.host.invoke({"Records": records})
            failed = (
                {r["messageId"] for r in records}
                if not invocation.ok
                else failed_message_ids(invocation.result, records)
            )
            succeeded = [r for r in records if r["messageId"] not in failed]
            self.delete(succeeded)
            self.report(invocation, len(records), len(failed))
            if invocation.timed_out:
                return EXIT_TIMED_OUT
        return EXIT_STOPPED

    def release(self, messages: list[dict[str, Any]]) -> None:
        """Make received messages visible again at once; one that cannot be released comes back
        when its visibility timeout ends."""
        for start in range(0, len(messages), SQS_MAX_BATCH):
            chunk = messages[start : start + SQS_MAX_BATCH]
            try:
                with self.service_calls():
                    self.sqs.change_message_visibility_batch(
                        QueueUrl=self.args.queue_url,
                        Entries=[
                            {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
                            for n, m in enumerate(chunk)
                        ],
                    )
            except (BotoCoreError, ClientError) as error:
                print(
                    f"local poller: release failed ({type(error).__name__}: {error})",
                    file=sys.stderr,
                    flush=True,
                )

    def delete(self, records: list[dict[str, Any]]) -> None:
        """Delete the succeeded records; one that cannot be deleted comes back, and idempotency skips it."""
        for start in range(0, len(records), SQS_MAX_BATCH):
            chunk = records[start : start + SQS_MAX_BATCH]
            try:
                with self.service_calls():
                    response = self.sqs.delete_message_batch(
                        QueueUrl=self.args.queue_url,
                        Entries=[
                            {"Id": str(i), "ReceiptHandle": r["receiptHandle"]} for i, r in enumerate(chunk)
                        ],
                    )
            except (BotoCoreError, ClientError) as error:
                print(
                    f"local poller: delete failed ({type(error).__name__}: {error})",
                    file=sys.stderr,
                    flush=True,
                )
                continue
            for failure in response.get("Failed", []):
                print(f"local poller: delete failed ({failure.get('Code')})", file=sys.stderr, flush=True)

    def report(self, invocation: Invocation, records: int, failed: int) -> None:
        counts = self.host.discover_counts()
        outcomes: dict[str, int] | None = None
        if counts is not None:
            current = Counter(counts)
            outcomes = dict(current - self.previous_counts)
            self.previous_counts = current
        report_invocation(
            self.status,
            invocation,
            records=records,
            failed=failed,
            outcomes=outcomes,
            last_failure=self.host.discover_last_failure() if outcomes is not None else None,
        )


def report_invocation(
    status: StatusChannel,
    invocation: Invocation,
    *,
    records: int = 1,
    failed: int | None = None,
    outcomes: dict[str, int] | None = None,
    result: Any = None,
    last_failure: str | None = None,
) -> None:
    """Tell the runtime how an invocation went (`failed`: by default, all of it if it failed;
    `last_failure`: why the consumer worker last retried or dead-lettered a record)."""
    status.send(
        "invocation",
        records=records,
        failed=(0 if invocation.ok else records) if failed is None else failed,
        outcomes=outcomes,
        error=invocation.error,
        timed_out=invocation.timed_out,
        duration_ms=invocation.duration_ms,
        result=result,
        last_failure=last_failure,
        **invocation.work(),
    )
