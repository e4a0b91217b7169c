"""The scheduled reconciler: settle `unknown` SMS outcomes by asking, never by guessing.

Each run (EventBridge schedule, `reconciler.app.lambda_handler`):

1. `sending` records whose lease ran out (their worker died and no redelivery came) become
   `unknown`;
2. `unknown` records, `reconcile_batch_size` a run, taking turns (GSI `by_state`, no scan, and a
   cursor: each run goes on where the last stopped, so every unknown is looked at within
   ceil(unknowns / batch size) runs, however the ones before it fare; one whose lookup raises is
   logged and counted, `errors`, and the run goes on):
   - evidence already in the record (a delivery event, a late gateway answer) -> `accepted`;
   - the gateway, asked by client reference (the key) or message id, has it -> `accepted`;
   - the gateway proves it never got it (not found, asked at least `lookup_settle_seconds` after
     the record became unknown, so a request still in flight cannot land later) -> resent once,
     with the same key, after claiming the record atomically (recorded like any other attempt);
   - otherwise it stays `unknown`. Those past the deadline are left for a person (metric
     `SmsUnknownPastDeadline`, a warning log), never resent automatically and never looked at
     in the batch (`reconcile_batch_size`), so they cannot starve newer unknowns;
3. `pending` records no SQS message will bring back, sent once with the same key through the
   same atomic claim as a worker's (so a still-live redelivery and the reconciler never both
   send): those an operator asked to resend (`python -m ops journal resolve <key> --not-sent`),
   as soon as they are due, and orphans, whose attempt has been due for longer than a live SQS
   message could take to come back (`redelivery_horizon`); one whose last claim the gateway
   refused for the account (`paused_at`) only once its paused message, too, could have come
   back (`pause_seconds` later): the account is a person's to fix, and the message sends it;
   before the claim, what a worker checks (`pipeline.sms.endstates`): a record superseded,
   expired or suppressed ends so, unsent; one in the recipient's quiet hours waits;
4. gauges on every run: `SmsUnknownCount` and `SmsUnknownOldestAgeSeconds`.

What the reconciler leaves to a person is decided with the ops CLI: `python -m ops journal
unknown` lists it, `python -m ops journal resolve` records the decision.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Literal

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from pipeline.observability import mask_phone
from pipeline.pause import pause_seconds
from pipeline.registry import Consumer, by_name
from pipeline.sms.endstates import hold
from pipeline.sms.gateways import LookupStatus
from pipeline.sms.journal import Notification, State
from pipeline.sms.service import (
    SmsRuntime,
    after_reconciler_resend,
    after_reconciler_send,
    close,
    runtime,
    send_once,
)

logger = Logger(child=True)
metrics = Metrics()

# "Proven not received" earns one resend; a second unknown is a person's call.
MAX_RESENDS = 1

Resolution = Literal["accepted", "resent", "unresolved"]
PendingReason = Literal["requested", "orphaned"]


@dataclass
class ReconcileReport:
    leases_expired: int = 0
    checked: int = 0
    accepted: int = 0
    resent: int = 0
    unresolved: int = 0
    errors: int = 0
    past_deadline: int = 0
    requested: int = 0
    orphaned: int = 0
    unknown_count: int = 0
    oldest_unknown_age_seconds: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def redelivery_horizon(consumer: Consumer) -> timedelta:
    """How long after a `pending` record's attempt fell due its SQS message, if it still
    exists, has come back: the worker delays a retry until the attempt is due, a retry delay is
    at most `max_delay_seconds`, and a crashed invocation's message reappears after the
    visibility timeout.
    """
    return timedelta(seconds=consumer.visibility_timeout_seconds + consumer.retry.max_delay_seconds)


def _log_keys(record: Notification) -> dict[str, object]:
    return {"notification_key": record.key, "recipient": mask_phone(record.recipient)}


def reconcile_one(current: SmsRuntime, record: Notification) -> Resolution:
    """Settle one `unknown` record as far as the evidence allows."""
    journal, now = current.journal, current.clock.now()
    if (record.delivery_status or record.message_id) and journal.resolve_accepted(
        record.key, via="evidence", message_id=record.message_id
    ):
        logger.info("SMS unknown resolved by recorded evidence", extra=_log_keys(record))
        return "accepted"
    lookup = current.gateway.lookup(record.key, record.message_id)
    if lookup.status is LookupStatus.FOUND:
        if journal.resolve_accepted(record.key, via="lookup", message_id=lookup.message_id):
            logger.info("SMS unknown resolved: the gateway has it", extra=_log_keys(record))
            return "accepted"
        return "unresolved"
    unknown_since = record.unknown_since or record.state_since
    if now - unknown_since >= current.settings.reconcile_deadline:
        # It crossed the deadline during this run: counted with the others on the next one.
        return "unresolved"
    settled = now - unknown_since >= timedelta(seconds=current.settings.lookup_settle_seconds)
    if lookup.status is LookupStatus.NOT_FOUND and settled and record.reconcile_resends < MAX_RESENDS:
        owner = f"reconciler-{uuid.uuid4()}"
        claimed = journal.claim(record.key, owner, from_states=(State.UNKNOWN,), max_resends=MAX_RESENDS)
        if claimed is not None:
            logger.info("SMS proven not received: resending once with the same key", extra=_log_keys(record))
            send_once(current, claimed, owner, after_reconciler_resend)
            return "resent"
    return "unresolved"


def pending_reason(
    record: Notification, now: datetime, horizon: timedelta, paused_for: timedelta = timedelta(0)
) -> PendingReason | None:
    """Why the reconciler must send this `pending` record now; None while it is its SQS message's
    (`paused_for`: how long a message paused for an account refusal stays away)."""
    due_at = record.next_attempt_at or record.state_since
    if record.paused_at is not None:
        due_at = max(due_at, record.paused_at + paused_for)
    if due_at > now:
        return None
    if record.resend_requested_at is not None:
        return "requested"
    return "orphaned" if now - due_at >= horizon else None


def send_pending(current: SmsRuntime, record: Notification, horizon: timedelta) -> PendingReason | None:
    """Send one due `pending` record once, if the claim is ours; what it was, or None if left alone.

    The claim holds only if the record has not changed since it was read: a worker that took it
    meanwhile (a live redelivery) wins, and this run leaves it.
    """
    paused_for = timedelta(seconds=pause_seconds(by_name("sms")))
    reason = pending_reason(record, current.clock.now(), horizon, paused_for)
    if reason is None:
        return None
    # Judged as a worker judges it (`pipeline.sms.endstates`): ended unsent, or left for later.
    held = hold(current.journal, current.rules, current.settings, record, current.clock.now())
    if held is not None:
        if held.state is not None:
            close(current, record, held, "reconciler")
        return None
    owner = f"reconciler-{uuid.uuid4()}"
    claimed = current.journal.claim(
        record.key, owner, from_states=(State.PENDING,), unchanged_since=record.state_since
    )
    if claimed is None:
        return None
    if reason == "requested":
        logger.info(
            "SMS resend requested by an operator: sending once with the same key", extra=_log_keys(record)
        )
    else:
        logger.warning(
            "SMS pending with no SQS message left to send it: sending once with the same key",
            extra=_log_keys(record),
        )
    send_once(current, claimed, owner, after_reconciler_send)
    return reason


def reconcile(current: SmsRuntime | None = None) -> ReconcileReport:
    current = current or runtime()
    journal, limit = current.journal, current.settings.reconcile_batch_size
    report = ReconcileReport()
    now = current.clock.now()
    for record in journal.records_in_state(State.SENDING, limit):
        if (
            record.lease_expires_at is not None
            and record.lease_expires_at <= now
            and journal.expire_lease(record.key, record.lease_owner or "", note="reconciler")
        ):
            report.leases_expired += 1
            logger.warning("SMS worker died while sending: outcome unknown", extra=_log_keys(record))
    # Unknowns past the deadline wait for a person: counted, never in the batch, so however many
    # there are, newer unknowns are still looked up and resolved on every run.
    deadline_cutoff = now - current.settings.reconcile_deadline
    report.past_deadline = journal.count_in_state(State.UNKNOWN, not_newer_than=deadline_cutoff)
    if report.past_deadline:
        oldest_waiting = next(journal.keys_in_state(State.UNKNOWN, limit=1), None)
        logger.warning(
            "SMS outcomes still unknown past the deadline: a person must decide",
            extra={
                "count": report.past_deadline,
                "oldest_notification_key": oldest_waiting[0] if oldest_waiting else None,
                "decide_with": "python -m ops journal unknown; python -m ops journal resolve <key>",
            },
        )
    for record in journal.records_in_turn(State.UNKNOWN, limit, newer_than=deadline_cutoff):
        report.checked += 1
        try:
            resolution = reconcile_one(current, record)
        except Exception as error:  # one record's failing lookup never stops the others
            report.errors += 1
            logger.exception(
                "SMS reconciliation of one record failed: next in turn",
                extra={**_log_keys(record), "error_type": type(error).__name__},
            )
            continue
        setattr(report, resolution, getattr(report, resolution) + 1)
    horizon = redelivery_horizon(by_name("sms"))
    for record in journal.records_in_state(State.PENDING, limit):
        sent = send_pending(current, record, horizon)
        if sent is not None:
            setattr(report, sent, getattr(report, sent) + 1)
    report.unknown_count = journal.count_in_state(State.UNKNOWN)
    oldest = next(journal.keys_in_state(State.UNKNOWN, limit=1), None)
    if oldest is not None:
        report.oldest_unknown_age_seconds = max(0, int((current.clock.now() - oldest[1]).total_seconds()))
    metrics.add_metric(name="SmsUnknownCount", unit=MetricUnit.Count, value=report.unknown_count)
    metrics.add_metric(
        name="SmsUnknownOldestAgeSeconds", unit=MetricUnit.Seconds, value=report.oldest_unknown_age_seconds
    )
    metrics.add_metric(name="SmsUnknownPastDeadline", unit=MetricUnit.Count, value=report.past_deadline)
    # A lookup that raises leaves its unknown to the age alarms; counted so a broken lookup shows.
    metrics.add_metric(name="SmsReconcileErrors", unit=MetricUnit.Count, value=report.errors)
    metrics.add_metric(name="SmsReconciledAccepted", unit=MetricUnit.Count, value=report.accepted)
    metrics.add_metric(name="SmsReconcileResent", unit=MetricUnit.Count, value=report.resent)
    metrics.add_metric(name="SmsReconcileRequestedSent", unit=MetricUnit.Count, value=report.requested)
    metrics.add_metric(name="SmsReconcileOrphansSent", unit=MetricUnit.Count, value=report.orphaned)
    logger.info("SMS reconciliation finished", extra=report.as_dict())
    return report
