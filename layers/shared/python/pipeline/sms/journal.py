"""The SMS journal: one DynamoDB record per notification, the single source of truth about it.

A record lives in the journal table (shared with Powertools idempotency) under
`id = "sms#<key>"`, the key being a SHA-256 hex digest of the notification's identity (64 hex
digits; Powertools' own ids are `<consumer>#<32 hex digits>`, so the two never collide). Every
write is conditional:

- `record_entry` puts the record, state `pending`, *before* any gateway call, with
  `attribute_not_exists(id)`, in one transaction with its order's new state
  (`pipeline.sms.orders`): of two workers, one creates it and the other learns it exists;
- `claim` moves `pending` to `sending` with a lease (`lease_owner`, `lease_expires_at`): of two
  workers, one gets it; nobody else sends while the lease holds;
- `finish` saves an attempt's outcome only for the lease owner (a refusal of the gateway
  account gives the attempt back: the record returns to where it was, `paused_at` set, the
  refusal kept in `last_account_refusal`, not in `attempts`); `expire_lease` turns a
  `sending` whose owner died into `unknown` (never back to `pending`: it may have been sent);
- only evidence or a person settles an `unknown`: `resolve_accepted` closes it, and
  `request_resend` (a person's word that it never arrived) makes it `pending` again, for the
  reconciler to claim and send once with the same key; a person may also `abandon` it;
- a `failed` record comes back only through `reopen` (a redelivery, when the journal proves no
  attempt was taken and the failure was running out of attempts, not a refusal for good), a
  phone corrected in the CRM (`change_recipient` with `reopen_since`: every attempt was refused,
  the refused number never got it, so the corrected one is sent it once) or a person
  (`request_resend`, `abandon`).

Every conditional update also writes a fresh `last_write` id and refuses to apply twice: when
botocore retries an update whose first answer was lost and the condition then fails, the re-read
record shows whether the write that failed was in fact this caller's own, already applied (a
claim it holds, an attempt already recorded) rather than someone else's.

A record has no expiry (no TTL attribute) while anything is left to do: `pending` and `sending`
(a retry, the reconciler's orphan send, whatever outage came between), `unknown` and `failed`
(evidence or a person closes them, and they stay in front of the alarms and the operator until
then). Only a settled record (`accepted`, or abandoned by a person) is kept for `retention` after
its last change.

States someone may have to act on (pending, sending, unknown, failed) are copied to `sms_state`,
the partition key of the sparse GSI `by_state` (sort key `state_since`); an accepted record
drops it. The reconciler and the operator's CLI query it (`records_in_state`) without scanning
the table.
Times are stored as fixed-width UTC ISO strings, so they compare and sort as strings.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from pipeline import aws
from pipeline.formats import SCHEMA_VERSION
from pipeline.sms.clock import CLOCK, Clock, iso, parse_iso
from pipeline.sms.encoding import size
from pipeline.sms.journal_reads import JournalReads
from pipeline.sms.orders import OrderState
from pipeline.sms.records import (
    BY_STATE_INDEX,
    CURSOR,
    CURSOR_PREFIX,
    EVIDENCE_CLOSES,
    FORMAT,
    INDEXED_STATES,
    KEY_PREFIX,
    RECIPIENT_CHANGEABLE,
    REFUSALS,
    Draft,
    Finish,
    Notification,
    State,
    cursor_of,
    notification_key,
)

# The record's model lives in `pipeline.sms.records`, the reads in `pipeline.sms.journal_reads`;
# importers of this module keep finding them here.
__all__ = [
    "BY_STATE_INDEX",
    "CLOCK",
    "CURSOR",
    "CURSOR_PREFIX",
    "EVIDENCE_CLOSES",
    "FORMAT",
    "INDEXED_STATES",
    "KEY_PREFIX",
    "RECIPIENT_CHANGEABLE",
    "REFUSALS",
    "Clock",
    "Draft",
    "Finish",
    "Journal",
    "Notification",
    "State",
    "cursor_of",
    "iso",
    "notification_key",
    "parse_iso",
]

# Entering `unknown`: the index sorts unknowns by when they *first* became unknown (a resend that
# ends unknown again does not make an old problem look new), which the deadline is measured from.
_BECOME_UNKNOWN = (
    "#state_since = if_not_exists(#unknown_since, :now), #unknown_since = if_not_exists(#unknown_since, :now)"
)


def _size_attributes(body: str) -> dict[str, Any]:
    """What a text costs, recorded with it: its parts (each billed) and their encoding."""
    counted = size(body)
    return {"parts": counted.parts, "encoding": counted.encoding}


def _is_conflict(error: ClientError) -> bool:
    return aws.error_code(error) == "ConditionalCheckFailedException"


def _placeholders(prefix: str, *expressions: str) -> set[str]:
    return set(re.findall(rf"{prefix}\w+", " ".join(expressions)))


class Journal(JournalReads):
    """Conditional reads and writes of SMS journal records; see the module docstring."""

    # -- writing --------------------------------------------------------------------------------
    def _expiration(self, now: datetime) -> int:
        """The TTL attribute's value for a record changed at `now`."""
        return int((now + self.retention).timestamp())

    def _notification_item(self, draft: Draft) -> dict[str, Any]:
        now = self.clock.now()
        item: dict[str, Any] = {
            "id": KEY_PREFIX + draft.key,
            SCHEMA_VERSION: FORMAT.version,
            "channel": draft.channel,
            "event_type": draft.event_type,
            "order_id": draft.order_id,
            "transition": draft.transition,
            "crm_event_id": draft.crm_event_id,
            "rule": draft.rule,
            "order_status": draft.order_status,
            "previous_status": draft.previous_status,
            "recipient": draft.recipient,
            "body": draft.body,
            **_size_attributes(draft.body),
            **({"language": draft.language} if draft.language else {}),
            "correlation_id": draft.correlation_id,
            "state": State.PENDING.value,
            "sms_state": State.PENDING.value,
            "state_since": iso(now),
            "created_at": iso(now),
            # When the CRM says it happened and when the webhook got it: with the attempt times
            # below, they tell a slow CRM from a slow queue from a slow gateway.
            "occurred_at": iso(draft.occurred_at),
            "received_at": iso(draft.received_at),
            "attempt_count": 0,
            "reconcile_resends": 0,
            "attempts": [],
            # No TTL while anything is left to do (`expiration` comes with `accepted`, or a person's
            # decision): a pending record outlives any outage, its SQS message's retention included,
            # and the reconciler sends it once it is orphaned.
        }
        return {name: value for name, value in item.items() if value is not None}

    def record_entry(self, state: OrderState, expected_version: int | None, draft: Draft | None) -> bool:
        """Save an order's new status entry and, when one is due, its notification, atomically.

        One transaction: the order state only if nobody changed it since it was read
        (`expected_version`, None for an order never seen), the notification only if its key is
        new. False when the order state changed meanwhile (the caller re-reads and decides again).
        A notification key that already exists means the notification is known: the state is
        then saved alone (botocore retries a transaction whose answer was lost with the same
        client request token, so DynamoDB does not apply it twice). With no notification due
        (the most common event: a status without a rule, a repeat) it is one conditional put,
        at half a transaction's write cost; if its answer is lost, the resent put fails its
        version condition and the caller, re-reading, finds its own write.
        """
        order_put: dict[str, Any] = {
            "TableName": self.table_name,
            "Item": state.item(self._expiration(self.clock.now())),
        }
        if expected_version is None:
            order_put["ConditionExpression"] = "attribute_not_exists(id)"
        else:
            order_put["ConditionExpression"] = "version = :version"
            order_put["ExpressionAttributeValues"] = {":version": expected_version}
        client = self.table.meta.client
        if draft is None:
            try:
                client.put_item(**order_put)
            except ClientError as error:
                if _is_conflict(error):
                    return False
                raise
            return True
        notification_put = {
            "TableName": self.table_name,
            "Item": self._notification_item(draft),
            "ConditionExpression": "attribute_not_exists(id)",
        }
        try:
            client.transact_write_items(TransactItems=[{"Put": order_put}, {"Put": notification_put}])
        except ClientError as error:
            if aws.error_code(error) != "TransactionCanceledException":
                raise
            reasons = [reason.get("Code") for reason in error.response.get("CancellationReasons", [])]
            if reasons[:1] == ["ConditionalCheckFailed"]:
                return False
            if reasons[1:2] == ["ConditionalCheckFailed"]:
                return self.record_entry(state, expected_version, None)
            raise
        return True

    def _update(
        self, key: str, update: str, condition: str, values: Mapping[str, Any]
    ) -> Notification | None:
        """One conditional update, applied at most once; the new record, or None when the condition
        did not hold.

        Placeholders are `#<attribute name>` and `:<value name>`; only those the expressions use
        are sent (DynamoDB rejects unused ones). The update also sets a fresh `last_write` id and
        requires the record not to carry it yet: if botocore resends it after a lost answer, the
        resend fails its condition, and the re-read shows the write was ours (see the module
        docstring).
        """
        write_id = uuid.uuid4().hex
        assert update.startswith("SET "), update
        update = "SET #last_write = :write_id, " + update[len("SET ") :]
        condition = f"({condition}) AND (attribute_not_exists(#last_write) OR #last_write <> :write_id)"
        used_values = _placeholders(":", update, condition)
        values = {**values, ":write_id": write_id}
        try:
            response = self.table.update_item(
                Key={"id": KEY_PREFIX + key},
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeNames={name: name[1:] for name in _placeholders("#", update, condition)},
                ExpressionAttributeValues={
                    name: value for name, value in values.items() if name in used_values
                },
                ReturnValues="ALL_NEW",
            )
        except ClientError as error:
            if not _is_conflict(error):
                raise
            item = self.table.get_item(Key={"id": KEY_PREFIX + key}, ConsistentRead=True).get("Item")
            if item is not None and item.get("last_write") == write_id:
                return Notification.from_item(item)  # applied by an attempt whose answer was lost
            return None
        return Notification.from_item(response["Attributes"])

    def claim(
        self,
        key: str,
        owner: str,
        *,
        from_states: tuple[State, ...],
        max_resends: int | None = None,
        unchanged_since: datetime | None = None,
    ) -> Notification | None:
        """Atomically take a record for one send attempt; None when someone else has it (or it is not due).

        From `pending` only once `next_attempt_at` has come; with `max_resends`, only while the
        reconciler's resends are below it; with `unchanged_since`, only if the record is still
        in the state the caller decided on (its `state_since`).
        """
        now = self.clock.now()
        states = ", ".join(f":from{index}" for index in range(len(from_states)))
        # Evidence that the gateway took it (a delivery event) closes a record: never claimed again.
        condition = f"#state IN ({states}) AND attribute_not_exists(#delivery_status)"
        if State.PENDING in from_states:
            condition += " AND (attribute_not_exists(#next_attempt_at) OR #next_attempt_at <= :now)"
        if max_resends is not None:
            condition += " AND #reconcile_resends < :max_resends"
        if unchanged_since is not None:
            condition += " AND #state_since = :seen_since"
        return self._update(
            key,
            "SET #state = :sending, #sms_state = :sending, #state_since = :now, #lease_owner = :owner,"
            " #lease_expires_at = :lease_end, #processing_started_at = :now,"
            " #attempt_count = #attempt_count + :one REMOVE #next_attempt_at, #paused_at",
            condition,
            {
                **{f":from{index}": state.value for index, state in enumerate(from_states)},
                ":sending": State.SENDING.value,
                ":now": iso(now),
                ":owner": owner,
                ":lease_end": iso(now + self.lease),
                ":one": 1,
                ":max_resends": max_resends,
                ":seen_since": iso(unchanged_since) if unchanged_since else None,
            },
        )

    def finish(self, key: str, owner: str, finish: Finish) -> Notification | None:
        """Save an attempt's outcome if `owner` still holds the record; None when it lost it.

        `unknown` keeps `lease_owner` (an expired lease too): if its lease ran out while it
        waited and someone marked the record unknown, the owner's late answer still lands.
        A lost record still gets the attempt appended, so the journal shows every call made.
        """
        now = self.clock.now()
        sets = ["#state = :state"]
        if finish.paused_cause is None:
            sets.append("#attempts = list_append(#attempts, :attempt)")
        else:
            # Nothing was sent and nothing about this message caused it: the attempt is given back.
            sets += [
                "#attempt_count = #attempt_count - :one",
                "#last_account_refusal = :refusal",
                "#account_refusals = if_not_exists(#account_refusals, :zero) + :one",
                "#paused_at = :now",
            ]
        removes = ["#lease_expires_at"]
        if finish.state is State.UNKNOWN:
            sets.append(_BECOME_UNKNOWN)
            removes.append("#expiration")  # never expires while unresolved
        elif finish.state is State.FAILED:
            # A person decides on it (resend or abandon): it never expires before they do.
            sets.append("#state_since = :now")
            removes.append("#expiration")
        elif finish.state is State.PENDING:
            # A retry is due: still to do, so still no TTL (see `Journal.create`).
            sets.append("#state_since = :now")
            removes.append("#expiration")
            removes.append("#lease_owner")
        else:
            sets.append("#state_since = :now")
            sets.append("#expiration = :expiration")
            removes.append("#lease_owner")  # released; only an unknown keeps it, for a late answer
        if finish.state in INDEXED_STATES:
            sets.append("#sms_state = :state")
        else:
            removes.append("#sms_state")
        if finish.state is State.FAILED:
            sets.append("#failed_retryable = :retryable")
        optional = {
            "#gateway_answered_at": iso(finish.answered_at) if finish.answered_at else None,
            "#message_id": finish.message_id,
            "#next_attempt_at": iso(finish.next_attempt_at) if finish.next_attempt_at else None,
            "#failure_reason": finish.failure_reason,
        }
        values: dict[str, Any] = {
            ":state": finish.state.value,
            ":attempt": [dict(finish.attempt)],
            ":now": iso(now),
            ":owner": owner,
            ":sending": State.SENDING.value,
            ":unknown": State.UNKNOWN.value,
            ":one": 1,
            ":expiration": self._expiration(now),
            ":retryable": finish.retryable,
        }
        if finish.paused_cause is not None:
            values |= {":refusal": {**finish.attempt, "cause": finish.paused_cause}, ":zero": 0}
            del values[":attempt"]
        for name, value in optional.items():
            if value is not None:
                sets.append(f"{name} = :{name[1:]}")
                values[f":{name[1:]}"] = value
        if finish.counts_as_resend:
            sets.append("#reconcile_resends = #reconcile_resends + :one")
        update = "SET " + ", ".join(sets) + " REMOVE " + ", ".join(removes)
        saved = self._update(key, update, "#lease_owner = :owner AND #state IN (:sending, :unknown)", values)
        if saved is None:
            self.append_attempt(key, finish.attempt)
        return saved

    def append_attempt(self, key: str, attempt: Mapping[str, Any]) -> None:
        self._update(
            key,
            "SET #attempts = list_append(#attempts, :attempt)",
            "attribute_exists(#id)",
            {":attempt": [dict(attempt)]},
        )

    def expire_lease(self, key: str, owner: str, note: str) -> Notification | None:
        """`sending` whose lease ran out -> `unknown`: the owner died mid-call; it may have sent."""
        now = self.clock.now()
        return self._update(
            key,
            f"SET #state = :unknown, #sms_state = :unknown, {_BECOME_UNKNOWN},"
            " #attempts = list_append(#attempts, :attempt) REMOVE #lease_expires_at, #expiration",
            "#state = :sending AND #lease_owner = :owner AND #lease_expires_at <= :now",
            {
                ":unknown": State.UNKNOWN.value,
                ":sending": State.SENDING.value,
                ":now": iso(now),
                ":owner": owner,
                ":attempt": [{"at": iso(now), "outcome": "lease_expired", "owner": owner, "by": note}],
            },
        )

    def resolve_accepted(
        self,
        key: str,
        *,
        via: str,
        message_id: str | None = None,
        from_states: tuple[State, ...] = (State.UNKNOWN,),
    ) -> Notification | None:
        """`unknown` -> `accepted` on evidence (a lookup, a person); None if in none of `from_states`.

        A delivery event closes more (`EVIDENCE_CLOSES`): a record waiting to be resent on an
        operator's word, or failed, that the gateway in fact delivered is never sent again.
        """
        now = self.clock.now()
        states = ", ".join(f":from{index}" for index in range(len(from_states)))
        update = (
            "SET #state = :accepted, #state_since = :now, #resolved_by = :via, #resolved_at = :now,"
            " #expiration = :expiration"
        )
        if message_id:
            update += ", #message_id = :message_id"
        return self._update(
            key,
            update + " REMOVE #sms_state, #next_attempt_at",
            f"#state IN ({states})",
            {
                **{f":from{index}": state.value for index, state in enumerate(from_states)},
                ":accepted": State.ACCEPTED.value,
                ":now": iso(now),
                ":via": via,
                ":message_id": message_id,
                ":expiration": self._expiration(now),
            },
        )

    def request_resend(self, key: str, *, by: str) -> Notification | None:
        """`unknown` or `failed` -> `pending`, due now, on a person's word that it never arrived; None
        if it is in neither state (or was abandoned).

        Its SQS message was acknowledged or dead-lettered long ago, so the reconciler's next run
        claims it like any `pending` record (atomically: a worker with a live redelivery may
        claim it instead) and sends it once, with the same key (the gateway's client reference),
        with a fresh attempt budget.
        """
        now = self.clock.now()
        return self._update(
            key,
            "SET #state = :pending, #sms_state = :pending, #state_since = :now,"
            " #resend_requested_at = :now, #resend_requested_by = :by, #round_start = #attempt_count"
            " REMOVE #next_attempt_at, #lease_expires_at, #failure_reason, #failed_retryable, #expiration",
            "#state IN (:unknown, :failed) AND attribute_not_exists(#abandoned_at)",
            {
                ":pending": State.PENDING.value,
                ":unknown": State.UNKNOWN.value,
                ":failed": State.FAILED.value,
                ":now": iso(now),
                ":by": by,
            },
        )

    def reopen(self, key: str, *, seen_since: datetime, by: str) -> Notification | None:
        """`failed` (attempts ran out) -> `pending`, due now, with a fresh attempt budget: a
        redelivery after the cause was fixed. Only for the record as the caller read it (its
        `state_since`), so of two redeliveries one reopens it; None otherwise.

        The caller has checked that the journal proves nothing was taken (`never_taken`).
        """
        now = self.clock.now()
        return self._update(
            key,
            "SET #state = :pending, #sms_state = :pending, #state_since = :now, #reopened_at = :now,"
            " #reopened_by = :by, #round_start = #attempt_count"
            " REMOVE #next_attempt_at, #failure_reason, #failed_retryable, #expiration",
            "#state = :failed AND #state_since = :seen_since AND #failed_retryable = :true"
            " AND attribute_not_exists(#abandoned_at)",
            {
                ":pending": State.PENDING.value,
                ":failed": State.FAILED.value,
                ":now": iso(now),
                ":seen_since": iso(seen_since),
                ":true": True,
                ":by": by,
            },
        )

    def close(self, key: str, state: State, *, reason: str, by: str) -> Notification | None:
        """`pending` -> a state that ends it without a send (`pipeline.sms.endstates`: suppressed,
        expired, superseded), kept for `retention` like a settled record; None if it is no longer
        `pending` (a worker claimed it first: its outcome stands)."""
        now = self.clock.now()
        return self._update(
            key,
            "SET #state = :state, #state_since = :now, #closed_reason = :reason, #closed_by = :by,"
            " #expiration = :expiration REMOVE #sms_state, #next_attempt_at, #paused_at",
            "#state = :pending",
            {
                ":state": state.value,
                ":pending": State.PENDING.value,
                ":now": iso(now),
                ":reason": reason,
                ":by": by,
                ":expiration": self._expiration(now),
            },
        )

    def abandon(self, key: str, *, by: str) -> Notification | None:
        """`unknown` or `failed` -> `failed`, for good, on a person's decision: never sent again,
        dropped from the `by_state` index (and so from the alarms); None if in neither state."""
        now = self.clock.now()
        return self._update(
            key,
            "SET #state = :failed, #state_since = :now, #abandoned_at = :now, #abandoned_by = :by,"
            " #failure_reason = :reason, #failed_retryable = :false, #expiration = :expiration"
            " REMOVE #sms_state, #next_attempt_at",
            "#state IN (:unknown, :failed) AND attribute_not_exists(#abandoned_at)",
            {
                ":failed": State.FAILED.value,
                ":unknown": State.UNKNOWN.value,
                ":now": iso(now),
                ":by": by,
                ":reason": f"abandoned by {by}",
                ":false": False,
                ":expiration": self._expiration(now),
            },
        )

    def change_recipient(
        self,
        key: str,
        *,
        recipient: str,
        body: str,
        note: Mapping[str, Any],
        reopen: Notification | None = None,
    ) -> Notification | None:
        """The CRM corrected the customer's phone (a later re-save or move of the same entry):
        the notification goes to the new number from its next send on. Only while nothing is in
        flight or accepted (`RECIPIENT_CHANGEABLE`); `note` (masked numbers) joins `changes`.

        `reopen`: the `failed` record as the caller read it, every attempt of which was refused
        (`never_taken`; e.g. the old number refused as invalid) and not abandoned: in the same
        write it becomes `pending`, due now, with a fresh attempt budget, so the corrected
        number gets it once (only if it is still as read: same `state_since`, same attempts)."""
        now = self.clock.now()
        states = ", ".join(f":from{index}" for index, _ in enumerate(RECIPIENT_CHANGEABLE))
        update = (
            "SET #recipient = :recipient, #body = :body, #parts = :parts, #encoding = :encoding,"
            " #changes = list_append(if_not_exists(#changes, :empty), :note), #recipient_changed_at = :now"
        )
        condition = (
            f"#state IN ({states}) AND #recipient <> :recipient AND attribute_not_exists(#delivery_status)"
        )
        if reopen is not None:
            update += (
                ", #state = :pending, #sms_state = :pending, #state_since = :now, #reopened_at = :now,"
                " #reopened_by = :by, #round_start = #attempt_count"
                " REMOVE #next_attempt_at, #failure_reason, #failed_retryable, #expiration"
            )
            condition += (
                " AND #state = :failed AND #state_since = :seen_since AND size(#attempts) = :attempts"
                " AND attribute_not_exists(#abandoned_at) AND attribute_not_exists(#message_id)"
            )
        return self._update(
            key,
            update,
            condition,
            {
                **{f":from{index}": state.value for index, state in enumerate(RECIPIENT_CHANGEABLE)},
                ":recipient": recipient,
                ":body": body,
                **{f":{name}": value for name, value in _size_attributes(body).items()},
                ":empty": [],
                ":note": [{"at": iso(now), **note}],
                ":now": iso(now),
                ":pending": State.PENDING.value,
                ":failed": State.FAILED.value,
                ":by": "recipient corrected",
                ":seen_since": iso(reopen.state_since) if reopen else None,
                ":attempts": len(reopen.attempts) if reopen else None,
            },
        )

    def record_delivery(
        self, key: str, *, status: str, event_at: datetime, final: bool, message_id: str | None
    ) -> Notification | None:
        """Save a delivery status unless a later one is already saved; None if so (or no such record)."""
        update = "SET #delivery_status = :status, #delivery_event_at = :at, #delivery_final = :final"
        if message_id:
            update += ", #delivery_message_id = :message_id"
        return self._update(
            key,
            update,
            "attribute_exists(#id)"
            " AND (attribute_not_exists(#delivery_event_at) OR #delivery_event_at <= :at)",
            {":status": status, ":at": iso(event_at), ":final": final, ":message_id": message_id},
        )
