"""The scheduled reconciler: settle `unknown` SMS outcomes by asking, never by guessing.

Each run (EventBridge schedule, `reconciler.app.lambda_handler`):

1. `sending` records whose lease ran out (their worker died and no redelivery came) become
   `unknown`;
2. each `unknown` record, oldest first (GSI `by_state`, no scan):
   - evidence already in the record (a delivery event, a late gateway answer) -> `accepted`;
   - the gateway, asked by client reference (the key) or message id, has it -> `accepted`;
   - the gateway proves it never got it -> resent once, with the same key, after claiming the
     record atomically (the attempt is recorded like any other);
   - otherwise it stays `unknown`; past the deadline it is left for a person
     (metric `SmsUnknownPastDeadline`, a warning log) and never resent automatically;
3. gauges on every run: `SmsUnknownCount` and `SmsUnknownOldestAgeSeconds`.

`python -m pipeline.sms.reconcile` is the operator's tool for what the reconciler leaves
(see `main`).
"""

from __future__ import annotations

import argparse
import uuid
from dataclasses import asdict, dataclass
from typing import Literal

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from pipeline.observability import mask_phone
from pipeline.sms.gateways import LookupStatus
from pipeline.sms.journal import Notification, State
from pipeline.sms.service import SmsRuntime, after_reconciler_resend, runtime, send_once

logger = Logger(child=True)
metrics = Metrics()

# "Proven not received" earns one resend; a second unknown is a person's call.
MAX_RESENDS = 1

Resolution = Literal["accepted", "resent", "unresolved", "past_deadline"]


@dataclass
class ReconcileReport:
    leases_expired: int = 0
    checked: int = 0
    accepted: int = 0
    resent: int = 0
    unresolved: int = 0
    past_deadline: int = 0
    unknown_count: int = 0
    oldest_unknown_age_seconds: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


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
        logger.warning(
            "SMS outcome still unknown past the deadline: a person must decide",
            extra={
                **_log_keys(record),
                "unknown_since": unknown_since.isoformat(),
                "lookup": lookup.status.value,
            },
        )
        return "past_deadline"
    if lookup.status is LookupStatus.NOT_FOUND and record.reconcile_resends < MAX_RESENDS:
        owner = f"reconciler-{uuid.uuid4()}"
        claimed = journal.claim(record.key, owner, from_states=(State.UNKNOWN,), max_resends=MAX_RESENDS)
        if claimed is not None:
            logger.info("SMS proven not received: resending once with the same key", extra=_log_keys(record))
            send_once(current, claimed, owner, after_reconciler_resend)
            return "resent"
    return "unresolved"


def reconcile(current: SmsRuntime | None = None) -> ReconcileReport:
    current = current or runtime()
    journal, limit = current.journal, current.settings.reconcile_batch_size
    report = ReconcileReport()
    now = current.clock.now()
    for key, _ in list(journal.keys_in_state(State.SENDING, limit)):
        record = journal.get(key)
        if (
            record is not None
            and record.state is State.SENDING
            and record.lease_expires_at is not None
            and record.lease_expires_at <= now
            and journal.expire_lease(key, record.lease_owner or "", note="reconciler")
        ):
            report.leases_expired += 1
            logger.warning("SMS worker died while sending: outcome unknown", extra=_log_keys(record))
    for key, _ in list(journal.keys_in_state(State.UNKNOWN, limit)):
        record = journal.get(key)
        if record is None or record.state is not State.UNKNOWN:
            continue
        report.checked += 1
        resolution = reconcile_one(current, record)
        setattr(report, resolution, getattr(report, resolution) + 1)
    report.unknown_count = journal.count_in_state(State.UNKNOWN)
    oldest = next(journal.keys_in_state(State.UNKNOWN, limit=1), None)
    if oldest is not None:
        report.oldest_unknown_age_seconds = max(0, int((current.clock.now() - oldest[1]).total_seconds()))
    metrics.add_metric(name="SmsUnknownCount", unit=MetricUnit.Count, value=report.unknown_count)
    metrics.add_metric(
        name="SmsUnknownOldestAgeSeconds", unit=MetricUnit.Seconds, value=report.oldest_unknown_age_seconds
    )
    metrics.add_metric(name="SmsUnknownPastDeadline", unit=MetricUnit.Count, value=report.past_deadline)
    metrics.add_metric(name="SmsReconciledAccepted", unit=MetricUnit.Count, value=report.accepted)
    metrics.add_metric(name="SmsReconcileResent", unit=MetricUnit.Count, value=report.resent)
    logger.info("SMS reconciliation finished", extra=report.as_dict())
    return report


# -- the operator's tool ----------------------------------------------------------------------------
def resolve_by_operator(current: SmsRuntime, key: str, action: Literal["accepted", "resend"]) -> str:
    """A person's decision on an `unknown` (or `failed`) notification; returns the new state.

    "accepted": the customer got it (checked on the gateway's console or with the customer).
    "resend": it certainly did not arrive; send it once more with the same key, recorded.
    """
    if action == "accepted":
        resolved = current.journal.resolve_accepted(key, via="operator")
        if resolved is None:
            raise ValueError("only an unknown notification can be marked accepted")
        return resolved.state.value
    owner = f"operator-{uuid.uuid4()}"
    claimed = current.journal.claim(key, owner, from_states=(State.UNKNOWN, State.FAILED))
    if claimed is None:
        raise ValueError("only an unknown or failed notification can be resent")
    _, finish, _ = send_once(current, claimed, owner, after_reconciler_resend)
    return finish.state.value


def main(argv: list[str] | None = None) -> None:
    """`python -m pipeline.sms.reconcile list | accepted <key> | resend <key>` (JOURNAL_TABLE etc. set)."""
    parser = argparse.ArgumentParser(prog="python -m pipeline.sms.reconcile", description=__doc__)
    parser.add_argument("action", choices=["list", "accepted", "resend"])
    parser.add_argument("key", nargs="?")
    args = parser.parse_args(argv)
    current = runtime()
    if args.action == "list":
        now = current.clock.now()
        for state in (State.UNKNOWN, State.FAILED, State.SENDING, State.PENDING):
            for key, since in current.journal.keys_in_state(state):
                record = current.journal.get(key)
                phone = mask_phone(record.recipient) if record else "?"
                print(f"{state.value:8} {key} {phone} {int((now - since).total_seconds())}s")
        return
    if not args.key:
        parser.error("a notification key is needed")
    print(resolve_by_operator(current, args.key, args.action))


if __name__ == "__main__":
    main()
