"""`ops sms opt-out PHONE` / `opt-in PHONE`: the suppression list (`pipeline.sms.endstates`).

For HTTP gateways and local runs, which keep no opt-out list of their own (End User Messaging
keeps its own: a STOP reply puts the number there, and its refusal ends a send `suppressed`
too). A number on the list gets no order SMS: each notification ends `suppressed`, counted,
never retried nor dead-lettered. The number is printed masked.
"""

from __future__ import annotations

import re

from infra.outputs import OutputKey
from ops.context import Context
from ops.errors import OpsError
from pipeline.observability import mask_phone
from pipeline.sms import endstates
from pipeline.sms.journal import Journal

OPERATOR = "operator"
E164 = re.compile(r"^\+[1-9]\d{6,14}$")


def _phone(ctx: Context) -> str:
    phone = str(ctx.option("phone") or "").strip()
    if not E164.fullmatch(phone):
        raise OpsError("PHONE must be an E.164 number (+ and 8..15 digits)")
    return phone


def _journal(ctx: Context) -> Journal:
    return Journal(ctx.stack().require(OutputKey.JOURNAL_TABLE))


def opt_out(ctx: Context) -> None:
    phone = _phone(ctx)
    added = endstates.opt_out(_journal(ctx), phone, by=OPERATOR)
    state = "opted out" if added else "was already opted out"
    ctx.line(f"{mask_phone(phone)} {state}: its order SMS end `suppressed`")


def opt_in(ctx: Context) -> None:
    phone = _phone(ctx)
    removed = endstates.opt_in(_journal(ctx), phone)
    state = "opted back in" if removed else "was not opted out"
    ctx.line(f"{mask_phone(phone)} {state}")
