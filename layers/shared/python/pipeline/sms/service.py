"""The `sms` consumer's work: one CRM order event in, at most one SMS per notification out.

1. Where the event stands in its order's history (`pipeline.sms.orders.observe`, the rules in one
   pure function, the history the pipeline's own, per order qualified by its CRM, in the
   journal): a new status entry, a repeat of the current one (a CRM retry under any id, a
   second press, a re-save), a move already seen, a re-save of another status, or stale (older
   than what was seen). Nothing is sent for the last three. The notification's key names the
   move that started the entry, never a counter or a CRM delivery id.
2. A new entry with a rule due is recorded in the journal *before* any gateway call, in one
   transaction with the order's new state; a repeat finds the same key, and the record, not the
   event, decides what happens next (a repeat that is the latest word on the entry and carries
   another phone corrects the recipient of a notification nothing has gone out for yet).
3. Only a `pending` record this worker claims (atomically, under a lease) is sent (the
   reconciler claims the same way a `pending` record an operator asked to resend, or whose SQS
   message is gone). A record `sending` under someone else's lease is retried later; one whose
   lease expired (its worker died mid-call) becomes `unknown`. `accepted` and `unknown` are
   acknowledged without a send (`unknown` is the reconciler's). `failed` goes back to the DLQ,
   unless its attempts ran out on refusals alone: then nothing was ever taken, and a redelivery
   (a redrive once the cause is fixed) reopens it for one more round.
4. The outcome is saved before the SQS message is acknowledged: accepted -> done; definite
   transient refusal -> `pending` + TransientError(retry_after = backoff with jitter) until
   `max_attempts`, then `failed` + PermanentError (DLQ, with the reason); no answer -> `unknown`;
   the gateway refusing the whole account (out of balance, its credential refused after a
   re-read, the account disabled) -> `pending` again with the attempt given back (nothing was
   sent, and nothing this message did caused it) + AccountRefused: the worker pauses the message,
   which sends it once when it comes back after the account works again (`paused_at` keeps the
   reconciler from taking it for an orphan meanwhile).
"""

from __future__ import annotations

import math
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from pipeline import aws, http, phones
from pipeline.crm.contract import ORDER_STATUS_CHANGED
from pipeline.crm.event_model import CrmEvent
from pipeline.envelope import Envelope
from pipeline.errors import AccountRefused, HandedBack, PermanentError, TransientError
from pipeline.observability import mask_phone, mask_phones
from pipeline.pause import PAUSE_SECONDS
from pipeline.registry import RetryPolicy
from pipeline.sms.endstates import CLOSING_METRICS, QUIET_METRIC, Hold, hold, time_to_live
from pipeline.sms.gateways import (
    EndUserMessagingGateway,
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
from pipeline.sms.orders import Move, Observation, OrderState, observe
from pipeline.sms.recheck import ask_crm_to_look, refused_for_good
from pipeline.sms.rules import SmsRules, load_rules
from pipeline.sms.settings import DEFAULTS, ENVIRONMENT_VARIABLES, SmsSettings
from pipeline.validation import Invalid
from pipeline.worker_settings import backoff_seconds  # the consumers' backoff, without the worker runtime

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
        rules = load_rules()
        return cls(
            settings=settings,
            rules=rules,
            journal=Journal(
                settings.journal_table, lease=settings.lease, retention=settings.retention, clock=clock
            ),
            gateway=build_gateway(settings, rules.max_price),
            clock=clock,
        )


_runtime: SmsRuntime | None = None


def runtime() -> SmsRuntime:
    global _runtime
    if _runtime is None:
        _runtime = SmsRuntime.from_env()
    return _runtime


def prepare() -> None:
    """At the `sms` consumer's init: what its first record would build besides the worker's part
    (`pipeline.worker`): libphonenumber, which reads the order's phone, and the client of End User
    Messaging (`pipeline.aws.prepare`: in an execution environment) or, for an HTTP gateway, the
    secret's reader and the TLS context."""
    phones.prepare()
    gateway = os.environ.get(ENVIRONMENT_VARIABLES["gateway"]) or DEFAULTS["gateway"]
    if gateway == "end_user_messaging":
        aws.prepare(non_retrying_clients=(EndUserMessagingGateway.SERVICE,))
    elif gateway == "http":
        from pipeline import secrets  # noqa: F401  (the gateway's token, read with the first send)

        http.prepare()


def reset_runtime() -> None:
    """Forget settings, rules and gateway (tests and the local runtime re-point the environment)."""
    global _runtime
    _runtime = None


# -- one gateway call ---------------------------------------------------------------------------
OutcomeKind = Literal["accepted", "refused", "refused_permanently", "account_refused", "opted_out", "unknown"]


@dataclass(frozen=True)
class AttemptOutcome:
    kind: OutcomeKind
    started_at: datetime
    answered_at: datetime | None  # None: no answer came back
    code: str | None = None
    detail: str = ""
    message_id: str | None = None
    retry_after: float | None = None
    account_cause: str | None = None  # with "account_refused": a pipeline.errors.ACCOUNT_CAUSES cause

    def entry(self, by: str, owner: str, recipient: str) -> dict[str, Any]:
        """The journal's record of this attempt (the number it went to masked; details too)."""
        entry: dict[str, Any] = {
            "at": iso(self.started_at),
            "outcome": self.kind,
            "by": by,
            "owner": owner,
            "to": mask_phone(recipient),
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
        if refusal.account is not None:
            kind = "account_refused"
        if refusal.opted_out:
            kind = "opted_out"
        return AttemptOutcome(
            kind,
            started,
            clock.now(),
            refusal.code,
            refusal.detail,
            retry_after=refusal.retry_after,
            account_cause=refusal.account,
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
    entry = outcome.entry(by, record.lease_owner or "", record.recipient)
    if outcome.kind == "accepted":
        return Finish(State.ACCEPTED, entry, outcome.answered_at, message_id=outcome.message_id)
    if outcome.kind == "account_refused":
        return Finish(State.PENDING, entry, outcome.answered_at, paused_cause=outcome.account_cause)
    if outcome.kind == "unknown":
        return Finish(State.UNKNOWN, entry)
    if outcome.kind == "opted_out":
        return _suppressed(entry, outcome)
    if outcome.kind == "refused_permanently":
        reason = f"gateway refused the SMS for good ({outcome.code})"
        return Finish(State.FAILED, entry, outcome.answered_at, failure_reason=reason)
    if record.attempts_this_round >= settings.max_attempts:
        reason = f"gateway refused the SMS {record.attempts_this_round} times, last with {outcome.code}"
        return Finish(State.FAILED, entry, outcome.answered_at, failure_reason=reason, retryable=True)
    # Only the delays: the journal bounds attempts itself (settings.max_attempts, above).
    policy = RetryPolicy(
        base_delay_seconds=settings.retry_base_seconds, max_delay_seconds=settings.retry_max_seconds
    )
    delay = max(backoff_seconds(policy, record.attempts_this_round), math.ceil(outcome.retry_after or 0))
    return Finish(State.PENDING, entry, outcome.answered_at, next_attempt_at=now + timedelta(seconds=delay))


def _suppressed(entry: dict[str, Any], outcome: AttemptOutcome) -> Finish:
    """The gateway's own opt-out list refused the number: an end, never retried, never a DLQ entry."""
    reason = f"the number opted out at the gateway ({outcome.code})"
    return Finish(State.SUPPRESSED, entry, outcome.answered_at, failure_reason=reason)


def _counting_operator_resends(finish: Finish, record: Notification, outcome: AttemptOutcome) -> Finish:
    """An operator's resend that may have reached the gateway counts as the one resend, whoever
    carries it out (the reconciler, or a worker with a live redelivery that claimed it first),
    so if it ends unknown again the reconciler does not resend it on its own."""
    requested = record.resend_requested_at is not None
    return replace(finish, counts_as_resend=requested and outcome.kind in ("accepted", "unknown"))


def after_worker_attempt(
    settings: SmsSettings, record: Notification, outcome: AttemptOutcome, now: datetime
) -> Finish:
    finish = _after_attempt(settings, record, outcome, now, "worker")
    return _counting_operator_resends(finish, record, outcome)


def after_reconciler_send(
    settings: SmsSettings, record: Notification, outcome: AttemptOutcome, now: datetime
) -> Finish:
    """A `pending` record the reconciler sent (an operator asked, or its SQS message is gone)."""
    finish = _after_attempt(settings, record, outcome, now, "reconciler")
    return _counting_operator_resends(finish, record, outcome)


def after_reconciler_resend(
    settings: SmsSettings, record: Notification, outcome: AttemptOutcome, now: datetime
) -> Finish:
    """A resend of a proven-not-received SMS: used up only if it may have reached the gateway."""
    entry = outcome.entry("reconciler", record.lease_owner or "", record.recipient)
    if outcome.kind == "accepted":
        return Finish(State.ACCEPTED, entry, outcome.answered_at, outcome.message_id, counts_as_resend=True)
    if outcome.kind == "opted_out":
        return _suppressed(entry, outcome)
    if outcome.kind == "refused_permanently":
        reason = f"gateway refused the resend for good ({outcome.code})"
        return Finish(State.FAILED, entry, outcome.answered_at, failure_reason=reason)
    if outcome.kind == "account_refused":  # nothing sent, nothing used up: a later run tries again
        return Finish(State.UNKNOWN, entry, outcome.answered_at, paused_cause=outcome.account_cause)
    # Unknown again (counted: no second resend), or refused for now (nothing sent: next run).
    return Finish(State.UNKNOWN, entry, outcome.answered_at, counts_as_resend=outcome.kind == "unknown")


def send_once(
    runtime: SmsRuntime, record: Notification, owner: str, decide: Decide
) -> tuple[AttemptOutcome, Finish, Notification | None]:
    """One gateway call for a record this caller has claimed, and its outcome saved."""
    ttl = time_to_live(runtime.rules, record, runtime.clock.now())
    outcome = call_gateway(
        runtime.gateway, OutgoingSms(record.key, record.recipient, record.body, ttl), runtime.clock
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
    metric = (
        "SmsAccountRefused"
        if finish.paused_cause
        else {
            State.ACCEPTED: "SmsAccepted",
            State.PENDING: "SmsRefused",
            State.FAILED: "SmsFailed",
            State.UNKNOWN: "SmsUnknown",
            **CLOSING_METRICS,
        }.get(finish.state)
    )
    if metric:
        metrics.add_metric(name=metric, unit=MetricUnit.Count, value=1)
    return outcome, finish, saved


# -- the consumer ---------------------------------------------------------------------------------
def parse(envelope: Envelope) -> CrmEvent | str:
    """The CRM order event in the envelope, or why this event is none of the sms consumer's."""
    if envelope.type != ORDER_STATUS_CHANGED:
        return f"event type {envelope.type!r} sends no SMS"
    try:
        return CrmEvent.parse(envelope.payload)
    except Invalid as error:
        # Field locations only: the input (a phone number) must not reach logs or the DLQ reason.
        fields = ", ".join(error.field_names(whole="payload"))
        raise PermanentError(f"invalid CRM order event ({fields})") from None


def move_of(envelope: Envelope, event: CrmEvent) -> Move:
    return Move(
        order_key=event.order_key,
        status=event.order.status,
        previous_status=event.order.previous_status,
        occurred_at=event.occurred_at,
        received_at=envelope.received_at,
        transition_ref=event.order.transition_id,
    )


def key_for(event: CrmEvent, opened_by: str | None) -> str:
    """The key of the notification of the entry the move `opened_by` (an identity) started."""
    assert opened_by is not None, event.order_key
    return notification_key(event.type, event.order_key, opened_by, CHANNEL)


class NoRule(str):
    """`plan`'s reason when no rule matches the status entered: logged and counted (`SmsNoRule`)."""

    __slots__ = ()


def plan(envelope: Envelope, observation: Observation, event: CrmEvent, rules: SmsRules) -> Draft | str:
    """The notification a new status entry calls for, or why there is none."""
    rule = rules.rule_for(observation.status, observation.previous_status)
    if rule is None:
        return NoRule(f"no SMS rule for status {observation.status!r}")
    body, language = rules.text_for(rule, event)
    return Draft(
        key=key_for(event, observation.opened_by),
        event_type=event.type,
        order_id=event.order_key,
        transition=observation.opened_by or "",
        crm_event_id=event.event_id,
        channel=CHANNEL,
        recipient=event.customer.phone,
        body=body,
        language=language,
        rule=rule.name,
        order_status=observation.status,
        previous_status=observation.previous_status,
        occurred_at=event.occurred_at,
        received_at=envelope.received_at,
        correlation_id=envelope.correlation_id,
    )


def _no_sms(reason: str, **extra: Any) -> dict[str, Any]:
    logger.info("No SMS for this event", extra={"reason": reason, **extra})
    return {"sent": False, "reason": reason}


# Observations that send nothing, and what each is counted as (each is logged with its reason).
_NOTHING_TO_SEND = {
    "stale": ("SmsStaleEvents", "Stale order event: the order has moved on, no SMS"),
    "seen": ("SmsMovesSeenBefore", "Order move already seen: no SMS"),
    "resave": ("SmsResaves", "Order re-saved without a move: no SMS"),
}


def _correct_recipient(
    current: SmsRuntime, record: Notification, event: CrmEvent, observation: Observation
) -> Notification:
    """A later word on the entry with another phone: the notification goes to the corrected
    number, if nothing was sent to the old one yet (the journal decides, atomically)."""
    if not observation.latest or event.customer.phone == record.recipient:
        return record
    rule = current.rules.rule_for(observation.status, record.previous_status)
    body = current.rules.text_for(rule, event)[0] if rule is not None else record.body
    # Refused at every attempt (an invalid number): the old number never got it, so the corrected
    # one is sent it once. Anything that may have been taken (accepted, unknown) never is again.
    refused_only = record.state is State.FAILED and record.never_taken and record.abandoned_at is None
    changed = current.journal.change_recipient(
        record.key,
        recipient=event.customer.phone,
        body=body,
        note={
            "change": "recipient",
            "from": mask_phone(record.recipient),
            "to": mask_phone(event.customer.phone),
            "crm_event_id": event.event_id,
        },
        reopen=record if refused_only else None,
    )
    if changed is None:
        return record
    metrics.add_metric(name="SmsRecipientCorrected", unit=MetricUnit.Count, value=1)
    if refused_only:
        metrics.add_metric(name="SmsReopened", unit=MetricUnit.Count, value=1)
    logger.warning(
        "Customer phone corrected in the CRM: the SMS goes to the new number",
        extra={
            "notification_key": record.key,
            "state": changed.state.value,
            "recipient": mask_phone(event.customer.phone),
        },
    )
    return changed


def _supersede_previous(current: SmsRuntime, event: CrmEvent, left: OrderState) -> None:
    """The order entered a newer status: the notification of the entry it left, if still `pending`
    (refused for now, its account refused and its message paused), is superseded, whichever
    message would have driven it (issue 39: a paused repeat of the entry, handled after the
    order moved on, names no record, and the record stayed `pending`)."""
    record = current.journal.get(key_for(event, left.opened_by))
    if record is not None and record.state is State.PENDING:
        held = Hold(State.SUPERSEDED, f"the order moved on to {event.order.status!r} before it was sent")
        close(current, record, held, "newer status")


def send_notification(envelope: Envelope) -> dict[str, Any]:
    """`process` of the sms consumer (see the module docstring)."""
    current = runtime()
    event = parse(envelope)
    if isinstance(event, str):
        return _no_sms(event)
    move = move_of(envelope, event)
    for _ in range(3):
        state = current.journal.get_order(move.order_key)
        observation = observe(state, move)
        log_keys = {"order": move.order_key, "status": move.status, "entry": observation.entry}
        if observation.clamped:
            metrics.add_metric(name="SmsClockSkewClamped", unit=MetricUnit.Count, value=1)
            logger.warning(
                "Order event stamped after it was received: placed at its receipt",
                extra={
                    **log_keys,
                    "occurred_at": iso(move.occurred_at),
                    "received_at": iso(move.received_at),
                },
            )
        draft = plan(envelope, observation, event, current.rules) if observation.kind == "entered" else None
        due = draft if isinstance(draft, Draft) else None
        if observation.new_state is not None and not current.journal.record_entry(
            observation.new_state, state.version if state else None, due
        ):
            continue  # another event of this order was saved meanwhile: decide again
        if observation.kind == "entered" and state is not None:
            _supersede_previous(current, event, state)
        if observation.kind in _NOTHING_TO_SEND:
            metric, message = _NOTHING_TO_SEND[observation.kind]
            metrics.add_metric(name=metric, unit=MetricUnit.Count, value=1)
            log = logger.warning if observation.kind == "stale" else logger.info
            log(message, extra={**log_keys, "reason": observation.reason})
            # A redelivery of a move that started an entry since left (its worker died after
            # recording it): its notification is still this message's to finish, not a new one.
            own = current.journal.get(key_for(event, move.identity)) if observation.kind == "seen" else None
            if own is not None:
                return _drive(current, own.key, own)
            return {"sent": False, "reason": f"{observation.kind}: {observation.reason}"}
        if isinstance(draft, str):
            if isinstance(draft, NoRule):
                metrics.add_metric(name="SmsNoRule", unit=MetricUnit.Count, value=1)
            return _no_sms(draft, **log_keys)
        key = draft.key if draft is not None else key_for(event, observation.opened_by)
        known = current.journal.get(key) if draft is None else None
        if draft is None and known is None:
            reason = f"{observation.reason}; no SMS was due for that entry"
            return _no_sms(reason, **log_keys)
        if known is not None:
            known = _correct_recipient(current, known, event, observation)
            if refused_for_good(known) and known.recipient == event.customer.phone:
                asked = ask_crm_to_look(current.clock.now(), known, event, envelope)
                if asked is not None:
                    return asked
        logger.info(
            "SMS notification recorded" if draft is not None else "SMS notification already known",
            extra={
                **log_keys,
                "notification_key": key,
                "recipient": mask_phone(event.customer.phone),
                "transition": observation.reason,
                # CRM -> webhook delay; the queue and gateway delays follow in the attempt's log.
                "crm_delay_ms": _ms(envelope.received_at - event.occurred_at),
            },
        )
        return _drive(current, key, known)
    raise TransientError("the order's state kept changing; will look again")


def close(current: SmsRuntime, record: Notification, held: Hold, by: str) -> Notification | None:
    """End a `pending` record unsent (`pipeline.sms.endstates`), counted; None if it left `pending`."""
    assert held.state is not None
    closed = current.journal.close(record.key, held.state, reason=held.reason, by=by)
    if closed is not None:
        metrics.add_metric(name=CLOSING_METRICS[held.state], unit=MetricUnit.Count, value=1)
        logger.warning(f"SMS not sent: {held.state.value}", extra=held.log_keys(record))
    return closed


def _until(moment: datetime, now: datetime) -> int:
    return max(1, math.ceil((moment - now).total_seconds()))


def _drive(current: SmsRuntime, key: str, just_read: Notification | None = None) -> dict[str, Any]:
    """Act on the record's state (`just_read`: the record, if the caller has just read it);
    re-read after losing a race, a few times at most."""
    for _ in range(3):
        record, just_read = just_read or current.journal.get(key), None
        if record is None:
            raise TransientError("SMS journal record not readable yet")
        now = current.clock.now()
        if record.state is State.PENDING:
            if record.next_attempt_at is not None and record.next_attempt_at > now:
                raise TransientError("next SMS attempt not due yet", _until(record.next_attempt_at, now))
            held = hold(current.journal, current.rules, current.settings, record, now)
            if held is not None:
                if held.state is None:
                    metrics.add_metric(name=QUIET_METRIC, unit=MetricUnit.Count, value=1)
                    logger.info("SMS waits for the recipient's quiet hours", extra=held.log_keys(record))
                    # Back in the queue (SQS's longest delay at most), checked again then: durable.
                    raise HandedBack(f"SMS waits: {held.reason}", min(held.wait_seconds, PAUSE_SECONDS))
                close(current, record, held, "worker")
                continue
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
            if record.abandoned_at is not None:
                logger.info("SMS abandoned by an operator: not sent", extra={"notification_key": key})
                return _result(record)
            if not (record.failed_retryable and record.never_taken):
                raise PermanentError(
                    f"{record.failure_reason or 'SMS notification failed earlier'}; decide with"
                    f" `python -m ops journal resolve {key} --not-sent` (send once) or `--abandon`"
                )
            # A redelivery (a DLQ redrive after the cause was fixed, or SQS's own duplicate) of a
            # notification whose attempts all were refused: nothing reached the gateway, so it
            # is sent once more, through the same claim (of two redeliveries, one reopens it).
            if current.journal.reopen(key, seen_since=record.state_since, by="redelivery"):
                metrics.add_metric(name="SmsReopened", unit=MetricUnit.Count, value=1)
                logger.warning(
                    "Failed SMS redelivered: no attempt was taken, sending it once more",
                    extra={"notification_key": key, "recipient": mask_phone(record.recipient)},
                )
            continue
        # accepted: done; unknown: the reconciler's, never a blind resend.
        logger.info("SMS not sent again", extra={"notification_key": key, "state": record.state.value})
        return _result(record)
    raise TransientError("SMS journal record kept changing; will look again")


def _attempt(current: SmsRuntime, record: Notification, owner: str) -> dict[str, Any]:
    _, finish, saved = send_once(current, record, owner, after_worker_attempt)
    if saved is None:
        return {"key": record.key, "state": "taken_over"}
    if finish.paused_cause is not None:
        # The worker pauses the message (`pipeline.worker`); the record waits, its attempt given back.
        code = finish.attempt.get("error_code")
        raise AccountRefused(f"the SMS gateway refused the account ({code})", finish.paused_cause)
    if finish.state is State.PENDING:
        assert finish.next_attempt_at is not None
        attempts = f"{record.attempts_this_round} of {current.settings.max_attempts}"
        reason = f"gateway refused the SMS for now (attempt {attempts})"
        raise TransientError(reason, _until(finish.next_attempt_at, current.clock.now()))
    if finish.state is State.FAILED:
        raise PermanentError(finish.failure_reason or "SMS failed")
    return _result(saved)


def _result(record: Notification) -> dict[str, Any]:
    return {"key": record.key, "state": record.state.value, "message_id": record.message_id}
