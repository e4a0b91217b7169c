"""The runtime every consumer Lambda shares: batch, idempotency, retries and dead-lettering.

A consumer supplies one function `process(envelope) -> dict | None` holding its business work.
`ConsumerWorker` wraps it so that:

- each SQS record is handled on its own (Powertools `BatchProcessor`): only failed records are
  reported in `batchItemFailures` and retried, never the whole batch;
- `process` runs at most once per business event per consumer (Powertools idempotency on the
  journal table, keyed `<consumer>#<hash of envelope.event_id>`, or of the consumer's own
  `idempotency_key` expression), whatever the SQS message id,
  the number of deliveries or concurrent workers;
- a transient failure makes the record visible again after an exponential backoff with jitter
  (or the remote's `retry_after`), by changing the message visibility; a record whose event is
  claimed by an invocation in progress comes back after the consumer's timeout, when any claim
  has run out (a dead worker's, or this invocation's own whose answer DynamoDB lost);
- a permanent failure, an unreadable envelope, or the last allowed attempt sends the record to
  the consumer's DLQ with its reason as a message attribute and in the log, then acknowledges it:
  no endless loop, nothing lost. The SQS redrive policy stays as the safety net for crashes.

An ordered consumer (`Consumer.ordered`) reads a FIFO queue grouped by chat, through Powertools'
`SqsFifoPartialProcessor(skip_group_on_error=True)`: at a group's first failure the rest of that
group in the batch is skipped (reported failed without running), other groups go on. A skipped
record was not attempted: it is made visible again with its group's failed record, so the group
comes back whole and in order, and its attempts are counted by the worker (an `attempts` item
per message in the journal, written on failures only), not read from ApproximateReceiveCount,
which skips raise. When that counter cannot be written (DynamoDB throttled or down), the attempt
is unknown and the receive count is no stand-in (it may be all held receives): the record is
retried, not dead-lettered, unless it has reached its queue's redrive count
(`Consumer.redrive_max_receive_count`, every receive it can take while held), where SQS would
move it to the DLQ at its next receive anyway; the worker dead-letters it then, with its
reason. So a held record is never dead-lettered early, and one whose counter stays unwritable
cannot loop past the redrive count.

A refusal of the whole account (`AccountRefused`: a revoked token, an account blocked or
unpaid, a gateway out of balance) pauses the record instead: every message would fail the same
way, and dead-lettering them all would leave a person to redrive what resumes by itself. The
record is not counted as an attempt and comes back after `pause_seconds`: an unordered consumer's
is re-sent to its queue with SQS's longest delay and the original acknowledged (so the receive
count that feeds the redrive policy starts anew, its first send time carried along in the
`first_sent_at` attribute); an ordered consumer's (FIFO: no re-send, or the chat's order breaks)
stays hidden that long, its group with it, a wait long enough that the redrive count of receives
outlasts the queue's retention. Once the account works the next delivery simply succeeds. The
bound: a paused record is dead-lettered, with the reason, when it would outlive its queue's
retention (CONSUMER_QUEUE_RETENTION after it was first sent), never lost silently. Each pause
emits `AccountPaused{consumer, cause}` (alarmed from the first) and writes the consumer's
latest pause to the journal (`<consumer>#paused`), which `ops doctor` reads. The rest of the
batch pauses with the first record without calling the remote again. A record handed back
(`HandedBack`: Telegram's pacing or flood wait is longer than the invocation may sleep,
`pipeline.pacing`) goes back the same way, uncounted, with that wait as its delay (counted in
RecordsHandedBack); a wait past TELEGRAM_RETRY_AFTER_CAP_SECONDS is a `flood_control` pause.

Dead-lettering sends to the FIFO DLQ in the record's group (its chat), named in the log line,
and publishes a notice naming the chat to the alarm topic (`ALARM_TOPIC_ARN`): the DLQ's
CloudWatch alarm fires once, for the first dead letter, and cannot name a chat. The notice is
best effort: the record is safe in the DLQ once sent, so a failed publish is a warning.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit, single_metric
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    SqsFifoPartialProcessor,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

# Imported at the init, with boto3 (Powertools' DynamoDB layer imports it): the first record needs
# them, and Lambda runs the init at a full vCPU, the invocation at a share of one (`pipeline.aws`).
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyAlreadyInProgressError
from aws_lambda_powertools.utilities.typing import LambdaContext

from pipeline import aws, deadline, http, pause
from pipeline.envelope import Envelope
from pipeline.errors import FLOOD_CONTROL, AccountRefused, HandedBack, PermanentError, TransientError
from pipeline.formats import SCHEMA_VERSION
from pipeline.formats import by_name as by_format
from pipeline.idempotency_store import VersionedPersistenceLayer
from pipeline.observability import mask_phones, service_logger
from pipeline.pause import MAX_VISIBILITY_SECONDS
from pipeline.registry import Consumer, by_name, secret_env_var
from pipeline.retention import CONSUMER_QUEUE_RETENTION, TELEGRAM_RETRY_AFTER_CAP_SECONDS
from pipeline.validation import Invalid
from pipeline.worker_settings import ALARM_TOPIC_ENV as ALARM_TOPIC_ENV  # re-exported: the stack's name
from pipeline.worker_settings import ENVIRONMENT_VARIABLES as ENVIRONMENT_VARIABLES
from pipeline.worker_settings import WorkerSettings, backoff_seconds

Process = Callable[[Envelope], dict[str, Any] | None]

# The clients a consumer's first record calls besides the journal's, by what its entry declares.
_DECLARED_CLIENTS: dict[str, Callable[[Consumer], bool]] = {
    "dynamodb": lambda consumer: True,  # the idempotency journal
    "secretsmanager": lambda consumer: bool(_deployed_secrets(consumer)),
    "sns": lambda consumer: consumer.publishes or consumer.asks_crm_to_look,
}


def _deployed_secrets(consumer: Consumer) -> list[str]:
    """The consumer's secrets this deployment has (the stack sets a secret's id variable only
    then: `sms_gateway` exists for an HTTP gateway alone)."""
    return [name for name in consumer.secrets if os.environ.get(secret_env_var(name))]


# An ordered consumer's attempt counter item in the journal: `<consumer>#attempts#<message id>`,
# kept as long as the message can stay in its queue.
ATTEMPTS_KEY = "{consumer}#attempts#{message_id}"
ATTEMPTS_TTL_SECONDS = int(CONSUMER_QUEUE_RETENTION.total_seconds())
ATTEMPTS_FORMAT = by_format("consumer_attempts")


def attempts_of(item: Mapping[str, Any]) -> int:
    """The attempts counted in an attempts item (any version: each has the counter as it was)."""
    ATTEMPTS_FORMAT.version_of(item)
    return int(item["attempts"]["N"])


# SNS caps a subject at 100 characters.
SUBJECT_MAX = 100


@dataclass(frozen=True)
class Outcome:
    """What happened to one record; the local runtime and tests count these."""

    # "processed" | "duplicate" | "retry" | "dead_lettered" | "held" (ordered: skipped) | "paused"
    # | "handed_back"
    status: str
    reason: str | None = None
    delay_seconds: int | None = None


class ConsumerWorker:
    """Module-level in each consumer's `app.py`; see the module docstring for the guarantees."""

    def __init__(self, process: Process, consumer: Consumer | None = None) -> None:
        self.process = process
        self._explicit_consumer = consumer
        self._consumer = consumer
        self.logger = service_logger()
        self.metrics = Metrics()
        self._processor: BatchProcessor | None = None
        self._settings: WorkerSettings | None = None
        self._idempotent_process: Callable[..., Any] | None = None
        self._config: IdempotencyConfig | None = None
        self._executed = False
        # Outcome counts since start (the local runtime's status line reads them).
        self.counts: Counter[str] = Counter()
        self.last_outcome: Outcome | None = None
        # Per invocation, ordered consumers: records the handler ran on, and each failed group's delay.
        self._attempted: set[str] = set()
        self._group_delays: dict[str, int] = {}
        # Per invocation: the account refusal that paused a record; the rest of the batch waits too.
        self._paused: AccountRefused | None = None
        self._envelope: Envelope | None = None  # the record's in hand (a dead letter's notice names it)
        if aws.in_execution_environment():
            self._prepare()

    def _prepare(self) -> None:
        """At the init (in Lambda or `make local`'s function host): what the first record would
        build, at the init's full vCPU (`pipeline.aws`): the idempotency layer with its journal
        client, the clients of the consumer's deployed secrets and topic, and the HTTPS opener of a
        consumer that calls a remote with a secret. (A consumer's own module prepares what else it
        calls: `store.logic` its DynamoDB resource, `ai.logic` Bedrock's client.)"""
        self._wire()
        consumer = self.consumer
        aws.prepare(clients=[service for service, used in _DECLARED_CLIENTS.items() if used(consumer)])
        if _deployed_secrets(consumer):
            http.prepare()

    # -- wiring: at the init in an execution environment (`_prepare`), else at the first invocation --
    @property
    def settings(self) -> WorkerSettings:
        if self._settings is None:
            self._settings = WorkerSettings.from_env()
        return self._settings

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = by_name(self.settings.consumer_name)
        return self._consumer

    @property
    def processor(self) -> BatchProcessor:
        """The FIFO processor for an ordered consumer (stops a group at its first failure), else
        the plain one. A batch whose every record is retried (a throttled remote, a one-record
        batch) is an expected outcome: every record is reported in batchItemFailures instead of
        failing the invocation, which would count as a function error and trip the Errors alarm."""
        if self._processor is None:
            if self.consumer.ordered:
                self._processor = SqsFifoPartialProcessor(skip_group_on_error=True)
                self._processor.raise_on_entire_batch_failure = False
            else:
                self._processor = BatchProcessor(
                    event_type=EventType.SQS, raise_on_entire_batch_failure=False
                )
        return self._processor

    def _wire(self) -> tuple[IdempotencyConfig, Callable[..., Any]]:
        if self._config is None or self._idempotent_process is None:
            settings = self.settings
            self._config = IdempotencyConfig(
                event_key_jmespath=self.consumer.idempotency_key,
                raise_on_no_idempotency_key=True,
                expires_after_seconds=settings.idempotency_ttl_seconds,
            )
            persistence = VersionedPersistenceLayer(settings.journal_table, aws.client("dynamodb"))

            def run(event: dict[str, Any]) -> dict[str, Any] | None:
                self._executed = True
                return self.process(Envelope.parse(event))

            self._idempotent_process = idempotent_function(
                run,
                data_keyword_argument="event",
                persistence_store=persistence,
                config=self._config,
                key_prefix=self.consumer.name,
            )
        return self._config, self._idempotent_process

    def reset(self) -> None:
        """Forget settings and clients (tests and the local runtime re-point the environment)."""
        self._settings = None
        self._consumer = self._explicit_consumer  # else re-read from the new CONSUMER_NAME
        self._processor = None
        self._config = None
        self._idempotent_process = None
        self.counts.clear()
        self.last_outcome = None

    # -- the handler body ---------------------------------------------------------------------
    def handle(self, event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        with deadline.invocation(context):
            return self._handle(event, context)

    def _handle(self, event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        config, _ = self._wire()
        config.register_lambda_context(context)
        self.metrics.add_dimension(name="consumer", value=self.consumer.name)
        self._attempted.clear()
        self._group_delays.clear()
        self._paused = None
        response = dict(
            process_partial_response(
                event=event, record_handler=self.handle_record, processor=self.processor, context=context
            )
        )
        if self.consumer.ordered:
            self._release_held(event, response)
        return response

    def _release_held(self, event: dict[str, Any], response: dict[str, Any]) -> None:
        """Records skipped behind a failure of their group: visible again with the failed record
        (same delay), so the group returns whole and in order, not after the queue's visibility
        timeout. Not an attempt: nothing is counted against them."""
        failed = {item["itemIdentifier"] for item in response.get("batchItemFailures", [])}
        held = [
            record
            for record in event.get("Records", [])
            if record["messageId"] in failed and record["messageId"] not in self._attempted
        ]
        if not held:
            return
        entries = []
        for index, record in enumerate(held):
            group = (record.get("attributes") or {}).get("MessageGroupId") or ""
            delay = self._group_delays.get(group, 0)
            entries.append(
                {"Id": str(index), "ReceiptHandle": record["receiptHandle"], "VisibilityTimeout": delay}
            )
            self._record(Outcome("held", f"behind a failed record of {group}", delay))
            self.logger.info(
                "record held behind its group's failure",
                extra={"message_id": record["messageId"], "message_group": group, "delay": delay},
            )
        try:
            result = aws.client("sqs").change_message_visibility_batch(
                QueueUrl=self.settings.queue_url, Entries=entries
            )
            problems = result.get("Failed", [])
        except Exception:
            self.logger.exception("could not release held records")
            return
        if problems:
            # They come back after the queue's visibility timeout instead, still in order.
            self.logger.warning(
                "some held records keep the queue's visibility timeout", extra={"failed": problems}
            )

    def handle_record(self, record: SQSRecord) -> None:
        """Raise to have the record retried; return to have it acknowledged (deleted)."""
        _, idempotent_process = self._wire()
        self._attempted.add(record.message_id)
        receive_count = int(record.attributes.approximate_receive_count or "1")
        log_keys: dict[str, Any] = {"message_id": record.message_id, "receive_count": receive_count}
        group = record.attributes.message_group_id
        if group:
            log_keys["message_group"] = group
        try:
            envelope = Envelope.from_json(record.body)
        except Invalid as error:
            # A body-wide refusal says why (a schema_version newer than this code reads, FormatTooNew).
            fields = ", ".join(
                ".".join(str(p) for p in e["loc"]) or f"body: {e['msg']}" for e in error.errors()
            )
            self._dead_letter(record, f"invalid envelope ({fields})", log_keys, None)
            return

        self.logger.set_correlation_id(envelope.correlation_id)
        self.logger.append_keys(event_id=envelope.event_id, event_type=envelope.type)
        self._executed = False
        self._envelope = envelope
        try:
            if self._paused is not None:
                raise self._paused
            idempotent_process(event=envelope.to_document())
        except AccountRefused as error:
            self._pause(record, error, log_keys, receive_count)
        except HandedBack as error:
            self._hand_back(record, error, log_keys, receive_count)
        except PermanentError as error:
            self._dead_letter(record, error.reason, log_keys, envelope)
            return
        except IdempotencyAlreadyInProgressError:
            # A claim on this event is in force: another worker's, or this very invocation's own
            # when DynamoDB took the claim and lost the answer (botocore's retry then finds the
            # record). Come back once any claim has run out (it lasts at most the function's
            # timeout), so the retries cannot all be spent against a claim nobody works on and
            # dead-letter an event never processed.
            wait = self.consumer.timeout_seconds
            self._retry(record, "event in progress elsewhere", log_keys, receive_count, wait, envelope)
        except TransientError as error:
            self._retry(record, error.reason, log_keys, receive_count, error.retry_after, envelope)
        except Exception as error:  # an unclassified failure: retry, never loop forever
            self.logger.exception("unexpected error", extra=log_keys)
            self._retry(record, f"{type(error).__name__}: {error}", log_keys, receive_count, None, envelope)
        else:
            # On a duplicate Powertools returns the saved result without calling `run`.
            status = "processed" if self._executed else "duplicate"
            self._record(Outcome(status))
            self.logger.info(f"record {status}", extra=log_keys)
        finally:
            self.logger.remove_keys(["event_id", "event_type"])

    # -- outcomes -------------------------------------------------------------------------------
    def _retry(
        self,
        record: SQSRecord,
        reason: str,
        log_keys: dict[str, Any],
        receive_count: int,
        retry_after: float | None,
        envelope: Envelope,
    ) -> None:
        policy = self.consumer.retry
        attempt = self._attempt(record, receive_count, log_keys)
        if attempt is None:  # an ordered consumer's counter could not be written
            if receive_count >= self.consumer.redrive_max_receive_count:
                reason = f"retries exhausted after {receive_count} receives (attempts not counted): {reason}"
                self._dead_letter(record, reason, log_keys, envelope)
                return
        elif attempt >= policy.max_receive_count:
            reason = f"retries exhausted after {attempt} attempts: {reason}"
            self._dead_letter(record, reason, log_keys, envelope)
            return
        if retry_after is not None:
            delay = min(math.ceil(retry_after), MAX_VISIBILITY_SECONDS)
        else:
            delay = backoff_seconds(policy, receive_count if attempt is None else attempt)
        try:
            aws.client("sqs").change_message_visibility(
                QueueUrl=self.settings.queue_url,
                ReceiptHandle=record.receipt_handle,
                VisibilityTimeout=delay,
            )
        except Exception:
            # The record still fails; it reappears after the queue's own visibility timeout.
            self.logger.exception("could not set retry delay", extra=log_keys)
        group = record.attributes.message_group_id
        if self.consumer.ordered and group:
            self._group_delays[group] = delay
        self._record(Outcome("retry", reason, delay))
        self.metrics.add_metric(name="RecordsRetried", unit=MetricUnit.Count, value=1)
        self.logger.warning("record will be retried", extra={**log_keys, "reason": reason, "delay": delay})
        raise TransientError(reason, retry_after)

    def _pause(
        self, record: SQSRecord, error: AccountRefused, log_keys: dict[str, Any], receive_count: int
    ) -> None:
        """Keep the record for later, uncounted (see the module docstring); raise to report it
        failed when it stays in place (ordered), return when a copy was re-sent (unordered)."""
        first = self._paused is None
        self._paused = error
        delay = pause.pause_seconds(self.consumer)
        reason = f"account refused ({error.cause}): {error.reason}"
        if not self._keepable(record, "paused", reason, delay, receive_count, log_keys):
            return
        with single_metric(name=pause.PAUSED_METRIC, unit=MetricUnit.Count, value=1) as metric:
            metric.add_dimension(name="consumer", value=self.consumer.name)
            metric.add_dimension(name="cause", value=error.cause)
        if first:
            try:
                pause.note(self.settings.journal_table, self.consumer, error)
            except Exception as failure:  # best effort: the metric and the log line say it too
                self.logger.warning(
                    "could not note the pause in the journal",
                    extra={**log_keys, "error": f"{type(failure).__name__}: {failure}"},
                )
        self._record(Outcome("paused", reason, delay))
        self.metrics.add_metric(name="RecordsPaused", unit=MetricUnit.Count, value=1)
        self.logger.warning(
            "record paused: the remote refused the account",
            extra={**log_keys, "reason": reason, "cause": error.cause, "delay": delay},
        )
        self._put_back(record, reason, delay, log_keys)

    def _hand_back(self, record: SQSRecord, error: HandedBack, log_keys: dict[str, Any], count: int) -> None:
        """The pacing's wait is spent in the queue (see the module docstring); past the cap, a pause."""
        if error.delay > TELEGRAM_RETRY_AFTER_CAP_SECONDS:
            over = f"{error.reason}, over the {TELEGRAM_RETRY_AFTER_CAP_SECONDS} s cap"
            self._pause(record, AccountRefused(over, FLOOD_CONTROL), log_keys, count)
            return
        # SQS delays a re-sent record 900 s at most: a longer wait is handed back again for the rest.
        longest = MAX_VISIBILITY_SECONDS if self.consumer.ordered else pause.PAUSE_SECONDS
        delay = min(max(1, math.ceil(error.delay)), longest)
        reason = f"handed back: {error.reason}"
        if self._keepable(record, "handed back", error.reason, delay, count, log_keys):
            self._record(Outcome("handed_back", reason, delay))
            self.metrics.add_metric(name="RecordsHandedBack", unit=MetricUnit.Count, value=1)
            self.logger.info("record handed back", extra={**log_keys, "reason": reason, "delay": delay})
            self._put_back(record, reason, delay, log_keys)

    def _keepable(self, record: SQSRecord, doing: str, why: str, delay: int, count: int, log: Any) -> bool:
        """Whether it may be kept `delay` s more; if not (it would expire unexplained), dead-lettered."""
        age = pause.outliving_age(self.consumer, record, delay, count)
        if age is not None:
            reason = f"{doing} {age / 86_400:.1f} days, the queue's retention: {why}"
            self._dead_letter(record, reason, log, self._envelope)
        return age is None

    def _put_back(self, record: SQSRecord, reason: str, delay: int, log_keys: dict[str, Any]) -> None:
        """Back in `delay` s, uncounted: unordered, re-sent (its receive count anew; the original
        acknowledged); ordered (FIFO: a re-send breaks the order), hidden with its group (raises)."""
        if not self.consumer.ordered:
            pause.resend(self.settings.queue_url, record, pause.first_sent_ms(record), delay)
            return
        try:
            aws.client("sqs").change_message_visibility(
                QueueUrl=self.settings.queue_url, ReceiptHandle=record.receipt_handle, VisibilityTimeout=delay
            )
        except Exception:
            self.logger.exception("could not set the delay", extra=log_keys)
        if group := record.attributes.message_group_id:
            self._group_delays[group] = delay
        raise TransientError(reason)

    def _attempt(self, record: SQSRecord, receive_count: int, log_keys: dict[str, Any]) -> int | None:
        """Which attempt at this record just failed. The receive count for an unordered consumer;
        for an ordered one, its own counter (receives include the times it was skipped behind its
        group), or None when the counter cannot be written (see the module docstring)."""
        if not self.consumer.ordered:
            return receive_count
        key = ATTEMPTS_KEY.format(consumer=self.consumer.name, message_id=record.message_id)
        try:
            result = aws.client("dynamodb").update_item(
                TableName=self.settings.journal_table,
                Key={"id": {"S": key}},
                UpdateExpression="ADD attempts :one SET expiration = :expiration, schema_version = :v",
                ExpressionAttributeValues={
                    ":one": {"N": "1"},
                    ":expiration": {"N": str(int(time.time()) + ATTEMPTS_TTL_SECONDS)},
                    ":v": ATTEMPTS_FORMAT.written()[SCHEMA_VERSION],
                },
                ReturnValues="UPDATED_NEW",
            )
            attempt = attempts_of(result["Attributes"])
        except Exception:
            self.logger.exception("could not count the attempt: retried uncounted", extra=log_keys)
            return None
        log_keys["attempt"] = attempt
        return attempt

    def _dead_letter(
        self, record: SQSRecord, reason: str, log_keys: dict[str, Any], envelope: Envelope | None
    ) -> None:
        """`envelope`: None when the body is not one."""
        attributes = {
            name: {"DataType": "String", "StringValue": value["stringValue"]}
            for name, value in (record.raw_event.get("messageAttributes") or {}).items()
            if value.get("stringValue")
        }
        attributes["dead_letter_reason"] = {"DataType": "String", "StringValue": reason[:1000]}
        attributes["dead_letter_consumer"] = {"DataType": "String", "StringValue": self.consumer.name}
        request: dict[str, Any] = {
            "QueueUrl": self.settings.dlq_url,
            "MessageBody": record.body,
            "MessageAttributes": attributes,
        }
        if self.consumer.ordered:
            # The FIFO DLQ keeps the record's group (its chat: what the alarm's reader looks for);
            # a send repeated after a crash dedupes on the message id.
            request["MessageGroupId"] = record.attributes.message_group_id or "no-group"
            request["MessageDeduplicationId"] = record.message_id
        # Sending can fail; then the record fails and is retried, so the message is never lost.
        aws.client("sqs").send_message(**request)
        self._record(Outcome("dead_lettered", reason))
        self.metrics.add_metric(name="RecordsDeadLettered", unit=MetricUnit.Count, value=1)
        self.logger.error("record sent to the DLQ", extra={**log_keys, "reason": reason})
        if self.consumer.ordered:
            self._notify_dead_letter(record, reason, log_keys, envelope)

    def _notify_dead_letter(
        self, record: SQSRecord, reason: str, log_keys: dict[str, Any], envelope: Envelope | None
    ) -> None:
        """One notice per dead letter on the alarm topic: consumer, chat, event id, update type and
        reason (phones masked), never the body. After the DLQ send, so it cannot lose the record;
        a failure is logged and the DLQ's own alarm still fires."""
        topic_arn = self.settings.alarm_topic_arn
        if not topic_arn:
            return
        name = self.consumer.name
        chat = record.attributes.message_group_id or "no-group"
        event_id = envelope.event_id if envelope else "(unreadable envelope)"
        lines = {
            "consumer": name,
            "chat (message group)": chat,
            "event id": event_id,
            "update type": envelope.type if envelope else "(unreadable envelope)",
            "reason": mask_phones(reason),
            "SQS message id": record.message_id,
        }
        message = "\n".join(
            [
                f"The {name} consumer dead-lettered an update; the rest of its chat goes on.",
                *(f"{key}: {value}" for key, value in lines.items()),
                f"The record is in the {name} DLQ in this chat's message group: inspect it, fix the "
                "cause, then redrive or discard it (python -m ops dlq).",
            ]
        )
        subject = f"{name}: chat {chat} dead-lettered update {event_id}"
        try:
            aws.client("sns").publish(TopicArn=topic_arn, Subject=subject[:SUBJECT_MAX], Message=message)
        except Exception as error:
            self.logger.warning(
                "could not publish the dead letter's notice (the DLQ alarm still fires)",
                extra={**log_keys, "error": f"{type(error).__name__}: {error}"},
            )

    def _record(self, outcome: Outcome) -> None:
        self.counts[outcome.status] += 1
        self.last_outcome = outcome
        # A processed record has no metric of its own: the queue's NumberOfMessagesDeleted counts
        # them, and a metric line per invocation was a third of a record's log bytes (issue 44).
        if outcome.status == "duplicate":
            self.metrics.add_metric(name="DuplicatesSkipped", unit=MetricUnit.Count, value=1)
