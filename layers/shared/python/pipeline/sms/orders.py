"""Each order's status history as the pipeline has seen it: the rules that make one SMS per move.

A CRM's delivery ids say nothing about the business event: a CRM retries a webhook under a new
id, a manager presses "ready for pickup" twice, a node's clock runs fast, two moves share a
second, and a re-save can overtake the move it follows. So the `sms` consumer sees every status
change of every order and keeps, per order (source-qualified: Bitrix24 deal 42 and amoCRM lead
42 are two orders), one journal item holding the current status *entry* (a run of the order in
one status), when it began and the latest time seen in it, and the identities of the moves
already seen. `observe` is the whole rule book, pure; the journal applies what it returns.
`RULES` states them in words, the same words as docs/crm.md's "The CRM contract" (a test
holds the two together); `tests/unit/sms/test_sms_model.py` checks them on generated histories.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pipeline.formats import SCHEMA_VERSION, by_name
from pipeline.sms.clock import iso, parse_iso

ORDER_PREFIX = "sms-order#"
# A stamp later than the moment the webhook received the event by more than this is a CRM
# clock running fast (or a typo): the move is placed at the moment it was received instead.
CLOCK_SKEW_TOLERANCE = timedelta(seconds=60)
# How many move identities an order's item remembers (newest kept): far more than any order makes
# within the retention, and a forgotten one is older than every remembered one, so always stale.
SEEN_LIMIT = 64
# `seen_at` of an order whose only moves came with stamps from the future: nothing trustworthy yet.
NO_STAMP = datetime(1970, 1, 1, tzinfo=UTC)

RULES: tuple[str, ...] = (
    "A move is identified by the CRM's transition id when it sends one, else by its own stamp,"
    " status and previous status; a move already seen is recognised whatever the order's current"
    " status, and never sends again.",
    "A re-save (previous status equal to the status) is never a move: it neither starts an entry"
    " nor consumes one.",
    "A stamp later than the moment the webhook received it (plus the skew tolerance) is clamped to"
    " that moment and counted; a clamped stamp says only that the move happened before it was"
    " received, so it never mutes a later move, and it is ordered against the moves seen since by"
    " the chain of statuses and the CRM's ids alone.",
    "A move into the status the order is in is the same entry, unless the CRM names it a new"
    " transition; a move into another status starts a new entry.",
    "A move older than the latest one seen for the order is stale: nothing is sent; of two moves"
    " with the same stamp, the one whose previous status is the other's status comes second.",
    "A notification is named after the move that started its entry, never a counter or a delivery"
    " id, so no key is reused while a record with it exists.",
)

ObservationKind = Literal["entered", "repeat", "seen", "resave", "stale"]
# The order item's format (`pipeline.formats`); one without `schema_version` is version 0.
FORMAT = by_name("sms_order")


def order_item_id(order_key: str) -> str:
    """Hashed: an order id can be long or look like a phone number; the item id stays short and plain."""
    return ORDER_PREFIX + hashlib.sha256(order_key.encode()).hexdigest()


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:20]


@dataclass(frozen=True)
class Move:
    """One order-status event as the rules read it."""

    order_key: str  # source-qualified: "<crm|bitrix24|amocrm>:<order id>"
    status: str
    previous_status: str | None
    occurred_at: datetime  # the CRM's stamp, as sent
    received_at: datetime  # when the webhook (or a CRM source's consumer) received it
    transition_ref: str | None = None

    @property
    def identity(self) -> str:
        """What names this move whatever delivery carries it (a retry has the same body)."""
        if self.transition_ref is not None:
            return f"ref:{self.transition_ref}"
        return f"at:{iso(self.occurred_at)}|{self.status}|{self.previous_status or ''}"

    @property
    def clamped(self) -> bool:
        return self.occurred_at > self.received_at + CLOCK_SKEW_TOLERANCE

    @property
    def stamp(self) -> datetime:
        """Where the move stands in the order's history: the CRM's stamp, unless clamped."""
        return self.received_at if self.clamped else self.occurred_at

    @property
    def resave(self) -> bool:
        return self.previous_status == self.status


@dataclass(frozen=True)
class OrderState:
    """One order's current status entry, and the moves seen, as the journal holds them."""

    order_key: str
    status: str
    entry: int  # status entries counted so far (for people reading the journal; names nothing)
    opened_by: str  # identity of the move that started the current entry: names its notification
    entered_from: str | None  # the previous status of that move
    entered_at: datetime  # its stamp
    # The latest trustworthy stamp seen for the order, what a later move must not be older than
    # (a clamped stamp is only an upper bound of when its move happened: it raises nothing).
    seen_at: datetime
    transition_ref: str | None  # the CRM's transition id of the current entry, if it sends one
    seen: tuple[str, ...]  # digests of the identities of moves seen, newest last
    version: int
    entered_clamped: bool = False  # the current entry's move came with a stamp from the future

    @classmethod
    def first(cls, move: Move) -> OrderState:
        """The state of an order the pipeline has never seen, after its first move."""
        return cls(
            move.order_key,
            move.status,
            1,
            move.identity,
            move.previous_status,
            move.stamp,
            NO_STAMP if move.clamped else move.stamp,
            move.transition_ref,
            (_digest(move.identity),),
            1,
            move.clamped,
        )

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> OrderState:
        FORMAT.version_of(item)  # versions 0 and 1 differ only by `schema_version` itself
        return cls(
            order_key=str(item["order_key"]),
            status=str(item["status"]),
            entry=int(item["entry"]),
            opened_by=str(item["opened_by"]),
            entered_from=item.get("entered_from"),
            entered_at=parse_iso(item["entered_at"]),
            seen_at=parse_iso(item["seen_at"]),
            transition_ref=item.get("transition_ref"),
            seen=tuple(item.get("seen", ())),
            version=int(item["version"]),
            entered_clamped=bool(item.get("entered_clamped", False)),
        )

    def item(self, expiration: int) -> dict[str, Any]:
        item: dict[str, Any] = {
            "id": order_item_id(self.order_key),
            SCHEMA_VERSION: FORMAT.version,
            "order_key": self.order_key,
            "status": self.status,
            "entry": self.entry,
            "opened_by": self.opened_by,
            "entered_from": self.entered_from,
            "entered_at": iso(self.entered_at),
            "seen_at": iso(self.seen_at),
            "transition_ref": self.transition_ref,
            "seen": list(self.seen),
            "version": self.version,
            "entered_clamped": self.entered_clamped or None,
            "expiration": expiration,
        }
        return {name: value for name, value in item.items() if value is not None}

    def has_seen(self, move: Move) -> bool:
        return _digest(move.identity) in self.seen

    def remembering(self, move: Move) -> tuple[str, ...]:
        digest = _digest(move.identity)
        if digest in self.seen:
            return self.seen
        return (*self.seen, digest)[-SEEN_LIMIT:]


@dataclass(frozen=True)
class Observation:
    """What one move means for its order, and the state to write (None: nothing to write)."""

    kind: ObservationKind
    status: str
    entry: int
    # The status the order left for this entry: the pipeline's own, or the CRM's word for the
    # first move of an order the pipeline has never seen. None for anything but `entered`.
    previous_status: str | None
    reason: str
    new_state: OrderState | None
    # The identity of the move that started the entry this move belongs to (`entered`,
    # `repeat`): the notification is named after it. None when the move belongs to no entry.
    opened_by: str | None = None
    clamped: bool = False
    # Whether the move is the latest word on its entry (not older than what was seen): only such
    # a move may correct the entry's notification (a phone fixed in the CRM, then a re-save).
    latest: bool = False


# A plain number, or a CRM history record's id (`bitrix24:stagehistory:1234`, `pipeline.crm.sync`).
_NUMBERED_REF = re.compile(r"((?:[a-z0-9]{1,20}:[a-z]{1,20}:)?)(\d{1,30})")


def _ref_after(ref: str | None, other: str | None) -> bool | None:
    """Whether a CRM transition id comes after another: numbers (`1234`), and history record ids
    of one kind (`bitrix24:stagehistory:1234`), by their number; None if the ids say nothing about
    their order."""
    if ref is None or other is None:
        return None
    mine, theirs = _NUMBERED_REF.fullmatch(ref), _NUMBERED_REF.fullmatch(other)
    if mine and theirs and mine.group(1) == theirs.group(1):
        return int(mine.group(2)) > int(theirs.group(2))
    return None


def _follows_at_same_stamp(state: OrderState, move: Move) -> bool:
    """Two moves with one stamp: ordered by the chain of statuses, then by the CRM's ids, and only
    without either by arrival (the later one follows)."""
    if move.previous_status is not None and move.previous_status == state.status:
        return True
    if state.entered_from is not None and state.entered_from == move.status:
        return False
    by_ref = _ref_after(move.transition_ref, state.transition_ref)
    return True if by_ref is None else by_ref


def observe(state: OrderState | None, move: Move) -> Observation:
    """Place one move in its order's history (pure: the caller reads and writes the state)."""
    clamped = move.clamped
    if state is None:
        if move.resave:
            reason = f"a re-save in {move.status!r} of an order with no move seen yet: not a move"
            return Observation("resave", move.status, 0, None, reason, None, clamped=clamped)
        first = OrderState.first(move)
        return Observation(
            "entered",
            move.status,
            1,
            move.previous_status,
            "first move of the order",
            first,
            move.identity,
            clamped,
        )
    if state.has_seen(move):
        if move.status == state.status:
            return Observation(
                "repeat",
                move.status,
                state.entry,
                None,
                f"a move of the current entry already seen (entry {state.entry}, {state.status!r})",
                None,
                state.opened_by,
                clamped,
                latest=move.stamp >= state.seen_at,
            )
        reason = f"a move into {move.status!r} already seen; the order is now {state.status!r}"
        return Observation("seen", move.status, state.entry, None, reason, None, clamped=clamped)
    same_status = move.status == state.status
    new_transition = (
        same_status
        and not move.resave
        and None not in (move.transition_ref, state.transition_ref)
        and move.transition_ref != state.transition_ref
    )
    if same_status and not new_transition:
        seen_at = state.seen_at if move.clamped else max(state.seen_at, move.stamp)
        refreshed = replace(
            state,
            seen_at=seen_at,
            transition_ref=state.transition_ref or move.transition_ref,
            seen=state.remembering(move) if not move.resave else state.seen,
            version=state.version + 1,
        )
        changed = refreshed.seen != state.seen or seen_at != state.seen_at
        what = "a re-save" if move.resave else "another move"
        return Observation(
            "repeat",
            move.status,
            state.entry,
            None,
            f"{what} in the status the order is in ({state.status!r}, entry {state.entry})",
            refreshed if changed else None,
            state.opened_by,
            clamped,
            latest=move.stamp >= state.seen_at,
        )
    if move.resave:
        reason = f"a re-save in {move.status!r} while the order is {state.status!r}: not a move"
        return Observation("resave", move.status, state.entry, None, reason, None, clamped=clamped)
    tie = move.stamp == state.seen_at
    # The move the current entry left, arriving after it: its past, whatever the stamps say,
    # unless the CRM says it came from the current status (a return), or the move's own
    # trustworthy stamp is later than the current entry's clamped one, which is only an upper
    # bound of when that entry began (its receipt): a move after it cannot be its past.
    after_the_entry = state.entered_clamped and not move.clamped and move.stamp > state.entered_at
    left_by_current = (
        (state.entered_clamped or move.clamped)
        and move.status == state.entered_from
        and move.previous_status != state.status
        and not after_the_entry
    )
    # A clamped stamp orders nothing against what was seen since: the CRM's own ids decide.
    before_by_ref = move.clamped and _ref_after(move.transition_ref, state.transition_ref) is False
    if (
        move.stamp < state.seen_at
        or (tie and not _follows_at_same_stamp(state, move))
        or left_by_current
        or before_by_ref
    ):
        reason = (
            f"occurred at {iso(move.stamp)}, before the latest move seen for the order "
            f"({iso(state.seen_at)}, status {state.status!r})"
        )
        stale = replace(state, seen=state.remembering(move), version=state.version + 1)
        return Observation("stale", move.status, state.entry, None, reason, stale, clamped=clamped)
    entry = state.entry + 1
    entered = OrderState(
        state.order_key,
        move.status,
        entry,
        move.identity,
        move.previous_status,
        move.stamp,
        state.seen_at if move.clamped else move.stamp,
        move.transition_ref,
        state.remembering(move),
        state.version + 1,
        move.clamped,
    )
    if same_status:
        # The CRM names a new transition into the status the order is in: it left and came back
        # without the pipeline seeing the exit, so only the CRM can say where it came from.
        reason = f"re-entered {move.status!r} (CRM transition {move.transition_ref!r})"
        return Observation(
            "entered", move.status, entry, move.previous_status, reason, entered, move.identity, clamped
        )
    reason = f"{state.status!r} -> {move.status!r}"
    return Observation("entered", move.status, entry, state.status, reason, entered, move.identity, clamped)
