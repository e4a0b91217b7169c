"""The `sms` consumer's work: one CRM order event in, at most one SMS per notification out.

1. From the event alone: is an SMS due? (a rule for this transition; a re-save, a status without
   a rule or another event type sends nothing).
2. The notification is recorded in the journal *before* any gateway call; a conflict means it
   is already known, and the record, not the event, decides what happens next.
3. Only a `pending` record this worker claims (atomically, under a lease) is sent (the
   reconciler claims the same way a `pending` record an operator asked to resend, or whose SQS
   message is gone). A record
   `sending` under someone else's lease is retried later; one whose lease expired (its worker
   died mid-call) becomes `unknown`. `accepted` and `unknown` are acknowledged without a send
   (`unknown` is the reconciler's); `failed` goes back to the DLQ.
4. The outcome is saved before the SQS message is acknowledged: accepted -> done; definite
   transient refusal -> `pending` + TransientError(retry_after = backoff with jitter) until
   `max_attempts`, then `failed` + PermanentError (DLQ, with the reason); no answer -> `unknown`.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from pydantic import ValidationError

from pipeline.crm import ORDER_STATUS_CHANGED, CrmEvent
from pipeline.envelope import Envelope
from pipeline.errors import PermanentError, TransientError
from pipeline.observability import mask_phone, mask_phones
from pipeline.registry import RetryPolicy
from pipeline.sms.gateways import (
    GatewayOutcomeUnknown,
    GatewayRefused,
    OutgoingSms,
    SmsGateway,
    build_gateway,
)
from pipeline.sms.journal import (
    CLOCK,
    Clock,
    Draft,
    Finish,
    Journal,
    Notification,
    State,
    iso,
    notification_key,
)
from pipeline.sms.rules import SmsRules, load_rules
from pipeline.sms.settings import SmsSettings
from pipeline.worker import backoff_seconds

logger = Logger(child=True)
metrics = Metrics()

CHANNEL = "sms"


@dataclass
class SmsRuntime:
    """Everything the sms code works with, built once per execution environment."""

    settings: SmsSettings
    rules: SmsRules
    journal: Journal
    gateway: SmsGateway
    clock: Clock

    @classmethod
    def from_env(cls, clock: Clock = CLOCK) -> SmsRuntime:
        settings = SmsSettings.from_env()
        return cls(
            settings=settings,
            rules=load_rules(),
            journal=Journal(
                settings.journal_table, lease=settings.lease, retention=settings.retention, clock=clock
            ),
            gateway=build_gateway(settings),
            clock=clock,
        )


_runtime: SmsRuntime | None = None


def runtime() -> SmsRuntime:
    global _runtime
    if _runtime is None:
        _runtime = SmsRuntime.from_env()
    return _runtime


def reset_runtime() -> None:
    """Forget settings, rules and gateway (tests and the local runtime re-point the environment)."""
    global _runtime
    _runtime = None


# -- one gateway call ---------------------------------------------------------------------------
OutcomeKind = Literal["accepted", "refused", "refused_permanently", "unknown"]


@dataclass(frozen=True)
class AttemptOutcome:
    kind: OutcomeKind
    started_at: datetime
    answered_at: datetime | None  # None: no answer came back
    code: str | None = None
    detail: str = ""
    message_id: str | None = None
    retry_after: float | None = None

    def entry(self, by: str, owner: str) -> dict[str, Any]:
        """The journal's record of this attempt (no phone number: details are masked)."""
        entry: dict[str, Any] = {
            "at": iso(self.started_at),
            "outcome": self.kind,
            "by": by,
            "owner": owner,
            "answered_at": iso(self.answered_at) if self.answered_at else None,
            "gateway_ms": self.gateway_ms,
            "error_code": self.code,
            "detail": self.detail or None,
            "message_id": self.message_id,
        }
        return {name: value for name, value in entry.items() if value is not None}

    @property
    def gateway_ms(self) -> int | None:
        return None if self.answered_at is None else _ms(self.answered_at - self.started_at)


def _ms(duration: timedelta) -> int:
    return int(duration.total_seconds() * 1000)


def call_gateway(gateway: SmsGateway, sms: OutgoingSms, clock: Clock) -> AttemptOutcome:
    started = clock.now()
    try:
        accepted = gateway.send(sms)
    except GatewayRefused as refusal:
        kind: OutcomeKind = "refused" if refusal.transient else "refused_permanently"
        return AttemptOutcome(
            kind, started, clock.now(), refusal.code, refusal.detail, retry_after=refusal.retry_after
        )
    except GatewayOutcomeUnknown as unknown:
        return AttemptOutcome("unknown", started, None, unknown.code, unknown.detail)
    except Exception as error:
        # A bug or an unforeseen failure once the request may have left: not knowing is unknown.
        logger.error(
            "Unexpected failure calling the SMS gateway: outcome unknown",
            extra={
                "notification_key": sms.key,
                "error_type": type(error).__name__,
                "error": mask_phones(str(error))[:300],
            },
        )
        return AttemptOutcome("unknown", started, None, type(error).__name__)
    return AttemptOutcome("accepted", started, clock.now(), message_id=accepted.message_id)


Decide = Callable[[SmsSettings, Notification, AttemptOutcome, datetime], Finish]


def _after_attempt(
    settings: SmsSettings, record: Notification, outcome: AttemptOutcome, now: datetime, by: str
) -> Finish:
    """A send of a `pending` record: done, unknown, failed, or pending again after a backoff."""
    entry = outcome.entry(by, record.lease_owner or "")
    if outcome.kind == "accepted":
        return Finish(State.ACCEPTED, entry, outcome.answered_at, message_id=outcome.message_id)
    if outcome.kind == "unknown":
        return Finish(State.UNKNOWN, entry)
    if outcome.kind == "refused_permanently":
        reason = f"gateway refused the SMS for good ({outcome.code})"
        return Finish(State.FAILED, entry, outcome.answered_at, failure_reason=reason)
    if record.attempt_count >= settings.max_attempts:
        reason = f"gateway refused the SMS {record.attempt_count} times, last with {outcome.code}"
        return Finish(State.FAILED, entry, outcome.answered_at, failure_reason=reason)
    policy = RetryPolicy(
        max_receive_count=settings.max_attempts,
        base_delay_seconds=settings.retry_base_seconds,
        max_delay_seconds=settings.retry_max_seconds,
    )
    delay = max(backoff_seconds(policy, record.attempt_count), math.ceil(outcome.retry_after or 0))
    return Finish(State.PENDING, entry, outcome.answered_at, next_attempt_at=now + timedelta(seconds=delay))


def after_worker_attempt(
    settings: SmsSettings, record: Notification, outcome: AttemptOutcome, now: datetime
) -> Finish:
    return _after_attempt(settings, record, outcome, now, "worker")


def after_reconciler_send(
    settings: SmsSettings, record: Notification, outcome: AttemptOutcome, now: datetime
) -> Finish:
    """A `pending` record the reconciler sent (an operator asked, or its SQS message is gone).

    Otherwise a worker's attempt. An operator's resend that may have reached the gateway counts
    as the one resend, so if it ends unknown again the reconciler does not resend it on its own.
    """
    finish = _after_attempt(settings, record, outcome, now, "reconciler")
    requested = record.resend_requested_at is not None
    return replace(finish, counts_as_resend=requested and outcome.kind in ("accepted", "unknown"))


def after_reconciler_resend(
    settings: SmsSettings, record: Notification, outcome: AttemptOutcome, now: datetime
) -> Finish:
    """A resend of a proven-not-received SMS: used up only if it may have reached the gateway."""
    entry = outcome.entry("reconciler", record.lease_owner or "")
    if outcome.kind == "accepted":
        return Finish(State.ACCEPTED, entry, outcome.answered_at, outcome.message_id, counts_as_resend=True)
    if outcome.kind == "refused_permanently":
        reason = f"gateway refused the resend for good ({outcome.code})"
        return Finish(State.FAILED, entry, outcome.answered_at, failure_reason=reason)
    # Unknown again (counted: no second resend), or refused for now (nothing sent: next run).
    return Finish(State.UNKNOWN, entry, outcome.answered_at, counts_as_resend=outcome.kind == "unknown")


def send_once(
    runtime: SmsRuntime, record: Notification, owner: str, decide: Decide
) -> tuple[AttemptOutcome, Finish, Notification | None]:
    """One gateway call for a record this caller has claimed, and its outcome saved."""
    outcome = call_gateway(
        runtime.gateway, OutgoingSms(record.key, record.recipient, record.body), runtime.clock
    )
    finish = decide(runtime.settings, record, outcome, runtime.clock.now())
    saved = runtime.journal.finish(record.key, owner, finish)
    log_keys = {
        "notification_key": record.key,
        "recipient": mask_phone(record.recipient),
        "attempt": record.attempt_count,
        "outcome": outcome.kind,
        "error_code": outcome.code,
        "gateway_ms": outcome.gateway_ms,
        # Webhook -> this attempt: queueing, retries and backoff (the CRM's delay is logged on receipt).
        "since_received_ms": _ms(outcome.started_at - record.received_at) if record.received_at else None,
        "state": finish.state.value,
    }
    if saved is None:
        logger.warning("SMS attempt outcome not saved: the record was taken over", extra=log_keys)
    elif finish.state is State.UNKNOWN:
        logger.warning("SMS outcome unknown: left to the reconciler, not resent", extra=log_keys)
    else:
        logger.info("SMS attempt finished", extra=log_keys)
    metric = {
        State.ACCEPTED: "SmsAccepted",
        State.PENDING: "SmsRefused",
        State.FAILED: "SmsFailed",
        State.UNKNOWN: "SmsUnknown",
    }.get(finish.state)
    if metric:
        metrics.add_metric(name=metric, unit=MetricUnit.Count, value=1)
    return outcome, finish, saved


# -- the consumer ---------------------------------------------------------------------------------
def plan(envelope: Envelope, rules: SmsRules) -> Draft | str:
    """The notification this event calls for, or why there is none."""
    if envelope.type != ORDER_STATUS_CHANGED:
        return f"event type {envelope.type!r} sends no SMS"
    try:
        event = CrmEvent.model_validate(envelope.payload)
    except ValidationError as error:
        # Field locations only: the input (a phone number) must not reach logs or the DLQ reason.
        fields = ", ".join(
            sorted({".".join(str(part) for part in e["loc"]) or "payload" for e in error.errors()})
        )
        raise PermanentError(f"invalid CRM order event ({fields})") from None
    order = event.order
    if order.previous_status == order.status:
        return "re-save without a status change"
    rule = rules.rule_for(order.status, order.previous_status)
    if rule is None:
        return f"no SMS rule for status {order.status!r}"
    return Draft(
        key=notification_key(event.type, order.id, event.event_id, CHANNEL, event.customer.phone),
        event_type=event.type,
        order_id=order.id,
        transition_id=event.event_id,
        channel=CHANNEL,
        recipient=event.customer.phone,
        body=rule.render(event),
        rule=rule.name,
        order_status=order.status,
        previous_status=order.previous_status,
        occurred_at=event.occurred_at,
        received_at=envelope.received_at,
        correlation_id=envelope.correlation_id,
    )


def send_notification(envelope: Envelope) -> dict[str, Any]:
    """`process` of the sms consumer (see the module docstring)."""
    current = runtime()
    draft = plan(envelope, current.rules)
    if isinstance(draft, str):
        logger.info("No SMS for this event", extra={"reason": draft})
        return {"sent": False, "reason": draft}
    created = current.journal.create(draft)
    logger.info(
        "SMS notification recorded" if created else "SMS notification already known",
        extra={
            "notification_key": draft.key,
            "recipient": mask_phone(draft.recipient),
            "rule": draft.rule,
            "order_id": draft.order_id,
            # CRM -> webhook delay; the queue and gateway delays follow in the attempt's log.
            "crm_delay_ms": _ms(draft.received_at - draft.occurred_at),
        },
    )
    return _drive(current, draft.key)


def _until(moment: datetime, now: datetime) -> int:
    return max(1, math.ceil((moment - now).total_seconds()))


def _drive(current: SmsRuntime, key: str) -> dict[str, Any]:
    """Act on the record's state; re-read after losing a race, a few times at most."""
    for _ in range(3):
        record = current.journal.get(key)
        if record is None:
            raise TransientError("SMS journal record not readable yet")
        now = current.clock.now()
        if record.state is State.PENDING:
            if record.next_attempt_at is not None and record.next_attempt_at > now:
                raise TransientError("next SMS attempt not due yet", _until(record.next_attempt_at, now))
            owner = f"worker-{uuid.uuid4()}"
            claimed = current.journal.claim(key, owner, from_states=(State.PENDING,))
            if claimed is not None:
                return _attempt(current, claimed, owner)
            continue  # another worker claimed it first: see what it did
        if record.state is State.SENDING:
            if record.lease_expires_at is not None and record.lease_expires_at > now:
                raise TransientError("SMS being sent by another worker", _until(record.lease_expires_at, now))
            if current.journal.expire_lease(key, record.lease_owner or "", note="worker"):
                metrics.add_metric(name="SmsLeaseExpired", unit=MetricUnit.Count, value=1)
                logger.warning(
                    "SMS worker died while sending: outcome unknown, not resent",
                    extra={"notification_key": key, "recipient": mask_phone(record.recipient)},
                )
            continue
        if record.state is State.FAILED:
            raise PermanentError(record.failure_reason or "SMS notification failed earlier")
        # accepted: done; unknown: the reconciler's, never a blind resend.
        logger.info("SMS not sent again", extra={"notification_key": key, "state": record.state.value})
        return _result(record)
    raise TransientError("SMS journal record kept changing; will look again")


def _attempt(current: SmsRuntime, record: Notification, owner: str) -> dict[str, Any]:
    _, finish, saved = send_once(current, record, owner, after_worker_attempt)
    if saved is None:
        return {"key": record.key, "state": "taken_over"}
    if finish.state is State.PENDING:
        assert finish.next_attempt_at is not None
        attempts = f"{record.attempt_count} of {current.settings.max_attempts}"
        reason = f"gateway refused the SMS for now (attempt {attempts})"
        raise TransientError(reason, _until(finish.next_attempt_at, current.clock.now()))
    if finish.state is State.FAILED:
        raise PermanentError(finish.failure_reason or "SMS failed")
    return _result(saved)


def _result(record: Notification) -> dict[str, Any]:
    return {"key": record.key, "state": record.state.value, "message_id": record.message_id}
