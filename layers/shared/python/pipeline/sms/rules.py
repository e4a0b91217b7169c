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

Languages (`schema_version` 2 of the file): a rule's `template` is a text per language
(`{"en": ..., "ru": ...}`); the customer's language is the CRM event's `customer.language` (a
field the CRM sources may map) if it names a configured one, else the phone's country
(`language_by_country`), else `fallback_language`. A rule whose `template` is one string is the
fallback language's text (version 1 files: every rule). A rule without a text for a configured
language is refused.

Size: each field is cut, at render, to its maximum length (`FIELD_MAX_LENGTHS`, the file's
`field_max_lengths`), so the longest text a template can make is known before anything is sent:
`worst_case` renders it (fields at their maximum, of any script where a field may be), and
`pipeline.sms.encoding` counts its parts; the synth refuses a template over the part limit.

The rules are read on the `sms` function's cold path: they are dataclasses checked by
`pipeline.validation`, not pydantic models (importing pydantic and building its models costs about
0.4x of `import boto3` per cold start, docs/perf.md). They accept and refuse what the models they
replace did, with the same locations and messages (tests/unit/sms/test_sms_rules_oracle.py).
"""

from __future__ import annotations

import os
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from pipeline import phones
from pipeline.crm.event_model import CrmEvent
from pipeline.errors import PermanentError
from pipeline.json_text import parse_json
from pipeline.sms.encoding import SmsSize, size
from pipeline.team import team_file
from pipeline.validation import Fields

RULES_ENV = "SMS_RULES_JSON"
# In the team's folder (`pipeline.team`); in Lambda the stack sets RULES_ENV and no file is read.
RULES_FILE_NAME = "sms_rules.json"
# How old (hours since the CRM's move) a notification may be when it is sent: past it, its news is
# stale (`pipeline.sms.endstates`: `expired`). A rule's `max_age_hours` sets it for that rule; the
# others take the deployment's one SMS age setting (`sms_max_age_minutes`, SMS_MAX_AGE_SECONDS,
# which the CRM sources use too). End User Messaging gets the rest as its `TimeToLive`, whose
# longest is 72 hours (SendTextMessage's 259,200 s): the bound.
MAX_AGE_LIMIT_HOURS = 72
# The deployment's one SMS age setting, in seconds (the stack sets it from `sms_max_age_minutes`).
MAX_AGE_ENV = "SMS_MAX_AGE_SECONDS"
DEFAULT_MAX_AGE = timedelta(hours=2)


def max_age() -> timedelta:
    """The deployment's SMS age: here, not in `pipeline.crm.sync` (which reads it too), so that the
    `sms` function's init does not import the CRM sources' machinery for one variable."""
    value = os.environ.get(MAX_AGE_ENV, "").strip()
    return timedelta(seconds=int(value)) if value else DEFAULT_MAX_AGE


def rules_file() -> Path:
    """The team's SMS rules file."""
    return team_file(RULES_FILE_NAME)


# What a template may use, all taken from the CRM event.
PLACEHOLDERS = frozenset({"order_id", "status", "previous_status", "customer_name"})
# Plus any one field of the order, by name: `{order.tracking_number}` (no deeper path, no index).
ORDER_FIELD = re.compile(r"order\.([a-z][a-z0-9_]{0,63})", flags=re.I)


# The longest value each field is sent with (longer ones are cut at render), in UTF-16 units:
# the one source of what `worst_case` assumes. A rules file may change them (`field_max_lengths`).
FIELD_MAX_LENGTHS: dict[str, int] = {
    "order_id": 20,
    "status": 32,
    "previous_status": 32,
    "customer_name": 40,
    "order.*": 32,  # any `{order.<field>}`, unless named on its own (`"order.tracking_number": 30`)
}
# Fields that are only ever GSM-7 in the worst case (an order number); the others may be in any
# script (a Cyrillic name makes an English text UCS-2), so their worst case is UCS-2.
GSM_ONLY_FIELDS = frozenset({"order_id"})
LANGUAGE = re.compile(r"^[a-z]{2,3}$")
# Billed parts a template may come to at its longest (`SmsRules.sizes`) unless the file says
# otherwise (`max_parts`): more is refused at synth, with its count.
MAX_PARTS = 3
MAX_PARTS_BOUND = 10
# End User Messaging's `MaxPrice` (USD; botocore's service model: 2..8 characters of this form).
MAX_PRICE_PATTERN = r"^[0-9]{0,2}\.[0-9]{1,5}$"
# The CRM event's field naming the customer's language (BCP 47: "ru", "de-AT"; its first subtag is used).
LANGUAGE_FIELD = "language"


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
    value = event.order.value(field)
    # bool is an int: "True" in an SMS is never what a rule meant.
    if isinstance(value, bool) or not isinstance(value, str | int | float) or value == "":
        raise MissingOrderFieldError(
            f"SMS rule {rule!r} uses {{order.{field}}}, which order {event.order.id} does not have"
            + ("" if value is None else " as text or a number")
        )
    return str(value)


def _known_placeholders(template: str | dict[str, str]) -> str | dict[str, str]:
    for language, text in template.items() if isinstance(template, dict) else [("", template)]:
        if language and not LANGUAGE.fullmatch(language):
            raise ValueError(f"language {language!r} is not an ISO 639 code (e.g. en, ru, de)")
        if not 1 <= len(text) <= 1_600:
            raise ValueError("a template is 1..1600 characters")
        _placeholders(text)
    return template


_RULE = "SmsRule"
_RULE_FIELDS = ("name", "status", "from_statuses", "template", "max_age_hours")


def _rule_values(fields: Fields) -> dict[str, Any]:
    """A rule's fields checked, as the values to hold (`fields.done()` raises the refusals)."""
    values = {
        "name": fields.text("name", pattern=r"^[a-z0-9_]{1,64}$"),
        "status": fields.text("status", min_length=1, max_length=64),
        "from_statuses": fields.text_tuple("from_statuses", default=()),
        "template": fields.text_or_texts("template", min_length=1),
        "max_age_hours": fields.number("max_age_hours", float, gt=0, le=MAX_AGE_LIMIT_HOURS, default=None),
    }
    values["template"] = fields.checked("template", values["template"], _known_placeholders)
    return values


@dataclass(frozen=True, kw_only=True)
class SmsRule:
    """A transition into `status` (from any other status, or only from `from_statuses`) sends `template`.

    Checked when made (an invalid one raises `pipeline.validation.Invalid`); `parse` reads one
    from its JSON object.
    """

    name: str
    status: str
    from_statuses: tuple[str, ...] = ()
    # One text (the fallback language's), or a text per language.
    template: str | dict[str, str]
    max_age_hours: float | None = None

    def __post_init__(self) -> None:
        fields = Fields(_RULE, dict(vars(self)), known=_RULE_FIELDS)
        for name, value in _rule_values(fields).items():
            object.__setattr__(self, name, value)
        fields.whole(self._a_real_change)
        fields.done()

    @classmethod
    def parse(cls, data: Any) -> SmsRule:
        """A rule from its JSON object (a rule as it is)."""
        if isinstance(data, SmsRule):
            return data
        fields = Fields(_RULE, data, known=_RULE_FIELDS)
        values = _rule_values(fields)
        fields.done()
        return cls(**values)

    def texts(self, fallback: str) -> dict[str, str]:
        """The rule's text per language (a single string is the fallback language's)."""
        return dict(self.template) if isinstance(self.template, dict) else {fallback: self.template}

    def _a_real_change(self) -> None:
        if self.status in self.from_statuses:
            raise ValueError(f"rule {self.name!r}: a re-save ({self.status} -> {self.status}) never sends")

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

    def render(
        self,
        event: CrmEvent,
        language: str | None = None,
        max_lengths: Mapping[str, int] = FIELD_MAX_LENGTHS,
    ) -> str:
        """The SMS text in `language` (None: the only or first text), each field cut to its maximum
        length; raises MissingOrderFieldError for an `{order.<field>}` the order lacks."""
        texts = self.texts("")
        template = texts[language] if language in texts else next(iter(texts.values()))
        values = {
            "order_id": event.order.id,
            "status": event.order.status,
            "previous_status": event.order.previous_status or "",
            "customer_name": event.customer.name,
        }
        parts = []
        for literal, field_name, _, _ in string.Formatter().parse(template):
            parts.append(literal)
            if field_name is None:
                continue
            order_field = ORDER_FIELD.fullmatch(field_name)
            value = (
                _order_field(event, order_field.group(1), self.name) if order_field else values[field_name]
            )
            parts.append(_cut(value, max_length(field_name, max_lengths)))
        return "".join(parts)


def max_length(field_name: str, max_lengths: Mapping[str, int] = FIELD_MAX_LENGTHS) -> int:
    if field_name in max_lengths:
        return max_lengths[field_name]
    return max_lengths.get("order.*", FIELD_MAX_LENGTHS["order.*"])


def _cut(value: str, units: int) -> str:
    """`value` cut to at most `units` UTF-16 code units, never inside a character."""
    used = 0
    for index, character in enumerate(value):
        used += 2 if ord(character) > 0xFFFF else 1
        if used > units:
            return value[:index]
    return value


@dataclass(frozen=True)
class Sized:
    """A rule's longest text in one language: what `ops sms preview` shows and the synth checks."""

    rule: str
    language: str
    example: str
    size: SmsSize


def worst_case(template: str, max_lengths: Mapping[str, int] = FIELD_MAX_LENGTHS) -> str:
    """`template` with every field at its maximum length: `X` for a GSM-only field, `Ж` (UCS-2)
    for one that may be in any script, so the result has the most parts the template can make."""
    parts = []
    for literal, field_name, _, _ in string.Formatter().parse(template):
        parts.append(literal)
        if field_name is not None:
            parts.append(
                ("X" if field_name in GSM_ONLY_FIELDS else "Ж") * max_length(field_name, max_lengths)
            )
    return "".join(parts)


_RULES = "SmsRules"
_RULES_FIELDS = (
    "version",
    "schema_version",
    "fallback_language",
    "languages",
    "language_by_country",
    "field_max_lengths",
    "max_parts",
    "max_price",
    "rules",
)


def _rules_values(fields: Fields) -> dict[str, Any]:
    """A rules file's fields checked, as the values to hold (`fields.done()` raises the refusals)."""
    return {
        "version": fields.number("version", int, ge=1, le=1, default=None),
        "schema_version": fields.number("schema_version", int, ge=1, le=2, default=None),
        "fallback_language": fields.text("fallback_language", pattern=LANGUAGE.pattern, default="en"),
        "languages": fields.text_tuple("languages", default=()),
        "language_by_country": fields.text_mapping("language_by_country", default={}),
        "field_max_lengths": fields.integer_mapping("field_max_lengths", default={}),
        "max_parts": fields.number("max_parts", int, ge=1, le=MAX_PARTS_BOUND, default=MAX_PARTS),
        "max_price": fields.text(
            "max_price", pattern=MAX_PRICE_PATTERN, min_length=2, max_length=8, default=None
        ),
        "rules": fields.models("rules", SmsRule.parse, min_length=1),
    }


@dataclass(frozen=True, kw_only=True)
class SmsRules:
    """The rules file. Checked when made (an invalid one raises `pipeline.validation.Invalid`, every
    field's reason at once); `parse` reads one from its JSON object, `from_json` from its text.

    Like the pydantic model it replaces, the checks of the whole file (`_languages`, then
    `_unambiguous`) run only once every field is valid, and the first refusal stops the second.
    """

    # The file's format: 1 (`version`, one text per rule) or 2 (`schema_version`, languages).
    version: int | None = None
    schema_version: int | None = None
    fallback_language: str = "en"
    # Every language a rule must have a text in (the fallback is always one).
    languages: tuple[str, ...] = ()
    # ISO 3166 region of the phone -> language, when the event names none (`{"RU": "ru"}`).
    language_by_country: dict[str, str] = field(default_factory=dict)
    field_max_lengths: dict[str, int] = field(default_factory=dict)
    # The most billed parts a text may come to at its longest: a template over it fails the synth.
    max_parts: int = MAX_PARTS
    # End User Messaging's `MaxPrice` per part of every send (USD, "0.05"; None: no cap): a send
    # priced above it is refused (ValidationException PRICE_OVER_THRESHOLD), nothing sent.
    max_price: str | None = None
    rules: tuple[SmsRule, ...]

    def __post_init__(self) -> None:
        fields = Fields(_RULES, dict(vars(self)), known=_RULES_FIELDS)
        for name, value in _rules_values(fields).items():
            object.__setattr__(self, name, value)
        fields.whole(self._languages)
        fields.whole(self._unambiguous)
        fields.done()

    @classmethod
    def parse(cls, data: Any) -> SmsRules:
        """The rules from the file's JSON object (rules as they are)."""
        if isinstance(data, SmsRules):
            return data
        fields = Fields(_RULES, data, known=_RULES_FIELDS)
        values = _rules_values(fields)
        fields.done()
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> SmsRules:
        """The rules from the file's text; text that is no JSON object is refused as `Invalid` too."""
        return parse_json(_RULES, text, cls.parse)

    def _languages(self) -> None:
        if self.version is None and self.schema_version is None:
            raise ValueError("the rules file needs its schema_version (2; or version 1)")
        unknown = [name for name in self.languages if not LANGUAGE.fullmatch(name)]
        if unknown:
            raise ValueError(f"languages {unknown} are not ISO 639 codes (e.g. en, ru, de)")
        for region, language in self.language_by_country.items():
            # Only the form here (the reconciler has no phonenumbers); the synth checks the region.
            if not re.fullmatch(r"[A-Z]{2}", region):
                raise ValueError(f"language_by_country: {region!r} is not an ISO 3166 region (RU, DE)")
            if language not in self.all_languages:
                raise ValueError(f"language_by_country: {language!r} is not in languages")
        for field_name, length in self.field_max_lengths.items():
            known = field_name in FIELD_MAX_LENGTHS or ORDER_FIELD.fullmatch(field_name)
            if not known or not 1 <= length <= 160:
                raise ValueError(f"field_max_lengths: {field_name!r} must be a field, its length 1..160")
        for rule in self.rules:
            texts = rule.texts(self.fallback_language)
            missing = [name for name in self.all_languages if name not in texts]
            extra = [name for name in texts if name not in self.all_languages]
            if missing:
                raise ValueError(f"rule {rule.name!r} has no text in {', '.join(missing)}")
            if extra:
                raise ValueError(f"rule {rule.name!r} has a text in {', '.join(extra)}, not in languages")

    @property
    def all_languages(self) -> tuple[str, ...]:
        """The fallback language first, then the others configured."""
        return (self.fallback_language, *(name for name in self.languages if name != self.fallback_language))

    @property
    def max_lengths(self) -> dict[str, int]:
        return {**FIELD_MAX_LENGTHS, **self.field_max_lengths}

    def language_for(self, event: CrmEvent) -> str:
        """The customer's language: the event's `customer.language`, else the phone's country, else
        the fallback."""
        named = event.customer.value(LANGUAGE_FIELD) or ""
        if isinstance(named, str):
            primary = named.strip().lower().replace("_", "-").split("-")[0]
            if primary in self.all_languages:
                return primary
        region = phones.region_of(event.customer.phone)
        return self.language_by_country.get(region or "", self.fallback_language)

    def text_for(self, rule: SmsRule, event: CrmEvent) -> tuple[str, str]:
        """(the SMS text, its language) for this event's customer."""
        language = self.language_for(event)
        texts = rule.texts(self.fallback_language)
        if language not in texts:
            language = self.fallback_language
        return rule.render(event, language, self.max_lengths), language

    def sizes(self) -> list[Sized]:
        """Every rule's longest text per language, sized."""
        return [
            Sized(rule.name, language, example, size(example))
            for rule in self.rules
            for language, text in rule.texts(self.fallback_language).items()
            for example in [worst_case(text, self.max_lengths)]
        ]

    def _unambiguous(self) -> None:
        names = [rule.name for rule in self.rules]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"duplicate rule names: {', '.join(duplicates)}")
        for index, rule in enumerate(self.rules):
            for other in self.rules[index + 1 :]:
                if rule.overlaps(other):
                    raise ValueError(f"rules {rule.name!r} and {other.name!r} match the same transition")

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
    return SmsRules.from_json(text)
