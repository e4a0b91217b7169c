"""An SMS journal record as stored and read back (`pipeline.sms.journal` writes it): its key,
its states, what a worker drafts before any gateway call (`Draft`), the record read back
(`Notification`), how an attempt ends (`Finish`), and the reconciler's cursor.

Apart from the journal's writes so that readers (the ops CLI, the reconciler's checks, the chaos
campaign's invariants) and the writes share one definition of the stored format
(`pipeline.formats`: `sms_notification`, `sms_reconcile_cursor`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from pipeline.formats import by_name
from pipeline.sms.clock import parse_iso

KEY_PREFIX = "sms#"
# The reconciler's place in its round of a state's records (`records_in_turn`).
CURSOR_PREFIX = "sms-reconcile-cursor#"
# The notification's and the reconciler's cursor's formats (`pipeline.formats`).
FORMAT = by_name("sms_notification")
CURSOR = by_name("sms_reconcile_cursor")
BY_STATE_INDEX = "by_state"


class State(StrEnum):
    PENDING = "pending"  # recorded, not being sent (first try, or after a definite refusal)
    SENDING = "sending"  # claimed by one worker, under a lease
    ACCEPTED = "accepted"  # the gateway took it (delivery is tracked separately)
    FAILED = "failed"  # refused for good, or refused until attempts ran out
    UNKNOWN = "unknown"  # may or may not have been taken: reconcile, never resend blindly
    # Closed without a send, each an outcome, not a loss (`pipeline.sms.endstates`):
    SUPPRESSED = "suppressed"  # the number opted out (STOP): never sent, never retried
    EXPIRED = "expired"  # older than its rule's maximum age at send time: its news is stale
    SUPERSEDED = "superseded"  # the order entered a newer status before it went out


INDEXED_STATES = frozenset({State.PENDING, State.SENDING, State.UNKNOWN, State.FAILED})
# What a delivery event (proof the gateway took the SMS) closes as `accepted`: all but `sending`,
# whose owner saves its own outcome (the event is kept, and the record is never claimed again).
EVIDENCE_CLOSES = (State.PENDING, State.UNKNOWN, State.FAILED)
# Where a phone corrected in the CRM still reaches the notification: nothing is in flight and
# nothing was accepted (a resend, by the reconciler or an operator, goes to the new number).
RECIPIENT_CHANGEABLE = (State.PENDING, State.UNKNOWN, State.FAILED)
# Attempt outcomes that prove the gateway did not take the message.
REFUSALS = frozenset({"refused", "refused_permanently", "account_refused", "opted_out"})


def notification_key(event_type: str, order_key: str, transition: str, channel: str) -> str:
    """The permanent key of one notification: what happened, to which order, which move, how.

    The move is the one that started the order's status entry (`pipeline.sms.orders`: the CRM's
    transition id, or the move's own stamp and statuses), never a counter or a CRM delivery id:
    the same move resent under any id is the same key, a second real trip through a status is a
    new one, and an order's history expiring cannot make a new move reuse an old key. The order
    is qualified by its CRM (`bitrix24:42`). The recipient is not part of it: a phone corrected in
    the CRM before the SMS went out is the same notification, sent once, to the corrected number.
    Hashed, so the key is short enough for a gateway's client reference.
    """
    canonical = json.dumps([event_type, order_key, transition, channel], ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class Draft:
    """Everything known about a notification before any gateway call."""

    key: str
    event_type: str
    order_id: str  # source-qualified (`bitrix24:42`)
    transition: str  # the identity of the move that started the entry (see `notification_key`)
    crm_event_id: str  # the CRM's id of the event that entered the status (for tracing only)
    channel: str
    recipient: str
    body: str
    rule: str
    order_status: str
    previous_status: str | None
    occurred_at: datetime
    received_at: datetime
    correlation_id: str
    language: str | None = None  # the text's language (`SmsRules.language_for`)


def _time(item: Mapping[str, Any], name: str) -> datetime | None:
    value = item.get(name)
    return parse_iso(value) if isinstance(value, str) else None


def _int(item: Mapping[str, Any], name: str) -> int:
    value = item.get(name, 0)
    return int(value) if isinstance(value, int | Decimal) else 0


@dataclass(frozen=True)
class Notification:
    """A journal record as read back (a consistent read)."""

    key: str
    state: State
    state_since: datetime
    recipient: str
    body: str
    attempt_count: int
    reconcile_resends: int
    attempts: tuple[dict[str, Any], ...]
    lease_owner: str | None
    lease_expires_at: datetime | None
    next_attempt_at: datetime | None
    unknown_since: datetime | None
    message_id: str | None
    delivery_status: str | None
    failure_reason: str | None
    received_at: datetime | None
    resend_requested_at: datetime | None
    # Attempts made before the latest `reopen`: the attempt budget counts from here.
    round_start: int = 0
    # A `failed` that ran out of attempts (a redelivery may reopen it), not refused for good.
    failed_retryable: bool = False
    abandoned_at: datetime | None = None
    previous_status: str | None = None  # the status the order left for the notified entry
    order_id: str | None = None  # qualified by its CRM: `bitrix24:42`, `crm:A-1042`
    order_status: str | None = None  # the status entered, which the SMS tells
    # When its last claim ended in the gateway refusing the account (its message is paused).
    paused_at: datetime | None = None
    # The move that started the entry (names it), its CRM stamp, and the rule that made it.
    transition: str | None = None
    occurred_at: datetime | None = None
    rule: str | None = None
    # The billed parts of `body` and their encoding (`pipeline.sms.encoding`; None: a record of
    # before they were recorded, counted from `body` by whoever needs them).
    parts: int | None = None
    encoding: str | None = None

    @property
    def attempts_this_round(self) -> int:
        return self.attempt_count - self.round_start

    @property
    def never_taken(self) -> bool:
        """Whether the journal proves the gateway took none of its attempts: each was refused."""
        return (
            self.message_id is None
            and self.delivery_status is None
            and all(attempt.get("outcome") in REFUSALS for attempt in self.attempts)
        )

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> Notification:
        FORMAT.version_of(item)  # versions 0 and 1 differ only by `schema_version` itself
        return cls(
            key=str(item["id"])[len(KEY_PREFIX) :],
            state=State(item["state"]),
            state_since=parse_iso(item["state_since"]),
            recipient=str(item["recipient"]),
            body=str(item["body"]),
            attempt_count=_int(item, "attempt_count"),
            reconcile_resends=_int(item, "reconcile_resends"),
            attempts=tuple(item.get("attempts", [])),
            lease_owner=item.get("lease_owner"),
            lease_expires_at=_time(item, "lease_expires_at"),
            next_attempt_at=_time(item, "next_attempt_at"),
            unknown_since=_time(item, "unknown_since"),
            message_id=item.get("message_id"),
            delivery_status=item.get("delivery_status"),
            failure_reason=item.get("failure_reason"),
            received_at=_time(item, "received_at"),
            resend_requested_at=_time(item, "resend_requested_at"),
            round_start=_int(item, "round_start"),
            failed_retryable=bool(item.get("failed_retryable", False)),
            abandoned_at=_time(item, "abandoned_at"),
            previous_status=item.get("previous_status"),
            order_id=item.get("order_id"),
            order_status=item.get("order_status"),
            paused_at=_time(item, "paused_at"),
            transition=item.get("transition"),
            occurred_at=_time(item, "occurred_at"),
            rule=item.get("rule"),
            parts=_int(item, "parts") or None,
            encoding=item.get("encoding"),
        )


@dataclass(frozen=True)
class Finish:
    """How an attempt ends for the journal: the next state and what goes with it."""

    state: State
    attempt: Mapping[str, Any]
    answered_at: datetime | None = None
    message_id: str | None = None
    next_attempt_at: datetime | None = None
    failure_reason: str | None = None
    counts_as_resend: bool = False
    # With state FAILED: attempts ran out on refusals for now (a redelivery may reopen it).
    retryable: bool = False
    # The gateway refused the account (a pipeline.errors.ACCOUNT_CAUSES cause): the claim is
    # undone (back to `state`, the attempt not counted), nothing having been sent.
    paused_cause: str | None = None


def cursor_of(item: Mapping[str, Any]) -> tuple[str, str]:
    """Where the reconciler's last turn ended: (state_since, key), empty for none (any version)."""
    if item:
        CURSOR.version_of(item)
    return str(item.get("state_since", "")), str(item.get("key", ""))
