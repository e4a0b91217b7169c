"""One CRM order's transitions, read from the CRM's own history: the step both CRM sources share.

A CRM's webhook only says "look at deal 42" (Bitrix24 sends no stage, and fires on every edit;
amoCRM's may be late, repeated or never sent). What happened is in the CRM's stage history:
Bitrix24's `crm.stagehistory.list`, amoCRM's `lead_status_changed` events. Each history record
is one transition with the CRM's own id, so `sync_order`:

1. reads the order's history (oldest first) through its source's adapter; an empty one is told
   apart by reading the order itself: none yet (ignored), deleted (ignored), or hidden from the
   integration's user, whose rights the CRM's list methods apply silently (`sources.hidden`:
   counted, alarmed, logged with the right to grant);
2. maps each record's stage to an order status (`pipeline.crm.status_map`); a record whose status is
   the one before it (two stages of one status) is no transition;
3. takes the records this order's marks item (in the journal table) has not handled yet: a
   webhook, its retry and the catch-up sweep (`functions/crm_sweep`) may all look at the deal;
4. publishes each new transition as an order event, in history order, whose transition id is
   the record's (`bitrix24:stagehistory:1234`; the event id derives from it, so a second publish
   is a duplicate SNS and the `sms` consumer drop), unless it is older than `SMS_MAX_AGE_SECONDS`
   when first seen: that one is recorded and counted (`CrmTransitionsTooOld`, alarmed), never
   texted late;
5. only then marks the records handled (an atomic set union: two workers at once agree), with
   a digest of the phone the latest transition was published with.

A crash anywhere repeats at most the publishes, which are duplicates downstream.

A phone corrected in the CRM after its SMS was refused (an invalid number) reaches the customer
through the order's next event (a re-save, the next webhook, the sweep's look): when nothing new
is due and the order is still in the entry last published, into a status with an SMS rule and
recently enough to text, the contact's phone is read again, and if its digest differs from the
one published, that transition is published again with the new phone (`CrmPhoneRechecked`). The
`sms` consumer sends the entry's notification to it once, if nothing reached the old number.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from aws_lambda_powertools.metrics import MetricUnit
from botocore.exceptions import BotoCoreError, ClientError

from pipeline import aws, phones
from pipeline.crm.order_events import OrderStatus
from pipeline.crm.sources import (
    Contact,
    OrderHidden,
    contact_with_phone,
    hidden,
    ignored,
    logger,
    mapped_status,
    metrics,
    publish,
    rules,
    status_map,
)
from pipeline.crm.status_map import StatusMap
from pipeline.envelope import Envelope
from pipeline.errors import RemoteRefused, TransientError
from pipeline.formats import SCHEMA_VERSION
from pipeline.formats import by_name as by_format
from pipeline.retention import SMS_RETENTION_DAYS
from pipeline.sms.rules import max_age

TOO_OLD_METRIC = "CrmTransitionsTooOld"
NOT_TRANSITIONS_METRIC = "CrmHistoryNotTransitions"
PHONE_RECHECKED_METRIC = "CrmPhoneRechecked"
MARKS_PREFIX = "crm-history#"
# The marks outlive every copy of the order's events, as the sms journal's order history does; a
# record forgotten after that is older than any age an SMS may be sent at, so never texted.
MARKS_RETENTION = timedelta(days=SMS_RETENTION_DAYS)


@dataclass(frozen=True)
class HistoryRecord:
    """One transition as the CRM's history has it: the order entered `stage` of `pipeline` at `at`."""

    ref: str  # the CRM's own id of the record, source-qualified: "bitrix24:stagehistory:1234"
    at: datetime
    pipeline: str
    stage: str
    # Where the order came from, when the CRM says (amoCRM's value_before); else the record before.
    before: tuple[str, str] | None = None


@dataclass(frozen=True)
class OrderCard:
    """What the order event needs of the order itself: its contact, and fields kept for tracing."""

    contact_id: int | None
    details: dict[str, Any]


class CrmSource(Protocol):
    """A thin adapter: how one CRM names its orders and reads their history, card and contacts."""

    name: str  # "bitrix24"
    setting: str  # the status map's setting, "bitrix24_stages"
    noun: str  # "deal", "lead"
    unauthorized_hint: str

    def history(self, order_id: int) -> list[HistoryRecord]:
        """The order's whole stage history, oldest first."""
        ...

    def card(self, order_id: int) -> OrderCard | None:
        """The order, None when the CRM has no such order (deleted since); OrderHidden when the
        CRM refuses it to the integration's user (the history read just worked: not the credential)."""
        ...

    def contact(self, contact_id: int) -> Contact: ...

    def display_name(self, contact: Any) -> str: ...


@dataclass(frozen=True)
class Transition:
    record: HistoryRecord
    status: str
    previous_status: str | None


def transitions(
    records: Sequence[HistoryRecord], statuses: StatusMap, fresh: frozenset[str], *, what: str, setting: str
) -> tuple[list[Transition], list[HistoryRecord]]:
    """The records that are transitions between order statuses, with the status each came from;
    and those that are not (a pipeline not connected, or a stage of the status it left). A stage
    missing from the map is misconfiguration for a `fresh` record, and only for one: a record
    handled long ago must not hold the order's new ones."""
    moves: list[Transition] = []
    skipped: list[HistoryRecord] = []
    previous: str | None = None
    for record in records:
        lookup = statuses.lookup(record.pipeline, record.stage)
        if record.ref in fresh:
            status = mapped_status(
                lookup, setting=setting, pipeline=record.pipeline, stage=record.stage, what=what
            )
        else:
            status = lookup.status
        came_from = previous
        if record.before is not None:
            before = statuses.lookup(*record.before)
            came_from = before.status if before.kind == "mapped" else None
        previous = status
        if status is None or status == came_from:
            skipped.append(record)
            continue
        moves.append(Transition(record, status, came_from))
    return moves, skipped


# The history marks item's format (`pipeline.formats`).
MARKS_FORMAT = by_format("crm_history_marks")


@dataclass(frozen=True)
class Marks:
    """An order's marks item: the records handled, and the latest transition published with the
    digest of its phone (`phone_digest`), what a phone corrected since is told by."""

    handled: frozenset[str]
    latest_ref: str | None = None
    latest_phone: str | None = None


def phone_digest(phone: str) -> str:
    """What the marks keep of a published phone: a digest of its E.164 form (a number written
    another way is the same number), never the number."""
    try:
        number = phones.to_e164(phone, os.environ.get(phones.DEFAULT_REGION_ENV, "").strip() or None)
    except phones.PhoneNumberError:
        number = phone.strip()
    return hashlib.sha256(number.encode()).hexdigest()[:32]


def marks_of(item: Mapping[str, Any]) -> Marks:
    """An order's history marks item (any version: 1 only adds `schema_version`; none: no marks)."""
    if item:
        MARKS_FORMAT.version_of(item)
    return Marks(
        frozenset(item.get("handled", {}).get("SS", ())),
        item.get("latest_ref", {}).get("S"),
        item.get("latest_phone", {}).get("S"),
    )


class HistoryMarks:
    """Which history records of an order were handled, in one journal item per order."""

    def __init__(self, table: str) -> None:
        self.table = table

    @staticmethod
    def item_id(order_key: str) -> str:
        return MARKS_PREFIX + hashlib.sha256(order_key.encode()).hexdigest()

    def read(self, order_key: str) -> Marks:
        try:
            answer = aws.client("dynamodb").get_item(
                TableName=self.table,
                Key={"id": {"S": self.item_id(order_key)}},
                ConsistentRead=True,
                ProjectionExpression="handled, latest_ref, latest_phone, schema_version",
            )
        except (ClientError, BotoCoreError) as error:
            raise TransientError(
                f"reading the order's history marks failed ({type(error).__name__})"
            ) from None
        return marks_of(answer.get("Item", {}))

    def handled(self, order_key: str) -> frozenset[str]:
        return self.read(order_key).handled

    def mark(
        self, order_key: str, refs: Iterable[str], now: datetime, *, phone: tuple[str, str] | None = None
    ) -> None:
        """Add `refs` to the handled records; `phone`: (the latest transition published, the
        digest of its phone)."""
        refs = sorted(set(refs))
        if not refs and phone is None:
            return
        update = "SET order_key = :key, expiration = :expiration, schema_version = :v"
        values: dict[str, Any] = {
            ":v": MARKS_FORMAT.written()[SCHEMA_VERSION],
            ":key": {"S": order_key},
            ":expiration": {"N": str(int((now + MARKS_RETENTION).timestamp()))},
        }
        if phone is not None:
            update += ", latest_ref = :latest_ref, latest_phone = :latest_phone"
            values[":latest_ref"], values[":latest_phone"] = {"S": phone[0]}, {"S": phone[1]}
        if refs:
            update = f"ADD handled :refs {update}"
            values[":refs"] = {"SS": refs}
        try:
            aws.client("dynamodb").update_item(
                TableName=self.table,
                Key={"id": {"S": self.item_id(order_key)}},
                UpdateExpression=update,
                ExpressionAttributeValues=values,
            )
        except (ClientError, BotoCoreError) as error:
            raise TransientError(
                f"saving the order's history marks failed ({type(error).__name__})"
            ) from None


def marks() -> HistoryMarks:
    return HistoryMarks(os.environ["JOURNAL_TABLE"])


def sync_order(
    source: CrmSource,
    order_id: int,
    envelope: Envelope,
    *,
    history_marks: Callable[[], HistoryMarks] = marks,
) -> dict[str, Any]:
    """Publish the order's transitions not handled yet (see the module docstring)."""
    order_key = f"{source.name}:{order_id}"
    what = f"{source.name} {source.noun} {order_id}"
    records = source.history(order_id)
    log_fields = {f"{source.noun}_id": order_id}
    if not records:
        # The CRM's list methods leave out what the user may not read: only the order tells.
        try:
            exists = source.card(order_id) is not None
        except OrderHidden as error:
            return hidden(what, error, **log_fields)
        return ignored(f"{what} has no stage history" if exists else f"{what} not found", **log_fields)
    store = history_marks()
    marks = store.read(order_key)
    fresh_refs = frozenset(record.ref for record in records if record.ref not in marks.handled)
    statuses = status_map(source.setting.upper())
    if not fresh_refs:
        current, _ = transitions(records, statuses, fresh_refs, what=what, setting=source.setting)
        rechecked = _recheck_phone(source, order_id, current, marks, envelope, store, **log_fields)
        return rechecked or {
            "published": False,
            "reason": "every transition in the history was handled",
            "order_id": order_id,
        }
    moves, skipped = transitions(records, statuses, fresh_refs, what=what, setting=source.setting)
    new_moves = [move for move in moves if move.record.ref in fresh_refs]
    not_moves = [record for record in skipped if record.ref in fresh_refs]
    if not_moves:
        metrics.add_metric(name=NOT_TRANSITIONS_METRIC, unit=MetricUnit.Count, value=len(not_moves))
    age_limit = max_age()
    oldest_allowed = envelope.received_at - age_limit
    too_old = [move for move in new_moves if move.record.at < oldest_allowed]
    due = [move for move in new_moves if move.record.at >= oldest_allowed]
    for move in too_old:
        _record_too_old(move, what, order_key, age_limit)
    published: list[str] = []
    latest_phone: tuple[str, str] | None = None
    if not due:
        rechecked = _recheck_phone(source, order_id, moves, marks, envelope, store, **log_fields)
        if rechecked is not None:
            store.mark(order_key, fresh_refs, envelope.received_at)
            return {**rechecked, "too_old": len(too_old), "not_transitions": len(not_moves)}
    if due:
        try:
            card = source.card(order_id)
        except OrderHidden as error:
            return hidden(what, error, **log_fields)
        if card is None:
            return ignored(f"{what} not found (deleted since the event?)", **log_fields)
        found = contact_with_phone(
            source.contact,
            card.contact_id,
            what=what,
            status=next((m.status for m in due if rules().sends_for(m.status)), due[-1].status),
            unauthorized_hint=source.unauthorized_hint,
            **log_fields,
        )
        if isinstance(found, dict):
            store.mark(order_key, fresh_refs, envelope.received_at)
            return found
        contact, phone = found
        for move in due:
            outcome = publish(
                _order_status(source, order_id, move, card, source.display_name(contact), phone), envelope
            )
            if outcome.get("published"):
                published.append(str(outcome["event_id"]))
        latest_phone = (due[-1].record.ref, phone_digest(phone))
    store.mark(order_key, fresh_refs, envelope.received_at, phone=latest_phone)
    return {
        "published": bool(published),
        "order_id": order_id,
        "event_ids": published,
        "too_old": len(too_old),
        "not_transitions": len(not_moves),
    }


def _recheck_phone(
    source: CrmSource,
    order_id: int,
    moves: Sequence[Transition],
    marks: Marks,
    envelope: Envelope,
    store: HistoryMarks,
    **log_fields: Any,
) -> dict[str, Any] | None:
    """The order's current entry published again when its contact's phone changed since (see the
    module docstring); None when there is nothing to recheck or nothing changed."""
    current = moves[-1] if moves else None
    if current is None or marks.latest_phone is None or current.record.ref != marks.latest_ref:
        return None  # the entry published last is over, or its phone was never kept
    if not rules().sends_for(current.status) or current.record.at < envelope.received_at - max_age():
        return None  # no SMS for it, or too late to text
    what = f"{source.name} {source.noun} {order_id}"
    try:
        card = source.card(order_id)
    except OrderHidden as error:
        return hidden(what, error, **log_fields)
    if card is None or card.contact_id is None:
        return None
    try:
        contact = source.contact(card.contact_id)
    except RemoteRefused:
        return None  # gone or refused: nothing to correct the SMS with
    phone = contact.phone()
    if phone is None or phone_digest(phone) == marks.latest_phone:
        return None
    metrics.add_metric(name=PHONE_RECHECKED_METRIC, unit=MetricUnit.Count, value=1)
    logger.warning(
        "Customer phone changed in the CRM since its transition was published: published again",
        extra={"transition": current.record.ref, "status": current.status, **log_fields},
    )
    order = _order_status(source, order_id, current, card, source.display_name(contact), phone)
    outcome = publish(order, envelope)
    order_key = f"{source.name}:{order_id}"
    store.mark(order_key, (), envelope.received_at, phone=(current.record.ref, phone_digest(phone)))
    return {
        "published": bool(outcome.get("published")),
        "order_id": order_id,
        "event_ids": [outcome["event_id"]] if outcome.get("published") else [],
        "phone_rechecked": True,
    }


def _record_too_old(move: Transition, what: str, order_key: str, age_limit: timedelta) -> None:
    """A transition first seen after its SMS could still be timely: never texted, never silent."""
    sends = rules().sends_for(move.status)
    if sends:
        metrics.add_metric(name=TOO_OLD_METRIC, unit=MetricUnit.Count, value=1)
    logger.warning(
        "CRM transition first seen too late to text",
        extra={
            "order": order_key,
            "transition": move.record.ref,
            "status": move.status,
            "occurred_at": move.record.at.isoformat(),
            "max_age_seconds": int(age_limit.total_seconds()),
            "has_rule": sends,
            "what": what,
        },
    )


def _order_status(
    source: CrmSource, order_id: int, move: Transition, card: OrderCard, name: str, phone: str
) -> OrderStatus:
    return OrderStatus(
        source=source.name,
        order_id=str(order_id),
        status=move.status,
        previous_status=move.previous_status,
        occurred_at=move.record.at,
        customer_name=name,
        phone=phone,
        transition_id=move.record.ref,
        details={
            **card.details,
            "pipeline": move.record.pipeline,
            "stage": move.record.stage,
            "history_record": move.record.ref,
        },
    )
