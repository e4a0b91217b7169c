"""The SMS rules, checked by hand, against the pydantic models they replaced (a test-only oracle).

`pipeline.sms.rules` took pydantic off the `sms` function's cold path (docs/perf.md). The rules
must accept and refuse what the models did, at the same locations and with the same messages (the
synth, `ops sms preview` and the tests show them), and, once read, behave the same: the same
texts, sizes, matching rules and ages. The models below are the ones replaced, verbatim but for
their names and their reading of a customer's language (`customer.value`: the CRM event they read
is no pydantic model either, `pipeline.crm.event_model`); Hypothesis mutates real rules files
(the team's, the tests') and generates others.

Known differences, normalized below (`comparable`), both in `pipeline.validation`'s number reading
shared with other documents: a number field's refusal of what is no number (`version: "x"`,
`max_parts: null`) has pydantic's location but one type (`int_parsing` or `float_parsing`) and
message, not pydantic's several; a float too large for pydantic's integers (`version: 1e20`) is
refused by the bound, not as too large; and a NaN `max_age_hours` is refused as not greater than
0, where pydantic says not at most 72. So the generated tests compare a number field's refusals
by location, and the bounds' messages are compared exactly on their own. Text that is no JSON is
refused as `json_invalid` at `()` with Python's reason, not pydantic's parser's.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
import string
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import hypothesis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pipeline import phones
from pipeline.crm.event_model import CrmEvent
from pipeline.sms.encoding import size
from pipeline.sms.rules import (
    FIELD_MAX_LENGTHS,
    LANGUAGE,
    LANGUAGE_FIELD,
    MAX_AGE_LIMIT_HOURS,
    MAX_PARTS,
    MAX_PARTS_BOUND,
    MAX_PRICE_PATTERN,
    ORDER_FIELD,
    MissingOrderFieldError,
    Sized,
    SmsRule,
    SmsRules,
    _cut,
    _order_field,
    _placeholders,
    load_rules,
    max_length,
    rules_file,
    worst_case,
)
from pipeline.validation import Invalid
from tests.unit.sms.conftest import order_event
from tests.unit.sms.test_sms_languages import RULES as LANGUAGE_RULES


class OracleSmsRule(BaseModel):
    """A transition into `status` (from any other status, or only from `from_statuses`) sends `template`."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9_]{1,64}$")
    status: str = Field(min_length=1, max_length=64)
    from_statuses: tuple[str, ...] = ()
    # One text (the fallback language's), or a text per language.
    template: str | dict[str, str] = Field(min_length=1)
    max_age_hours: float | None = Field(default=None, gt=0, le=MAX_AGE_LIMIT_HOURS)

    @field_validator("template")
    @classmethod
    def _known_placeholders(cls, template: str | dict[str, str]) -> str | dict[str, str]:
        for language, text in template.items() if isinstance(template, dict) else [("", template)]:
            if language and not LANGUAGE.fullmatch(language):
                raise ValueError(f"language {language!r} is not an ISO 639 code (e.g. en, ru, de)")
            if not 1 <= len(text) <= 1_600:
                raise ValueError("a template is 1..1600 characters")
            _placeholders(text)
        return template

    def texts(self, fallback: str) -> dict[str, str]:
        """The rule's text per language (a single string is the fallback language's)."""
        return dict(self.template) if isinstance(self.template, dict) else {fallback: self.template}

    @model_validator(mode="after")
    def _a_real_change(self) -> OracleSmsRule:
        if self.status in self.from_statuses:
            raise ValueError(f"rule {self.name!r}: a re-save ({self.status} -> {self.status}) never sends")
        return self

    def matches(self, status: str, previous_status: str | None) -> bool:
        if status != self.status or previous_status == status:
            return False
        return not self.from_statuses or previous_status in self.from_statuses

    def overlaps(self, other: OracleSmsRule) -> bool:
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


class OracleSmsRules(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    # The file's format: 1 (`version`, one text per rule) or 2 (`schema_version`, languages).
    version: int | None = Field(default=None, ge=1, le=1)
    schema_version: int | None = Field(default=None, ge=1, le=2)
    fallback_language: str = Field(default="en", pattern=LANGUAGE.pattern)
    # Every language a rule must have a text in (the fallback is always one).
    languages: tuple[str, ...] = ()
    # ISO 3166 region of the phone -> language, when the event names none (`{"RU": "ru"}`).
    language_by_country: dict[str, str] = {}
    field_max_lengths: dict[str, int] = {}
    # The most billed parts a text may come to at its longest: a template over it fails the synth.
    max_parts: int = Field(default=MAX_PARTS, ge=1, le=MAX_PARTS_BOUND)
    # End User Messaging's `MaxPrice` per part of every send (USD, "0.05"; None: no cap): a send
    # priced above it is refused (ValidationException PRICE_OVER_THRESHOLD), nothing sent.
    max_price: str | None = Field(default=None, pattern=MAX_PRICE_PATTERN, min_length=2, max_length=8)
    rules: tuple[OracleSmsRule, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _languages(self) -> OracleSmsRules:
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
        return self

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

    def text_for(self, rule: OracleSmsRule, event: CrmEvent) -> tuple[str, str]:
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

    @model_validator(mode="after")
    def _unambiguous(self) -> OracleSmsRules:
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

    def rule_for(self, status: str, previous_status: str | None) -> OracleSmsRule | None:
        return next((rule for rule in self.rules if rule.matches(status, previous_status)), None)


# -- comparing refusals ---------------------------------------------------------------------------
NUMBER_FIELDS = {"version", "schema_version", "max_parts", "max_age_hours"}


def comparable(error: dict[str, Any]) -> tuple[Any, ...]:
    """A refusal as (loc, type, msg), the known differences (module docstring) normalized: a
    number field's refusal is compared by its location (its bounds' messages exactly, below)."""
    loc, kind, message = tuple(error["loc"]), error["type"], error["msg"]
    if loc and loc[-1] in NUMBER_FIELDS:
        return loc, "number", ""
    if kind == "json_invalid":
        return loc, kind, "Invalid JSON"
    return loc, kind, message.replace("OracleSmsRule", "SmsRule")  # the oracle's names


def outcome(parse: Any) -> tuple[Any, list[tuple[Any, ...]]]:
    """(what `parse()` returned, None if refused; its refusals, comparable, sorted)."""
    try:
        return parse(), []
    except (ValidationError, Invalid) as error:
        return None, sorted((comparable(item) for item in error.errors(include_input=False)), key=repr)


# A few customers: a language the CRM names, a phone's country, neither.
EVENTS = [
    {"language": "ru-RU", "phone": "+375291234567", "name": "Olga"},
    {"language": None, "phone": "+79123456789", "name": "Иван Петров" * 5},
    {"language": "de", "phone": "+4915771234567", "name": "Jörg"},
    {"language": "fr", "phone": "+375291234567", "name": "Anne"},
]
TRANSITIONS = [
    (status, previous)
    for status in ("ready_for_pickup", "shipped", "paid", "delivered", "x")
    for previous in (None, "paid", "shipped", "ready_for_pickup", "returned")
]


def crm_events() -> list[CrmEvent]:
    events = []
    for customer in EVENTS:
        payload = order_event("shipped", "paid", order_id="ORD-1234567890-1234567890")
        payload["order"]["tracking_number"] = "1Z" * 30
        payload["customer"]["name"] = customer["name"]
        payload["customer"]["phone"] = customer["phone"]
        if customer["language"]:
            payload["customer"]["language"] = customer["language"]
        events.append(CrmEvent.parse(payload))
    return events


CRM_EVENTS = crm_events()


def rendered(rules: Any, rule: Any, event: CrmEvent) -> Any:
    """The rules' text for the event's customer (the rule's only or first text without rules)."""
    try:
        return rule.render(event) if rules is None else rules.text_for(rule, event)
    except MissingOrderFieldError as error:
        return ("missing", str(error))


def assert_the_same_rules(got: SmsRules, expected: OracleSmsRules) -> None:
    """Read the same: every field's value (and its type), and what each method says."""
    for name in OracleSmsRules.model_fields:
        if name != "rules":
            assert getattr(got, name) == getattr(expected, name), name
            assert type(getattr(got, name)) is type(getattr(expected, name)), name
    assert len(got.rules) == len(expected.rules)
    for ours, theirs in zip(got.rules, expected.rules, strict=True):
        assert isinstance(ours, SmsRule)
        assert dataclasses.asdict(ours) == theirs.model_dump()
        assert type(ours.max_age_hours) is type(theirs.max_age_hours)
        assert type(ours.template) is type(theirs.template)
        assert ours.texts(got.fallback_language) == theirs.texts(expected.fallback_language)
        assert [ours.overlaps(other) for other in got.rules] == [theirs.overlaps(o) for o in expected.rules]
        for event in CRM_EVENTS:
            assert rendered(got, ours, event) == rendered(expected, theirs, event)
            assert rendered(None, ours, event) == rendered(None, theirs, event)
    assert got.all_languages == expected.all_languages
    assert got.max_lengths == expected.max_lengths
    assert got.sizes() == expected.sizes()
    for event in CRM_EVENTS:
        assert got.language_for(event) == expected.language_for(event)
    for status, previous in TRANSITIONS:
        ours_rule, their_rule = got.rule_for(status, previous), expected.rule_for(status, previous)
        assert (ours_rule and ours_rule.name) == (their_rule and their_rule.name)
        assert got.sends_for(status) == expected.sends_for(status)
    for name in [*(rule.name for rule in expected.rules), None, "removed"]:
        assert got.max_age(name, timedelta(minutes=5)) == expected.max_age(name, timedelta(minutes=5))


def compare(data: Any) -> list[tuple[Any, ...]]:
    """`SmsRules.parse` against `model_validate`, and `from_json` against `model_validate_json`;
    the refusals."""
    expected, expected_refusals = outcome(lambda: OracleSmsRules.model_validate(data))
    got, refusals = outcome(lambda: SmsRules.parse(data))
    assert refusals == expected_refusals
    assert (got is None) == (expected is None)
    if expected is not None:
        assert_the_same_rules(got, expected)
    compare_text(json.dumps(data, ensure_ascii=False))  # a NaN too: both read JSON's NaN
    return expected_refusals


def reached(refusals: list[tuple[Any, ...]]) -> None:
    """What the generators reach (--hypothesis-show-statistics): each whole-file check too."""
    hypothesis.event("refused" if refusals else "read")
    for loc, kind, message in refusals:
        key = loc[:1] if loc[:1] and loc[0] in file_keys else "another key"
        hypothesis.event(
            f"{kind} at {loc[:2]} {message[:30]}" if kind == "value_error" else f"{kind} at {key}"
        )


def compare_text(text: str) -> None:
    expected, expected_refusals = outcome(lambda: OracleSmsRules.model_validate_json(text))
    got, refusals = outcome(lambda: SmsRules.from_json(text))
    assert refusals == expected_refusals
    assert (got is None) == (expected is None)
    if expected is not None:
        assert_the_same_rules(got, expected)
        assert load_rules(text) == got


# -- generated rules files ------------------------------------------------------------------------
def _version_1(*rules: dict[str, Any]) -> dict[str, Any]:
    return {"version": 1, "rules": list(rules)}


RULE = {"name": "r", "status": "shipped", "template": "Sent {order_id}"}


def _file(template: str = '"x"', *, rule: str = "", more: str = "") -> str:
    """A version 1 file's text with one rule: its template's JSON, more of the rule's, the file's."""
    return (
        '{"version": 1, "rules": [{"name": "r", "status": "shipped", "template": '
        + template
        + rule
        + "}]"
        + more
        + "}"
    )


# Valid files: the team's, and those the tests load.
BASES: list[dict[str, Any]] = [
    json.loads(rules_file().read_text(encoding="utf-8")),
    LANGUAGE_RULES,
    {**LANGUAGE_RULES, "max_price": "0.05"},
    _version_1({"name": "delivered", "status": "delivered", "template": "Order {order_id} delivered"}),
    _version_1(
        {"name": "back", "status": "ready_for_pickup", "from_statuses": ["returned"], "template": "Back"},
        {"name": "first", "status": "ready_for_pickup", "from_statuses": ["paid"], "template": "First"},
    ),
    _version_1(
        {
            "name": "shipped",
            "status": "shipped",
            "template": "{order.tracking_number} {status}",
            "max_age_hours": 4,
        }
    ),
    {
        "schema_version": 2,
        "fallback_language": "ru",
        "max_parts": 4,
        "field_max_lengths": {"customer_name": 20, "order.tracking_number": 30, "order.*": 10},
        "rules": [{"name": "ready", "status": "ready_for_pickup", "template": "Ждём вас, {customer_name}"}],
    },
]

json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4)
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)


def mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`good` two times in three."""
    return st.one_of(good, good, bad)


good_languages = st.sampled_from(["en", "ru", "de"])
good_statuses = st.sampled_from(["shipped", "ready_for_pickup", "paid", "returned"])
good_names = st.sampled_from(["ready", "shipped", "back", "a_1", "x" * 64])
good_texts = st.sampled_from(
    [
        "Ready {order_id}",
        "{customer_name}, {order.tracking_number} {previous_status}",
        "Ж {status}",
        "{{literal}}",
        " ",
        "x" * 1600,
        "{order.weight}",
    ]
)
good_ages = st.sampled_from([None, 1, 4, 0.5, 72, "2", True])
good_fields = st.sampled_from([*FIELD_MAX_LENGTHS, "order.tracking_number"])
good_regions = st.sampled_from(["RU", "DE", "AT"])
good_prices = st.sampled_from(["0.05", ".1", "12.12345", "1.0"])
languages = mostly(good_languages, st.sampled_from(["fr", "EN", "e", "engl", "en\n", "", "ru-RU"]))
statuses = mostly(good_statuses, st.sampled_from(["", "x" * 64, "x" * 65]))
texts = mostly(
    good_texts,
    st.sampled_from(
        [
            "Hi {customer_phone}",
            "{order_id!r}",
            "{order_id:>4}",
            "{order.a.b}",
            "{order.items[0]}",
            "{",
            "}",
            "",
            "x" * 1601,
            "{order.}",
        ]
    ),
)
numbers = st.sampled_from(
    [0, 1, 2, 3, 4, 10, 11, 72, 73, -1, 0.5, 1.0, 1.5, 72.0, 72.5, 1e20, 10**25, float("inf"), float("nan")]
)
numbers |= st.sampled_from(["1", "2", " 3 ", "1.0", "1_0", "x", "1e1", True, False, None, [], {}])
# Any value of each key: valid ones two times in three (each may still fail the whole file's checks).
rule_keys = {
    "name": mostly(good_names, st.sampled_from(["A", "", "x" * 65, "bad-name", "ready\n"]) | json_leaf),
    "status": mostly(statuses, json_leaf),
    "from_statuses": mostly(
        st.lists(statuses, max_size=3), st.lists(statuses | json_leaf, max_size=2) | json_leaf
    ),
    "template": mostly(
        texts | st.dictionaries(good_languages, texts, min_size=1, max_size=3),
        st.dictionaries(languages, texts | json_leaf, max_size=3) | json_leaf,
    ),
    "max_age_hours": mostly(good_ages, numbers),
    "extra": json_leaf,
}
any_rule = mostly(
    st.fixed_dictionaries(
        {key: rule_keys[key] for key in ("name", "status", "template")},
        optional={key: rule_keys[key] for key in ("from_statuses", "max_age_hours")},
    ),
    st.fixed_dictionaries({}, optional=rule_keys),
)
file_keys = {
    "version": mostly(st.sampled_from([None, 1]), numbers),
    "schema_version": mostly(st.sampled_from([None, 1, 2]), numbers),
    "fallback_language": mostly(languages, json_leaf),
    "languages": mostly(
        st.lists(languages, max_size=4), st.lists(languages | json_leaf, max_size=2) | json_leaf
    ),
    "language_by_country": mostly(
        st.dictionaries(
            mostly(good_regions, st.sampled_from(["ru", "XX", "RUS", ""])), languages, max_size=3
        ),
        st.dictionaries(st.text(max_size=2), languages | json_leaf, max_size=2) | json_leaf,
    ),
    "field_max_lengths": mostly(
        st.dictionaries(good_fields, st.integers(min_value=1, max_value=160), max_size=3),
        st.dictionaries(
            mostly(good_fields, st.sampled_from(["order.a.b", "phone", "order", "order.*.x"])),
            numbers | st.integers(),
            max_size=3,
        )
        | json_leaf,
    ),
    "max_parts": mostly(st.integers(min_value=1, max_value=MAX_PARTS_BOUND), numbers),
    "max_price": mostly(
        good_prices, st.sampled_from(["5", "123.1", "0.123456", "0.05\n", "1.", ""]) | json_leaf
    ),
    "rules": st.lists(any_rule, max_size=3) | json_leaf,
    "extra": json_value,
}


@st.composite
def valid_files(draw: st.DrawFn) -> dict[str, Any]:
    """A file of valid values whose texts are in its languages: read unless its rules overlap or
    a rule's `from_statuses` holds its own status (the whole file's checks)."""
    configured = draw(st.lists(good_languages, min_size=1, max_size=3, unique=True))
    count = draw(st.integers(min_value=1, max_value=3))
    rule_names = draw(
        st.lists(good_names, min_size=count, max_size=count, unique=draw(st.booleans()) or count == 1)
    )
    rule_statuses = draw(st.lists(good_statuses, min_size=count, max_size=count, unique=draw(st.booleans())))
    rules = []
    for name, status in zip(rule_names, rule_statuses, strict=True):
        single = len(configured) == 1 and draw(st.booleans())
        rule: dict[str, Any] = {
            "name": name,
            "status": status,
            "template": draw(good_texts)
            if single
            else {language: draw(good_texts) for language in configured},
        }
        if draw(st.booleans()):
            rule["from_statuses"] = draw(st.lists(good_statuses, max_size=2))
        if draw(st.booleans()):
            rule["max_age_hours"] = draw(good_ages)
        rules.append(rule)
    document: dict[str, Any] = {
        **draw(st.sampled_from([{"schema_version": 2}, {"version": 1}, {"schema_version": 1, "version": 1}])),
        "rules": rules,
    }
    if configured[0] != "en" or draw(st.booleans()):
        document["fallback_language"] = configured[0]
    if len(configured) > 1 or draw(st.booleans()):
        listed = draw(st.permutations(configured))
        document["languages"] = [name for name in listed if name != configured[0] or draw(st.booleans())]
    optional = {
        "language_by_country": st.dictionaries(good_regions, st.sampled_from(configured), max_size=3),
        "field_max_lengths": st.dictionaries(
            good_fields, st.integers(min_value=1, max_value=160), max_size=3
        ),
        "max_parts": st.integers(min_value=1, max_value=MAX_PARTS_BOUND),
        "max_price": good_prices,
    }
    for key in draw(st.lists(st.sampled_from(sorted(optional)), unique=True)):
        document[key] = draw(optional[key])
    for slip in draw(st.lists(st.sampled_from(sorted(SLIPS)), max_size=2)):
        SLIPS[slip](document, draw)
    return document


def _slip_rule(document: dict[str, Any], draw: st.DrawFn, key: str, value: Any) -> None:
    rule = draw(st.sampled_from(document["rules"]))
    if key == "template" and isinstance(rule["template"], dict):
        value = {**rule["template"], **value} if value else dict(list(rule["template"].items())[1:])
    rule[key] = value


# One value a whole-file check refuses (or an extra key, which keeps those checks from running):
# zero to two of these in a generated file.
SLIPS = {
    "bad language": lambda document, draw: document.setdefault("languages", []).append(
        draw(st.sampled_from(["EN", "e", "engl", "ru-RU"]))
    ),
    "bad region": lambda document, draw: document.setdefault("language_by_country", {}).update(
        {draw(st.sampled_from(["ru", "Ru", "XX", "RUS", "", "R1"])): document.get("fallback_language", "en")}
    ),
    "unconfigured language by country": lambda document, draw: document.setdefault(
        "language_by_country", {}
    ).update({"RU": draw(st.sampled_from(["fr", "EN", ""]))}),
    "bad length": lambda document, draw: document.setdefault("field_max_lengths", {}).update(
        {draw(good_fields): draw(st.sampled_from([0, -1, 161, 1e20, 2.0**63, 9.2e18, True, " 160 ", 1.0]))}
    ),
    "bad field": lambda document, draw: document.setdefault("field_max_lengths", {}).update(
        {draw(st.sampled_from(["phone", "order", "order.a.b", "order.*.x", "Order_ID"])): 10}
    ),
    "text missing": lambda document, draw: _slip_rule(document, draw, "template", {}),
    "text in another language": lambda document, draw: _slip_rule(
        document, draw, "template", {draw(st.sampled_from(["fr", "de"])): "Hallo"}
    ),
    "a re-save": lambda document, draw: _slip_rule(
        document, draw, "from_statuses", [draw(good_statuses) for _ in range(3)]
    ),
    "extra key": lambda document, draw: document.update({"extra": 1}),
    "extra key in a rule": lambda document, draw: _slip_rule(document, draw, "extra", 1),
}


@st.composite
def mutated(draw: st.DrawFn, files: st.SearchStrategy[dict[str, Any]]) -> Any:
    """A valid file, changed a few times: a key set (mostly to a valid value), removed or added,
    in the file or a rule; a rule copied (a duplicate name, or the same transition)."""
    document = copy.deepcopy(draw(files))
    for _ in range(draw(st.sampled_from([0, 1, 1, 1, 2, 3]))):
        rules = document.get("rules")
        where = draw(st.sampled_from(["file", "rule", "rule", "copy"]))
        if where != "file" and isinstance(rules, list) and rules:
            index = draw(st.integers(min_value=0, max_value=len(rules) - 1))
            if where == "copy" and isinstance(rules[index], dict):
                name = draw(st.sampled_from([rules[index].get("name"), "other"]))
                rules.append({**rules[index], "name": name})
            target, keys = rules[index], rule_keys
        else:
            target, keys = document, file_keys
        if not isinstance(target, dict):
            continue
        key = draw(st.sampled_from(sorted(keys)))
        if key in target and draw(st.sampled_from([True, False, False, False])):
            del target[key]
        else:
            target[key] = draw(keys[key])
    return document


@given(data=mutated(st.sampled_from(BASES)))
@settings(max_examples=500, deadline=None)
def test_a_changed_rules_file_is_read_or_refused_as_the_pydantic_models_did(data: Any) -> None:
    reached(compare(data))


@given(data=valid_files() | mutated(valid_files()))
@settings(max_examples=500, deadline=None)
def test_a_generated_rules_file_is_read_or_refused_as_the_pydantic_models_did(data: Any) -> None:
    reached(compare(data))


@given(data=st.fixed_dictionaries({}, optional=file_keys) | json_value)
@settings(max_examples=200, deadline=None)
def test_any_json_value_is_read_or_refused_as_the_pydantic_models_did(data: Any) -> None:
    reached(compare(data))


@pytest.mark.parametrize("base", BASES, ids=range(len(BASES)))
def test_every_valid_file_reads_as_the_pydantic_models_read_it(base: dict[str, Any]) -> None:
    assert compare(base) == []


# What the generators reach only now and then: an extra key beside a refusal of the whole file
# (which then does not run), a union's two refusals, integers pydantic's cannot hold.
EDGES = [
    {**_version_1(RULE, RULE), "extra": 1},
    _version_1({**RULE, "from_statuses": ["shipped"], "extra": 1}),
    _version_1({**RULE, "template": {"en": 5, "ru": None}}),
    _version_1({**RULE, "template": {"en": "x", "de": []}}, {**RULE, "name": "s", "status": "paid"}),
    *(
        {**_version_1(RULE), "field_max_lengths": {"order_id": value}}
        for value in [1e20, 2.0**63, -(2.0**63), 2.0**63 - 1024, 9.2e18, 10**25, math.inf, math.nan]
    ),
    *(
        {**_version_1(RULE), "field_max_lengths": {"order_id": value}}
        for value in ["1e2", " 20 ", 1.5, True, None, []]
    ),
    *(
        {**_version_1(RULE), "language_by_country": {region: "en"}}
        for region in ["ru", "Ru", "XX", "", "RUS"]
    ),
]


@pytest.mark.parametrize("document", EDGES, ids=range(len(EDGES)))
def test_edges_of_a_rules_file_are_read_or_refused_as_the_pydantic_models_did(
    document: dict[str, Any],
) -> None:
    compare(document)


@pytest.mark.parametrize(
    "document",
    [
        *({**_version_1(RULE), "version": value} for value in (0, 1, 2, "1", 1.0, True)),
        *({"schema_version": value, "rules": [RULE]} for value in (0, 1, 2, 3, "2")),
        *(
            {**_version_1(RULE), "max_parts": value}
            for value in (0, 1, MAX_PARTS_BOUND, MAX_PARTS_BOUND + 1, "4")
        ),
    ],
)
def test_a_number_is_bounded_as_the_pydantic_models_bounded_it(document: dict[str, Any]) -> None:
    """With the bound's message (the generated tests compare numbers' refusals more loosely)."""
    _assert_exact(document, OracleSmsRules.model_validate, SmsRules.parse)


@pytest.mark.parametrize(
    "hours", [-1, 0, 1e-9, 0.5, 72, 72.0001, 73, "72", True, float("-inf"), float("inf")]
)
def test_a_rules_maximum_age_is_bounded_as_the_pydantic_model_bounded_it(hours: Any) -> None:
    rule = {"name": "r", "status": "shipped", "template": "x", "max_age_hours": hours}
    _assert_exact(_version_1(rule), OracleSmsRules.model_validate, SmsRules.parse)


def _assert_exact(document: Any, theirs: Any, ours: Any) -> None:
    def refusals(parse: Any) -> list[tuple[Any, ...]]:
        try:
            parse(document)
        except (ValidationError, Invalid) as error:
            return sorted(((tuple(e["loc"]), e["type"], e["msg"]) for e in error.errors()), key=repr)
        return []

    assert refusals(ours) == refusals(theirs)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "not json",
        "{",
        "[]",
        "5",
        '"rules"',
        "null",
        json.dumps(_version_1(RULE)) + " x",
        " \n" + json.dumps(_version_1(RULE)) + "\n",
        "\ufeff" + json.dumps(_version_1(RULE)),
        _file('"\\ud800"'),
        _file('"\\udc00x"'),
        _file('"\\ud83d\\ude00"'),
        _file('"\\u0416"', more=', "languages": []'),
        _file(more=', "\\udc80": 1'),
        _file('"\udc80"'),
        _file(more=', "version": 2'),
        _file(rule=', "max_age_hours": 1e400'),
        _file(rule=', "max_age_hours": Infinity'),
        _file(rule=', "max_age_hours": 1.5'),
        _file(more=', "max_parts": 1E1, "schema_version": 1.0'),
        _file(more=', "max_parts": 01'),
        _file('"x\t"'),
        '{"version": 1, "rules": "none"}',
        '{"version": 1, "rules": [5, {"name": "r", "status": "shipped", "template": []}]}',
        _file(more=', "languages": {}'),
        _file(more=', "field_max_lengths": []'),
    ],
)
def test_a_rules_files_text_is_read_or_refused_as_the_pydantic_models_did(text: str) -> None:
    compare_text(text)


@pytest.mark.parametrize("depth", [198, 199, 200, 201, 202])
@pytest.mark.parametrize("inner", ["[]", "1", "{}", '"x"'])
def test_json_nested_too_deep_for_pydantics_parser_is_refused_as_it_refused_it(
    depth: int, inner: str
) -> None:
    """Nested past pydantic's parser's limit, a file is no JSON to it (and refused by both either
    way: no field of the rules holds such a value)."""
    compare_text('{"extra": ' + "[" * depth + inner + "]" * depth + "}")
    compare_text('{"extra": ' + '{"a": ' * depth + inner + "}" * depth + "}")


def test_the_synth_and_ops_see_the_json_wording_of_a_refusal() -> None:
    """`from_json` words a refusal as pydantic's JSON reading did (an object, an array), `parse` as
    its Python reading did."""
    text = json.dumps({"version": 1, "languages": "en", "rules": [5], "field_max_lengths": []})
    with pytest.raises(Invalid) as refused:
        SmsRules.from_json(text)
    assert {(error["loc"], error["msg"]) for error in refused.value.errors()} == {
        (("languages",), "Input should be a valid array"),
        (("rules", 0), "Input should be an object"),
        (("rules",), "Tuple should have at least 1 item after validation, not 0"),
        (("field_max_lengths",), "Input should be an object"),
    }
    with pytest.raises(Invalid) as refused:
        SmsRules.parse(json.loads(text))
    assert (("rules", 0), "Input should be a valid dictionary or instance of SmsRule") in {
        (error["loc"], error["msg"]) for error in refused.value.errors()
    }


def test_a_rule_made_or_changed_in_code_is_checked_as_one_read_from_a_file() -> None:
    rules = load_rules(json.dumps(BASES[4]))
    back = rules.rules[0]
    with pytest.raises(Invalid, match="never sends"):
        dataclasses.replace(back, status="returned")
    with pytest.raises(Invalid, match="match the same transition"):
        dataclasses.replace(rules, rules=(*rules.rules, dataclasses.replace(back, name="again")))
    with pytest.raises(Invalid, match="String should match pattern"):
        SmsRule(name="Bad", status="shipped", template="x")
    assert SmsRule(name="ok", status="shipped", template="x", from_statuses=["paid"]).from_statuses == (
        "paid",
    )  # type: ignore[arg-type]
    assert SmsRules.parse(rules) is rules
    document = {**_version_1({**RULE, "template": {"en": "x"}}), "language_by_country": {"DE": "en"}}
    read = SmsRules.parse(document)
    document["rules"][0]["template"]["en"] = "changed"  # a copy held, as pydantic held one
    document["language_by_country"]["DE"] = "de"
    assert (read.rules[0].template, read.language_by_country) == ({"en": "x"}, {"DE": "en"})
    assert SmsRules.parse({"version": 1, "rules": [back]}).rules == (back,)
    assert math.isclose(
        load_rules(json.dumps(BASES[5])).max_age("shipped", timedelta()).total_seconds(), 4 * 3600
    )
