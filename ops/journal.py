"""SMS journal records (`id = "sms#<key>"` in the journal table): show, list unknown, resolve.

An SMS whose send outcome is `unknown` (the gateway call ended without an answer; it may have
been taken) is never resent blindly: an operator checks with the provider and resolves it,
`--accepted` (it arrived: closed) or `--not-sent` (it never did: the scheduled reconciler sends
it once more with the same key on its next run). A `failed` one (refused for good, or attempts
used up) takes `--not-sent` once its cause is fixed, or `--abandon` (never sent; also for an
`unknown`). This is the product's one operator entry point
for SMS records. Reads and state changes go through `pipeline.sms.journal`, the same code the
workers and the reconciler use.
Phone numbers are masked in everything printed unless --show-phone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from infra.outputs import OutputKey
from ops.context import Context
from ops.errors import OpsError
from ops.text import format_age
from pipeline.observability import mask_phone
from pipeline.sms.journal import KEY_PREFIX, Journal, Notification, State, iso

RESOLVED_BY = "operator"
_NOT_SHOWN = frozenset({"id"})
# A phone number written the international way (+ and 8..15 digits, spaced or not): masked in
# free text (the SMS body may hold a second number). Timestamps, order ids and keys never start
# with '+', so they print as they are.
_INTERNATIONAL_PHONE = re.compile(r"(?<![\w+])\+\d(?:[\s().-]{0,2}\d){7,14}(?!\d)")


def mask_international(text: str) -> str:
    """Every +international number in `text` masked, ids and timestamps left as they are."""
    return _INTERNATIONAL_PHONE.sub(lambda match: mask_phone(match.group(0)), text)


def _journal(ctx: Context) -> Journal:
    return Journal(ctx.stack().require(OutputKey.JOURNAL_TABLE))


def _masker(ctx: Context, recipient: str | None) -> Callable[[str], str]:
    """Masks the record's recipient wherever it appears, and any +international number; nothing else."""
    if ctx.option("show_phone"):
        return lambda text: text
    phones = {recipient, recipient.lstrip("+")} if recipient else set()
    phones = {p for p in phones if p and sum(c.isdigit() for c in p) >= 5}

    def mask(text: str) -> str:
        for phone in sorted(phones, key=len, reverse=True):
            text = text.replace(phone, mask_phone(phone))
        return _INTERNATIONAL_PHONE.sub(lambda match: mask_phone(match.group(0)), text)

    return mask


def _masked(value: Any, mask: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, dict):
        return {k: _masked(v, mask) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_masked(v, mask) for v in value]
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def _shown_record(ctx: Context, item: dict[str, Any]) -> dict[str, Any]:
    recipient = item.get("recipient")
    mask = _masker(ctx, recipient if isinstance(recipient, str) else None)
    return {name: _masked(item[name], mask) for name in sorted(set(item) - _NOT_SHOWN)}


def record_view(ctx: Context, key: str) -> dict[str, Any]:
    """One record's fields as `journal show` prints them (phones masked unless --show-phone)."""
    item = _journal(ctx).table.get_item(Key={"id": KEY_PREFIX + key}, ConsistentRead=True).get("Item")
    if item is None:
        raise OpsError(f"no SMS journal record for key {key!r}")
    return _shown_record(ctx, item)


# Records a search by order or phone reads at most (a scan: the journal has no index by either).
SEARCH_SCAN_LIMIT = 5000


def find_records(ctx: Context, order: str | None = None, phone: str | None = None) -> list[dict[str, Any]]:
    """SMS records of an order (`bitrix24:42`, or its id alone) or of a phone, given masked as
    shown (`+37529*****67`) or by its last digits; newest first, fields as `record_view`'s."""
    order, phone = (order or "").strip(), (phone or "").strip()
    if not order and not phone:
        raise OpsError("give an order or a (masked) phone to search the SMS journal by")
    digits = "".join(c for c in phone if c.isdigit())
    table = _journal(ctx).table
    request: dict[str, Any] = {"FilterExpression": "begins_with(#id, :prefix)"}
    request["ExpressionAttributeNames"] = {"#id": "id"}
    request["ExpressionAttributeValues"] = {":prefix": KEY_PREFIX}
    found: list[dict[str, Any]] = []
    read = 0
    while read < SEARCH_SCAN_LIMIT:
        page = table.scan(**request)
        read += int(page.get("ScannedCount", 0))
        for item in page.get("Items", []):
            order_id = str(item.get("order_id") or "")
            recipient = str(item.get("recipient") or "")
            if order and order not in (order_id, order_id.split(":", 1)[-1]):
                continue
            if phone and not (mask_phone(recipient) == phone or (digits and recipient.endswith(digits))):
                continue
            found.append({"key": str(item["id"])[len(KEY_PREFIX) :], **_shown_record(ctx, item)})
        if "LastEvaluatedKey" not in page:
            break
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    return sorted(found, key=lambda row: str(row.get("received_at") or ""), reverse=True)


def show(ctx: Context) -> None:
    key: str = ctx.option("key")
    record = record_view(ctx, key)
    if ctx.wants_json():
        ctx.json({"key": key, "record": record})
        return
    ctx.field("key", key)
    for name, value in record.items():
        ctx.field(name, value if isinstance(value, str) else json.dumps(value, sort_keys=True))


def unknown_rows(ctx: Context) -> list[dict[str, Any]]:
    """From the `by_state` index (oldest first), so a large table is not scanned; the same query
    the reconciler runs."""
    journal = _journal(ctx)
    now = journal.clock.now()
    found: list[dict[str, Any]] = []
    for record in journal.records_in_state(State.UNKNOWN):
        since = record.state_since
        found.append(
            {
                "key": record.key,
                "order": record.order_id,
                "unknown_since": iso(since),
                "age_seconds": int((now - since).total_seconds()),
                "recipient": _masker(ctx, record.recipient)(record.recipient),
                "attempts": record.attempt_count,
                "resends": record.reconcile_resends,
                "last_outcome": record.attempts[-1].get("outcome") if record.attempts else None,
            }
        )
    return found


def list_unknown(ctx: Context) -> None:
    found = unknown_rows(ctx)
    if ctx.wants_json():
        ctx.json({"state": State.UNKNOWN.value, "records": found})
        return
    for row in found:
        ctx.line(
            f"{row['key']}  order={row['order'] or '-'}"
            f"  unknown_since={row['unknown_since']} ({format_age(row['age_seconds'])})"
            f"  recipient={row['recipient']}  attempts={row['attempts']}"
            f"  resends={row['resends']}  last={row['last_outcome'] or '-'}"
        )
    ctx.line(f"{len(found)} SMS record(s) in state unknown")


@dataclass(frozen=True)
class Decision:
    """One way a person closes a record: which records it applies to, and what it means."""

    from_states: tuple[State, ...]
    meaning: str
    allowed: str


DECISIONS = {
    "accepted": Decision(
        (State.UNKNOWN,),
        "closed; it will not be sent again",
        "only unknown records can be marked accepted",
    ),
    "abandon": Decision(
        (State.UNKNOWN, State.FAILED),
        "abandoned: never sent, no longer watched by the alarms; a redrive acknowledges it unsent",
        "only unknown or failed records can be abandoned",
    ),
    "not-sent": Decision(
        (State.UNKNOWN, State.FAILED),
        "resend requested: the reconciler's next scheduled run sends it once, with the same key",
        "only unknown or failed records can be sent again",
    ),
}


def _refusal(key: str, record: Notification, decision: Decision) -> OpsError | None:
    """Why `decision` cannot apply to `record` as read (the journal's own conditions, checked
    first so that --dry-run answers what the real run would)."""
    # An abandoned record is `failed` for good: no decision of a person reopens it.
    abandoned = record.abandoned_at is not None
    if record.state in decision.from_states and not abandoned:
        return None
    state = "abandoned" if abandoned else record.state.value
    return OpsError(f"SMS record {key!r} is {state!r}: {decision.allowed}")


def resolve(ctx: Context) -> None:
    key: str = ctx.option("key")
    journal = _journal(ctx)
    before = journal.get(key)
    if before is None:
        raise OpsError(f"no SMS journal record for key {key!r}")
    name = "accepted" if ctx.option("accepted") else "abandon" if ctx.option("abandon") else "not-sent"
    decision = DECISIONS[name]
    refusal = _refusal(key, before, decision)
    if refusal is not None:
        raise refusal
    if not ctx.confirm(f"resolve SMS record {key!r} (now {before.state.value}) as --{name}"):
        return
    if name == "accepted":
        resolved = journal.resolve_accepted(key, via=RESOLVED_BY)
    elif name == "abandon":
        resolved = journal.abandon(key, by=RESOLVED_BY)
    else:
        resolved = journal.request_resend(key, by=RESOLVED_BY)
    if resolved is None:  # it changed between the read and the write
        raise _refusal(key, journal.get(key) or before, decision) or OpsError(
            f"SMS record {key!r} changed while resolving it: look again (journal show)"
        )
    ctx.line(f"SMS record {key!r}: {before.state.value} -> {resolved.state.value} ({decision.meaning})")
