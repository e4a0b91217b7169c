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

from typing import Any

from infra.outputs import OutputKey
from ops.context import Context
from ops.errors import OpsError
from ops.text import format_age
from pipeline.observability import mask_phone, mask_phones
from pipeline.sms.journal import KEY_PREFIX, Journal, State, iso

RESOLVED_BY = "operator"
# Attributes that hold identifiers, never a phone number: printed as they are (an order id of
# many digits would otherwise look like a phone number to the masking).
_IDENTIFIERS = frozenset(
    {
        "correlation_id",
        "message_id",
        "delivery_message_id",
        "order_id",
        "transition",
        "crm_event_id",
        "lease_owner",
        "last_write",
    }
)
_NOT_SHOWN = frozenset({"id"})


def _journal(ctx: Context) -> Journal:
    return Journal(ctx.stack().require(OutputKey.JOURNAL_TABLE))


def _shown(ctx: Context, name: str, value: Any) -> str:
    text = value if isinstance(value, str) else str(value)
    if ctx.option("show_phone") or name in _IDENTIFIERS:
        return text
    return mask_phone(text) if name == "recipient" else mask_phones(text)


def show(ctx: Context) -> None:
    key: str = ctx.option("key")
    item = _journal(ctx).table.get_item(Key={"id": KEY_PREFIX + key}, ConsistentRead=True).get("Item")
    if item is None:
        raise OpsError(f"no SMS journal record for key {key!r}")
    ctx.field("key", key)
    for name in sorted(set(item) - _NOT_SHOWN):
        ctx.field(name, _shown(ctx, name, item[name]))


def list_unknown(ctx: Context) -> None:
    """From the `by_state` index (oldest first), so a large table is not scanned; the same query
    the reconciler runs."""
    journal = _journal(ctx)
    now = journal.clock.now()
    count = 0
    for record in journal.records_in_state(State.UNKNOWN):
        count += 1
        since = record.state_since
        last = record.attempts[-1].get("outcome", "-") if record.attempts else "-"
        ctx.line(
            f"{record.key}  unknown_since={iso(since)} ({format_age((now - since).total_seconds())})"
            f"  recipient={_shown(ctx, 'recipient', record.recipient)}  attempts={record.attempt_count}"
            f"  resends={record.reconcile_resends}  last={last}"
        )
    ctx.line(f"{count} SMS record(s) in state unknown")


def resolve(ctx: Context) -> None:
    key: str = ctx.option("key")
    journal = _journal(ctx)
    before = journal.get(key)
    if before is None:
        raise OpsError(f"no SMS journal record for key {key!r}")
    if ctx.option("accepted"):
        resolved = journal.resolve_accepted(key, via=RESOLVED_BY)
        meaning = "closed; it will not be sent again"
        allowed = "only unknown records can be marked accepted"
    elif ctx.option("abandon"):
        resolved = journal.abandon(key, by=RESOLVED_BY)
        meaning = "abandoned: never sent, no longer watched by the alarms; a redrive acknowledges it unsent"
        allowed = "only unknown or failed records can be abandoned"
    else:
        resolved = journal.request_resend(key, by=RESOLVED_BY)
        meaning = "resend requested: the reconciler's next scheduled run sends it once, with the same key"
        allowed = "only unknown or failed records can be sent again"
    if resolved is None:
        current = journal.get(key) or before
        state = "abandoned" if current.abandoned_at is not None else current.state.value
        raise OpsError(f"SMS record {key!r} is {state!r}: {allowed}")
    ctx.line(f"SMS record {key!r}: {before.state.value} -> {resolved.state.value} ({meaning})")
