"""Each order's status history as the pipeline itself has seen it: what makes a notification's identity.

A CRM's delivery ids say nothing about the business event: a CRM retries a webhook under a new
id, a manager presses "ready for pickup" twice, and an id may even be reused for another change.
So the `sms` consumer sees every status change of every order (not only statuses with a rule)
and keeps, per order, one journal item (`id = "sms-order#<sha256(order id)>"`) holding the
status the order is in, when it entered it, the latest event time seen, and `entry`: how many
status entries the pipeline has counted for the order. An event is then one of:

- `entered`: a status different from the current one (or the first event of the order), or the
  same status under a different CRM `transition_id` (a re-entry whose exit the CRM did not
  report); a new entry, `entry + 1`. A notification, if a rule is due, is named after it;
- `repeat`: the status the order is already in (a retry under any id, a second press, a re-save):
  the current entry again, so the same notification key, and never a second SMS;
- `stale`: it occurred before the latest event already seen for the order (a delayed
  `ready_for_pickup` arriving after `shipped`): nothing is sent.

Entries are ordered by the CRM's `occurred_at`; two events of one instant are taken in arrival
order. The state is written with a version condition, in one transaction with the notification's
journal record (`Journal.record_entry`), so a crash can never leave one without the other.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pipeline.sms.journal import iso, parse_iso

ORDER_PREFIX = "sms-order#"

ObservationKind = Literal["entered", "repeat", "stale"]


def order_item_id(order_id: str) -> str:
    """Hashed: an order id can be long or look like a phone number; the item id stays short and plain."""
    return ORDER_PREFIX + hashlib.sha256(order_id.encode()).hexdigest()


@dataclass(frozen=True)
class OrderState:
    """One order's current status entry, as the journal holds it."""

    order_id: str
    status: str
    entry: int  # status entries counted so far; the current one's number
    entered_at: datetime  # the CRM's occurred_at of the event that entered `status`
    seen_at: datetime  # the latest occurred_at applied to this order
    transition_ref: str | None  # the CRM's transition id of the current entry, if it sends one
    version: int

    @classmethod
    def first(
        cls, order_id: str, status: str, occurred_at: datetime, transition_ref: str | None = None
    ) -> OrderState:
        """The state of an order the pipeline has never seen, after its first event."""
        return cls(order_id, status, 1, occurred_at, occurred_at, transition_ref, 1)

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> OrderState:
        return cls(
            order_id=str(item["order_id"]),
            status=str(item["status"]),
            entry=int(item["entry"]),
            entered_at=parse_iso(item["entered_at"]),
            seen_at=parse_iso(item["seen_at"]),
            transition_ref=item.get("transition_ref"),
            version=int(item["version"]),
        )

    def item(self, expiration: int) -> dict[str, Any]:
        item: dict[str, Any] = {
            "id": order_item_id(self.order_id),
            "order_id": self.order_id,
            "status": self.status,
            "entry": self.entry,
            "entered_at": iso(self.entered_at),
            "seen_at": iso(self.seen_at),
            "version": self.version,
            "expiration": expiration,
        }
        if self.transition_ref is not None:
            item["transition_ref"] = self.transition_ref
        return item


@dataclass(frozen=True)
class Observation:
    """What one event means for its order, and the state to write (None: nothing to write)."""

    kind: ObservationKind
    status: str
    entry: int
    # The status the order left for this entry: the pipeline's own, or the CRM's word for the
    # first event of an order the pipeline has never seen.
    previous_status: str | None
    reason: str
    new_state: OrderState | None

    @property
    def transition(self) -> str:
        """The notification key's transition part: which entry into which status."""
        return f"{self.status}#{self.entry}"


def observe(
    state: OrderState | None,
    *,
    order_id: str,
    status: str,
    occurred_at: datetime,
    crm_previous_status: str | None,
    transition_ref: str | None,
) -> Observation:
    """Place one order-status event in the order's history (pure: the caller reads and writes)."""
    if state is None:
        first = OrderState.first(order_id, status, occurred_at, transition_ref)
        return Observation("entered", status, 1, crm_previous_status, "first event of the order", first)
    same_status = status == state.status
    known_refs = None not in (transition_ref, state.transition_ref)
    another_transition = known_refs and transition_ref != state.transition_ref
    if same_status and not another_transition:
        seen = max(state.seen_at, occurred_at)
        refreshed = OrderState(
            state.order_id,
            state.status,
            state.entry,
            state.entered_at,
            seen,
            state.transition_ref or transition_ref,
            state.version + 1,
        )
        changed = seen != state.seen_at or refreshed.transition_ref != state.transition_ref
        return Observation(
            "repeat",
            status,
            state.entry,
            None,
            f"the order is already {status!r} (entry {state.entry})",
            refreshed if changed else None,
        )
    if occurred_at < state.seen_at:
        return Observation(
            "stale",
            status,
            state.entry,
            None,
            f"occurred at {iso(occurred_at)}, before the latest event seen for the order "
            f"({iso(state.seen_at)}, status {state.status!r})",
            None,
        )
    entry = state.entry + 1
    entered = OrderState(
        state.order_id, status, entry, occurred_at, occurred_at, transition_ref, state.version + 1
    )
    if same_status:
        # The CRM names a new transition into the status the order is in: it left and came back
        # without the pipeline seeing the exit, so only the CRM can say where it came from.
        reason = f"re-entered {status!r} (CRM transition {transition_ref!r})"
        return Observation("entered", status, entry, crm_previous_status, reason, entered)
    return Observation("entered", status, entry, state.status, f"{state.status!r} -> {status!r}", entered)
