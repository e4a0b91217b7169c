"""Which order status transitions send an SMS, and with which text: configuration, not code.

The rules are the team's, not the pipeline's: `team/sms_rules.json` (README.md "What is yours, what
is ours"; the shipped one is an example). The stack and the local runtime read that file at synth
or start and pass it to the functions in `SMS_RULES_JSON` (inline JSON, or a file path;
`infra.environment`); without the variable the file is read. They are validated when loaded, and
at synth, so a typo in a placeholder or two rules claiming the same transition fail a deployment,
not a customer's SMS. A template may also name any field of the order,
`{order.<field>}` (`{order.tracking_number}`: orders carry the CRM's extra fields); whether an
order has it is known only per event, so an order without it fails the event at render
(`MissingOrderFieldError`, a permanent error: dead-lettered before anything is recorded).
The `sms` consumer receives every status change, whatever the rules (it keeps each order's
history), and only the rules decide what is sent.
"""

from __future__ import annotations

import os
import re
import string
from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from pipeline.crm.contract import CrmEvent
from pipeline.errors import PermanentError
from pipeline.team import team_file

RULES_ENV = "SMS_RULES_JSON"
# In the team's folder (`pipeline.team`); in Lambda the stack sets RULES_ENV and no file is read.
RULES_FILE_NAME = "sms_rules.json"
# How old (hours since the CRM's move) a notification may be when it is sent: past it, its news is
# stale (`pipeline.sms.endstates`: `expired`). A rule's `max_age_hours` sets it for that rule; the
# others take the deployment's one SMS age setting (`sms_max_age_minutes`, SMS_MAX_AGE_SECONDS,
# which the CRM sources use too). End User Messaging gets the rest as its `TimeToLive`, whose
# longest is 72 hours (SendTextMessage's 259,200 s): the bound.
MAX_AGE_LIMIT_HOURS = 72


def rules_file() -> Path:
    """The team's SMS rules file."""
    return team_file(RULES_FILE_NAME)


# What a template may use, all taken from the CRM event.
PLACEHOLDERS = frozenset({"order_id", "status", "previous_status", "customer_name"})
# Plus any one field of the order, by name: `{order.tracking_number}` (no deeper path, no index).
ORDER_FIELD = re.compile(r"order\.([a-z][a-z0-9_]{0,63})", flags=re.I)


class MissingOrderFieldError(PermanentError):
    """A rule's `{order.<field>}` that this event's order does not carry (or not as text/number)."""


def _placeholders(template: str) -> list[str]:
    """Field names in a `str.format` template; refuses conversions, format specs and any attribute
    or index access but `order.<field>`."""
    names = []
    for _, field_name, format_spec, conversion in string.Formatter().parse(template):
        if field_name is None:
            continue
        known = field_name in PLACEHOLDERS or ORDER_FIELD.fullmatch(field_name)
        if format_spec or conversion or not known:
            allowed = ", ".join("{" + name + "}" for name in sorted(PLACEHOLDERS))
            raise ValueError(
                f"unsupported placeholder {{{field_name}}}; use only {allowed} or {{order.<field>}}"
            )
        names.append(field_name)
    return names


def _order_field(event: CrmEvent, field: str, rule: str) -> str:
    value = event.order.model_dump().get(field)
    # bool is an int: "True" in an SMS is never what a rule meant.
    if isinstance(value, bool) or not isinstance(value, str | int | float) or value == "":
        raise MissingOrderFieldError(
            f"SMS rule {rule!r} uses {{order.{field}}}, which order {event.order.id} does not have"
            + ("" if value is None else " as text or a number")
        )
    return str(value)


class SmsRule(BaseModel):
    """A transition into `status` (from any other status, or only from `from_statuses`) sends `template`."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9_]{1,64}$")
    status: str = Field(min_length=1, max_length=64)
    from_statuses: tuple[str, ...] = ()
    template: str = Field(min_length=1, max_length=1_600)
    max_age_hours: float | None = Field(default=None, gt=0, le=MAX_AGE_LIMIT_HOURS)

    @field_validator("template")
    @classmethod
    def _known_placeholders(cls, template: str) -> str:
        _placeholders(template)
        return template

    @model_validator(mode="after")
    def _a_real_change(self) -> SmsRule:
        if self.status in self.from_statuses:
            raise ValueError(f"rule {self.name!r}: a re-save ({self.status} -> {self.status}) never sends")
        return self

    def matches(self, status: str, previous_status: str | None) -> bool:
        if status != self.status or previous_status == status:
            return False
        return not self.from_statuses or previous_status in self.from_statuses

    def overlaps(self, other: SmsRule) -> bool:
        """Whether some transition would match both rules."""
        if self.status != other.status:
            return False
        if not self.from_statuses or not other.from_statuses:
            return True
        return bool(set(self.from_statuses) & set(other.from_statuses))

    def render(self, event: CrmEvent) -> str:
        """The SMS text; raises MissingOrderFieldError for an `{order.<field>}` the order lacks."""
        values = {
            "order_id": event.order.id,
            "status": event.order.status,
            "previous_status": event.order.previous_status or "",
            "customer_name": event.customer.name,
        }
        parts = []
        for literal, field_name, _, _ in string.Formatter().parse(self.template):
            parts.append(literal)
            if field_name is None:
                continue
            order_field = ORDER_FIELD.fullmatch(field_name)
            parts.append(
                _order_field(event, order_field.group(1), self.name) if order_field else values[field_name]
            )
        return "".join(parts)


class SmsRules(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    version: int = Field(ge=1, le=1)
    rules: tuple[SmsRule, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _unambiguous(self) -> SmsRules:
        names = [rule.name for rule in self.rules]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"duplicate rule names: {', '.join(duplicates)}")
        for index, rule in enumerate(self.rules):
            for other in self.rules[index + 1 :]:
                if rule.overlaps(other):
                    raise ValueError(f"rules {rule.name!r} and {other.name!r} match the same transition")
        return self

    def sends_for(self, status: str) -> bool:
        """Whether an entry into `status` may send an SMS (from some previous status)."""
        return any(rule.status == status for rule in self.rules)

    def max_age(self, rule_name: str | None, default: timedelta) -> timedelta:
        """The rule's maximum age at send time; `default` for a rule without one (or removed)."""
        rule = next((rule for rule in self.rules if rule.name == rule_name), None)
        hours = rule.max_age_hours if rule is not None else None
        return timedelta(hours=hours) if hours else default

    def rule_for(self, status: str, previous_status: str | None) -> SmsRule | None:
        return next((rule for rule in self.rules if rule.matches(status, previous_status)), None)


def load_rules(source: str | None = None) -> SmsRules:
    """The rules from `source` (inline JSON or a path), else `SMS_RULES_JSON`, else `rules_file()`."""
    source = source if source is not None else os.environ.get(RULES_ENV, "")
    if not source.strip():
        text = rules_file().read_text(encoding="utf-8")
    elif source.lstrip().startswith("{"):
        text = source
    else:
        text = Path(source).read_text(encoding="utf-8")
    return SmsRules.model_validate_json(text)
