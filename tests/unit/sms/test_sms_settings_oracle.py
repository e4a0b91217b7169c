"""The SMS settings and delivery events, checked by hand, against the pydantic models they replaced
(a test-only oracle).

`pipeline.sms.settings` and `pipeline.sms.delivery` left pydantic for the cold path of `sms`,
`reconciler` and `sms_events` (docs/perf.md). They must accept and refuse what those models did,
name the same fields (and give the same reason where two fields disagree, loc `()`), and hold the
same values. The models below are the ones replaced, verbatim but for their names; Hypothesis
searches environments, field values and SNS messages for a difference.

Deliberate differences, left out of the generated input:

- a digit Python's Unicode (15.1) does not know (Unicode 16's, e.g. U+10D40) is no digit of
  SMS_QUIET_HOURS: pydantic's Rust regex took it for one, and `quiet_window` (Python's `re`) then
  found no window, so quiet hours were on yet never applied (a test below);
- `parse` reads JSON documents: Python values JSON has no type for (bytes where text is
  expected, a key that is not a string) are not modelled.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pipeline.retention import SMS_RETENTION_DAYS, SMS_RETENTION_MIN_DAYS
from pipeline.sms.delivery import DeliveryEvent
from pipeline.sms.settings import ENVIRONMENT_VARIABLES, SmsSettings
from pipeline.validation import Invalid

GatewayKind = Literal["end_user_messaging", "http", "fake"]
_QUIET_HOURS = r"^([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)$"


class OracleSmsSettings(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    gateway: GatewayKind = "end_user_messaging"
    journal_table: str = Field(min_length=1)
    # Definite refusals (throttling, quota) tolerated before the notification is `failed`.
    # Keep it below the consumer's max_receive_count so the journal, not SQS, decides.
    max_attempts: int = Field(default=5, ge=1, le=20)
    retry_base_seconds: int = Field(default=10, ge=0, le=43_200)
    retry_max_seconds: int = Field(default=600, ge=0, le=43_200)
    # How long a claim protects a `sending` record; longer than the Lambda timeout, so only a
    # dead worker's claim expires (and then the outcome is `unknown`, never a blind resend).
    lease_seconds: int = Field(default=120, ge=10, le=3_600)
    # A notification key must outlive every redelivery of its event (at least the redelivery
    # bound) and the CRM's resends (the default adds their window), or an old event would count
    # as new again: see pipeline.retention.
    retention_days: int = Field(default=SMS_RETENTION_DAYS, ge=SMS_RETENTION_MIN_DAYS, le=365)
    # An `unknown` older than this is left for a person (metric SmsUnknownPastDeadline).
    reconcile_deadline_hours: float = Field(default=24, gt=0, le=24 * 14)
    reconcile_batch_size: int = Field(default=100, ge=1, le=1_000)
    # A gateway may still take a request its client gave up on: a lookup that does not find the
    # message is proof it never arrived only once the record has been unknown this long.
    lookup_settle_seconds: int = Field(default=120, ge=0, le=3_600)
    # End User Messaging: phone number / sender id / pool (id or ARN) and configuration set.
    origination_identity: str | None = None
    configuration_set: str | None = None
    message_type: Literal["TRANSACTIONAL", "PROMOTIONAL"] = "TRANSACTIONAL"
    # HTTP gateway: base URL (a local fake in development); its token is the `sms_gateway` secret.
    http_base_url: str | None = Field(default=None, pattern=r"^https?://")
    http_timeout_seconds: float = Field(default=5, gt=0, le=30)
    # Quiet hours (off by default, `pipeline.sms.endstates`): "22:00-08:00", and the statuses
    # (comma-separated) whose SMS wait for the window's end; both or neither.
    quiet_hours: str | None = Field(default=None, pattern=_QUIET_HOURS)
    quiet_statuses: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> OracleSmsSettings:
        if self.retry_base_seconds > self.retry_max_seconds:
            raise ValueError("SMS_RETRY_BASE_SECONDS must not exceed SMS_RETRY_MAX_SECONDS")
        if self.gateway == "http" and not self.http_base_url:
            raise ValueError("SMS_GATEWAY=http needs SMS_HTTP_BASE_URL")
        if bool(self.quiet_hours) != bool(self.quiet_status_set):
            raise ValueError("SMS_QUIET_HOURS and SMS_QUIET_STATUSES go together")
        if self.quiet_window is not None and self.quiet_window[0] == self.quiet_window[1]:
            raise ValueError("SMS_QUIET_HOURS must not start when it ends")
        return self

    @property
    def quiet_window(self) -> tuple[int, int] | None:
        """(start, end) minutes of the local day, or None when quiet hours are off."""
        match = re.match(_QUIET_HOURS, self.quiet_hours or "")
        if match is None:
            return None
        hours, minutes, end_hours, end_minutes = (int(part) for part in match.groups())
        return hours * 60 + minutes, end_hours * 60 + end_minutes

    @property
    def quiet_status_set(self) -> frozenset[str]:
        return frozenset(part.strip() for part in (self.quiet_statuses or "").split(",") if part.strip())

    @property
    def lease(self) -> timedelta:
        return timedelta(seconds=self.lease_seconds)

    @property
    def retention(self) -> timedelta:
        return timedelta(days=self.retention_days)

    @property
    def reconcile_deadline(self) -> timedelta:
        return timedelta(hours=self.reconcile_deadline_hours)

    @classmethod
    def from_env(cls) -> OracleSmsSettings:
        return cls.model_validate(
            {field: os.environ[name] for field, name in ENVIRONMENT_VARIABLES.items() if os.environ.get(name)}
        )


class OracleDeliveryEvent(BaseModel):
    """The fields used from an End User Messaging SMS event; the rest (the phone too) is ignored."""

    model_config = ConfigDict(defer_build=True, extra="ignore", frozen=True, populate_by_name=True)

    event_type: str = Field(alias="eventType", min_length=1)
    event_timestamp: int = Field(alias="eventTimestamp", ge=0, description="Unix time in milliseconds")
    message_id: str = Field(alias="messageId", min_length=1)
    is_final: bool = Field(alias="isFinal", default=False)
    context: dict[str, str] = Field(default_factory=dict)

    @property
    def delivery_status(self) -> str:
        """TEXT_DELIVERED -> "delivered", TEXT_CARRIER_UNREACHABLE -> "carrier_unreachable"."""
        return self.event_type.removeprefix("TEXT_").lower()

    @property
    def occurred_at(self) -> datetime:
        return datetime.fromtimestamp(self.event_timestamp / 1000, tz=UTC)


def outcome(parse: Any) -> tuple[Any, set[tuple[Any, ...]], list[str]]:
    """(what `parse()` returned, None if refused; the refused locations; the messages of the rules
    across fields that were broken, pydantic's `value_error` at loc `()`)."""
    try:
        return parse(), set(), []
    except (ValidationError, Invalid) as error:
        errors = error.errors(include_input=False)
        return (
            None,
            {tuple(item["loc"]) for item in errors},
            [e["msg"] for e in errors if e["type"] == "value_error" and not e["loc"]],
        )


def same_outcome(got: tuple[Any, ...], expected: tuple[Any, ...]) -> None:
    if currently_in_test_context():  # Hypothesis's statistics: how often each outcome is tried
        event("accepted" if expected[0] is not None else f"refused: {expected[2] or 'fields'}")
    assert (got[0] is None, got[1], got[2]) == (expected[0] is None, expected[1], expected[2])


def computed(read: Any) -> Any:
    """`read()`, or the kind of exception it raised (a property of an accepted value may raise,
    as `occurred_at` does for a timestamp past year 9999: it must raise in both)."""
    try:
        return read()
    except (ValueError, OverflowError, OSError) as error:
        return type(error)


# -- settings ---------------------------------------------------------------------------------------

# Each number's bounds, as (lowest allowed or None, highest): every value around them is tried.
INT_BOUNDS = {
    "max_attempts": (1, 20),
    "retry_base_seconds": (0, 43_200),
    "retry_max_seconds": (0, 43_200),
    "lease_seconds": (10, 3_600),
    "retention_days": (SMS_RETENTION_MIN_DAYS, 365),
    "reconcile_batch_size": (1, 1_000),
    "lookup_settle_seconds": (0, 3_600),
}
FLOAT_BOUNDS = {"reconcile_deadline_hours": 24 * 14, "http_timeout_seconds": 30}
# How pydantic's lax numbers read text: spaces, `_`, a `.0`, exponents, non-ASCII digits and spaces.
NUMBER_TEXTS = [
    "", " ", "x", "1.0", "1_0", " 5 ", "\t5\n", "5\xa0", "\x1c5", "+5", "-0", "0-9", "0_5", "1__0",
    "_1", "1.", ".5", "5.00", "1e1", "1E_1", "0x10", "inf", "-inf", "nan", "NaN", "Infinity",
    "\u0663", "1\u0660", "\uff15", "9" * 30, "1e400",
]  # fmt: skip


def around(number: float) -> list[str]:
    return [str(number - 1), str(number), str(number + 1), f"{number}.0", f" {number} ", f"{number}.5"]


def int_texts(low: int, high: int) -> st.SearchStrategy[str]:
    return st.sampled_from([*around(low), *around(high), *NUMBER_TEXTS]) | st.integers(-5, 50_000).map(str)


def float_texts(high: float) -> st.SearchStrategy[str]:
    edges = ["0", "0.0", "-0", "1e-9", "0.000001", f"{high}", f"{high}.0", f"{high}.000001", f"{high + 1}"]
    return st.sampled_from([*edges, *NUMBER_TEXTS]) | st.floats(-1, high + 1).map(str)


QUIET_HOURS = [
    "22:00-08:00", "00:00-23:59", "22:00-22:00", "07:30-07:30", "24:00-08:00", "7:00-08:00",
    "22:00-08:00\n", " 22:00-08:00", "22:00-08:00x", "x22:00-08:00", "22:60-08:00",
    "\u0662\u0662:00-08:00", "\u0662\u0662:00-22:00", "22:00-\u0662\u0662:00", "", " ",
]  # fmt: skip
QUIET_STATUSES = ["shipped", "shipped, ready_for_pickup", " , ", ",", "", " ", "a,,b"]
TEXTS = st.sampled_from(["", " ", "x", "shop-journal"]) | st.text(max_size=6)
environment_values: dict[str, st.SearchStrategy[str]] = {
    "SMS_GATEWAY": st.sampled_from(["end_user_messaging", "http", "fake", "HTTP", " http", "sns"]),
    "JOURNAL_TABLE": TEXTS,
    "SMS_ORIGINATION_IDENTITY": TEXTS,
    "SMS_CONFIGURATION_SET": TEXTS,
    "SMS_MESSAGE_TYPE": st.sampled_from(["TRANSACTIONAL", "PROMOTIONAL", "transactional", "", " "]),
    "SMS_HTTP_BASE_URL": st.sampled_from(["http://x", "https://sms.example/v1", "ftp://x", " http://x", "x"])
    | TEXTS,
    "SMS_QUIET_HOURS": st.sampled_from(QUIET_HOURS) | TEXTS,
    "SMS_QUIET_STATUSES": st.sampled_from(QUIET_STATUSES) | TEXTS,
    **{ENVIRONMENT_VARIABLES[field]: int_texts(*bounds) for field, bounds in INT_BOUNDS.items()},
    **{ENVIRONMENT_VARIABLES[field]: float_texts(high) for field, high in FLOAT_BOUNDS.items()},
}
assert set(environment_values) == set(ENVIRONMENT_VARIABLES.values())
# Values that are all valid alone, so the rules across fields are reached: each rule's both sides.
valid_environment_values: dict[str, st.SearchStrategy[str]] = {
    "SMS_GATEWAY": st.sampled_from(["end_user_messaging", "http", "fake"]),
    "SMS_RETRY_BASE_SECONDS": st.sampled_from(["0", "10", "600", "601", "43200"]),
    "SMS_RETRY_MAX_SECONDS": st.sampled_from(["0", "10", "600", "601", "43200"]),
    "SMS_HTTP_BASE_URL": st.sampled_from(["http://x", "https://sms.example/v1"]),
    "SMS_QUIET_HOURS": st.sampled_from([hours for hours in QUIET_HOURS[:4] + QUIET_HOURS[11:14]]),
    "SMS_QUIET_STATUSES": st.sampled_from(QUIET_STATUSES),
    "SMS_MAX_ATTEMPTS": st.sampled_from(["1", "20", " 3 ", "3.0"]),
}
environments = st.fixed_dictionaries({}, optional=environment_values) | st.fixed_dictionaries(
    {"JOURNAL_TABLE": st.just("journal")}, optional=valid_environment_values
)


def oracle_from(environment: dict[str, str]) -> OracleSmsSettings:
    """`OracleSmsSettings.from_env` on `environment` rather than os.environ."""
    return OracleSmsSettings.model_validate(
        {field: environment[name] for field, name in ENVIRONMENT_VARIABLES.items() if environment.get(name)}
    )


def assert_same_settings(got: SmsSettings, expected: OracleSmsSettings) -> None:
    assert dataclasses.asdict(got) == expected.model_dump()
    for name in ("quiet_window", "quiet_status_set", "lease", "retention", "reconcile_deadline"):
        assert getattr(got, name) == getattr(expected, name), name


@given(environment=environments)
@settings(max_examples=1500)
@example(environment={"JOURNAL_TABLE": "j", "SMS_RETRY_BASE_SECONDS": "601"})
@example(environment={"JOURNAL_TABLE": "j", "SMS_GATEWAY": "http"})
@example(environment={"JOURNAL_TABLE": "j", "SMS_QUIET_HOURS": "22:00-08:00"})
@example(environment={"JOURNAL_TABLE": "j", "SMS_QUIET_STATUSES": "shipped"})
@example(environment={"JOURNAL_TABLE": "j", "SMS_QUIET_HOURS": "22:00-22:00", "SMS_QUIET_STATUSES": "x"})
@example(environment={"JOURNAL_TABLE": "j", "SMS_RETRY_BASE_SECONDS": "601", "SMS_MAX_ATTEMPTS": "0"})
def test_sms_settings_read_an_environment_as_the_pydantic_model_did(environment: dict[str, str]) -> None:
    expected = outcome(lambda: oracle_from(environment))
    got = outcome(lambda: SmsSettings.from_environment(environment))
    same_outcome(got, expected)
    if expected[0] is not None:
        assert_same_settings(got[0], expected[0])


json_leaf = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4)
field_values: dict[str, st.SearchStrategy[Any]] = {
    **{
        field: st.sampled_from([low - 1, low, high, high + 1, float(low), low + 0.5, True, str(low)])
        | json_leaf
        for field, (low, high) in INT_BOUNDS.items()
    },
    **{
        field: st.sampled_from([0, 0.0, 1e-9, high, high + 1e-6, float("inf"), float("nan"), "1", True])
        | json_leaf
        for field, high in FLOAT_BOUNDS.items()
    },
    **{
        name: st.sampled_from(["http://x", "22:00-08:00", "shipped", "fake", "PROMOTIONAL"])
        | json_leaf
        | st.lists(st.integers(), max_size=1)
        for name in (
            "gateway", "journal_table", "origination_identity", "configuration_set", "message_type",
            "http_base_url", "quiet_hours", "quiet_statuses",
        )
    },
    "extra": json_leaf,
    "SMS_GATEWAY": json_leaf,
}  # fmt: skip


# Values valid alone, of the types a caller may give (an int for a float, a bool for an int, ...).
valid_field_values: dict[str, st.SearchStrategy[Any]] = {
    **{
        field: st.sampled_from(
            [low, high, float(high), str(high), f" {low}.0 ", *([True] if low <= 1 else [])]
        )
        for field, (low, high) in INT_BOUNDS.items()
    },
    **{
        field: st.sampled_from([high, 1, 0.5, True, f"{high}", "1e1"]) for field, high in FLOAT_BOUNDS.items()
    },
    "gateway": st.sampled_from(["end_user_messaging", "http", "fake"]),
    "origination_identity": st.sampled_from([None, "", "+15550100"]),
    "message_type": st.sampled_from(["TRANSACTIONAL", "PROMOTIONAL"]),
    "http_base_url": st.sampled_from([None, "http://x", "https://x/y"]),
    "quiet_hours": st.sampled_from([None, *QUIET_HOURS[:4]]),
    "quiet_statuses": st.sampled_from([None, *QUIET_STATUSES]),
    "extra": st.none(),
}


@given(
    data=st.fixed_dictionaries({}, optional=field_values)
    | st.fixed_dictionaries({"journal_table": st.just("journal")}, optional=valid_field_values)
)
@settings(max_examples=1000)
def test_sms_settings_parse_values_as_the_pydantic_model_did(data: dict[str, Any]) -> None:
    """Any value, not only text (as the synth or a test gives them), and keys it does not know."""
    expected = outcome(lambda: OracleSmsSettings.model_validate(data))
    got = outcome(lambda: SmsSettings.parse(data))
    same_outcome(got, expected)
    if expected[0] is not None:
        assert_same_settings(got[0], expected[0])


@pytest.mark.parametrize("data", [None, [], "journal", 5])
def test_settings_that_are_no_mapping_are_refused_as_a_whole(data: Any) -> None:
    same_outcome(
        outcome(lambda: SmsSettings.parse(data)), outcome(lambda: OracleSmsSettings.model_validate(data))
    )


def test_settings_made_directly_are_checked_and_replace_checks_again() -> None:
    """The constructor checks as `parse` does (pydantic's did too), and so does
    `dataclasses.replace`, which `model_copy(update=...)` did not."""
    settings = SmsSettings(journal_table="journal", max_attempts=" 3 ")  # type: ignore[arg-type]
    assert settings.max_attempts == 3
    with pytest.raises(Invalid) as refused:
        dataclasses.replace(settings, retry_base_seconds=700)
    assert refused.value.errors() == [
        {
            "type": "value_error",
            "loc": (),
            "msg": "Value error, SMS_RETRY_BASE_SECONDS must not exceed SMS_RETRY_MAX_SECONDS",
        }
    ]


def test_a_quiet_hours_digit_unknown_to_python_is_refused_where_pydantic_took_it() -> None:
    """Deliberate: U+10D40 (Garay digit zero, Unicode 16) is a digit to pydantic's Rust regex, not
    to Python's `re`; pydantic accepted the hours, then their window was None: quiet hours that
    never applied."""
    environment = {"JOURNAL_TABLE": "j", "SMS_QUIET_HOURS": "1\U00010d40:00-08:00", "SMS_QUIET_STATUSES": "x"}
    assert oracle_from(environment).quiet_window is None
    with pytest.raises(Invalid) as refused:
        SmsSettings.from_environment(environment)
    assert [error["loc"] for error in refused.value.errors()] == [("quiet_hours",)]


# -- delivery events --------------------------------------------------------------------------------

EVENT_KEYS = {
    "event_type": "eventType",
    "event_timestamp": "eventTimestamp",
    "message_id": "messageId",
    "is_final": "isFinal",
}
event_texts = st.sampled_from(
    ["TEXT_DELIVERED", "TEXT_BLOCKED", "VOICE_COMPLETED", "", " ", "m-1"]
) | st.text(max_size=4)
timestamps = st.sampled_from(
    [
        0,
        -1,
        1,
        1_686_975_103_470,
        2**63 - 1,
        2**63,
        10**30,
        -0.0,
        1.0,
        1.5,
        1e20,
        9.2e18,
        2.0**63,
        float("nan"),
        float("inf"),
        True,
        False,
        "12",
        " 12 ",
        "1.0",
        "1_0",
        "1.",
        "-1",
        "x",
        "\u0663",
        "",
        None,
        [],
        {},
    ]
) | st.integers(-(2**64), 2**64)
finals = st.sampled_from(
    [True, False, 0, 1, 2, -1, 0.0, 1.0, 0.5, "yes", "no", "TRUE", " true", "1", "", None]
)
contexts = st.dictionaries(
    st.sampled_from(["notification_key", "account", "x", ""]), event_texts | json_leaf, max_size=3
) | st.sampled_from([None, [], "notification_key", 5])
extra_values = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=4,
)


def event_fields(name: str, values: st.SearchStrategy[Any]) -> dict[str, st.SearchStrategy[Any]]:
    """A field under its key in the event, its name here, or both."""
    return {EVENT_KEYS[name]: values, name: values}


events = st.fixed_dictionaries(
    {},
    optional={
        **event_fields("event_type", event_texts | json_leaf),
        **event_fields("event_timestamp", timestamps),
        **event_fields("message_id", event_texts | json_leaf),
        **event_fields("is_final", finals),
        "context": contexts,
        "destinationPhoneNumber": st.just("+375291234567"),
        "messageStatus": event_texts,
        "other": extra_values,
    },
)
# Events as End User Messaging writes them, with the cases around: mostly readable.
documented_events = st.fixed_dictionaries(
    {
        "eventType": st.sampled_from(["TEXT_DELIVERED", "TEXT_QUEUED", "TEXT_BLOCKED"]),
        "eventTimestamp": st.integers(0, 2**53),
        "messageId": st.text(min_size=1, max_size=8),
        "context": st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2),
    },
    optional={
        "isFinal": st.booleans(),
        "destinationPhoneNumber": st.just("+375291234567"),
        "x": extra_values,
    },
)


def assert_same_event(got: DeliveryEvent, expected: OracleDeliveryEvent) -> None:
    assert dataclasses.asdict(got) == expected.model_dump()
    assert got.delivery_status == expected.delivery_status
    assert computed(lambda: got.occurred_at) == computed(lambda: expected.occurred_at)


@given(data=events | documented_events)
@settings(max_examples=1500)
def test_a_delivery_event_is_read_as_the_pydantic_model_read_it(data: dict[str, Any]) -> None:
    expected = outcome(lambda: OracleDeliveryEvent.model_validate(data))
    got = outcome(lambda: DeliveryEvent.parse(data))
    same_outcome(got, expected)
    if expected[0] is not None:
        assert_same_event(got[0], expected[0])


def json_texts(data: dict[str, Any]) -> st.SearchStrategy[str]:
    """`data`'s JSON, and the ways a text can fail to be that JSON or any."""
    text = json.dumps(data)
    body = text[1:-1]
    comma = ", " if body else ""
    return st.sampled_from(
        [
            text,
            f"  {text}\n",
            text[: len(text) // 2],
            text + "x",
            "\ufeff" + text,
            "[" + text + "]",
            "{" + body + comma + '"messageId": 5, "messageId": "m"}',  # repeated keys: the last counts
            "{" + body + comma + '"messageId": "m", "messageId": 5}',
            "{" + body + comma + '"other": "\\udc00"}',  # a lone surrogate, escaped
            "{" + body + comma + '"\\ud800": 1}',
            "{" + body + comma + '"other": "\\ud83d\\ude00"}',  # a pair is one character
            "{" + body + comma + '"other": "\\\\ud800"}',  # not an escape: a backslash, then text
            "{" + body + comma + '"other": "a\nb"}',  # a control character in a text
            "{" + body + comma + '"other": NaN, "x": -Infinity}',
            "{" + body + comma + '"other": "\ud800"}',  # a lone surrogate in the str itself
        ]
    ) | st.builds(
        lambda depth, inner, digits, sign, point: st.sampled_from(
            [
                "{" + body + comma + '"other": ' + "[" * depth + inner + "]" * depth + "}",
                "{" + body + comma + '"other": ' + '{"k":' * depth + "1" + "}" * depth + "}",
                "[" * (depth + 1) + "]" * (depth + 1),
                "{" + body + comma + '"other": ' + sign + "9" * digits + point + "}",
            ]
        ),
        st.integers(197, 202),
        st.sampled_from(["", "1", "[]", "{}"]),
        st.sampled_from([4299, 4300, 4301]),
        st.sampled_from(["", "-"]),
        st.sampled_from(["", ".5", "e1", ".0e1"]),
    ).flatmap(lambda texts: texts)


json_messages = (
    (events | documented_events).flatmap(json_texts)
    | st.text(max_size=8)
    | st.sampled_from(["", "null", "5", '"x"', "[]", "{}", "{", "nope", "NaN"])
)


@given(text=json_messages, as_bytes=st.booleans())
@settings(max_examples=2000)
def test_an_sns_message_is_read_as_the_pydantic_model_read_its_json(text: str, as_bytes: bool) -> None:
    try:
        message: str | bytes = text.encode() if as_bytes else text
    except UnicodeEncodeError:
        message = text
    expected = outcome(lambda: OracleDeliveryEvent.model_validate_json(message))
    got = outcome(lambda: DeliveryEvent.from_json(message))
    same_outcome(got, expected)
    if expected[0] is not None:
        assert_same_event(got[0], expected[0])


@pytest.mark.parametrize(
    "message",
    [b"\xff{}", '{"eventType": "T"}'.encode("utf-16"), b"\xef\xbb\xbf{}", b'{"x": "\xed\xa0\x80"}'],
    ids=["not-utf-8", "utf-16", "utf-8-bom", "encoded-surrogate"],
)
def test_bytes_that_are_no_utf_8_json_are_refused_as_a_whole(message: bytes) -> None:
    same_outcome(
        outcome(lambda: DeliveryEvent.from_json(message)),
        outcome(lambda: OracleDeliveryEvent.model_validate_json(message)),
    )
    with pytest.raises(Invalid) as refused:
        DeliveryEvent.from_json(message)
    assert [error["loc"] for error in refused.value.errors()] == [()]


def test_a_field_given_by_both_its_key_and_its_name_is_read_from_its_key() -> None:
    data = {"eventType": "TEXT_DELIVERED", "event_type": 5, "eventTimestamp": 1, "messageId": "m"}
    assert DeliveryEvent.parse(data).event_type == "TEXT_DELIVERED"
    with pytest.raises(Invalid) as refused:
        DeliveryEvent.parse({**data, "eventType": 5, "event_type": "TEXT_DELIVERED"})
    assert [error["loc"] for error in refused.value.errors()] == [("eventType",)]
    with pytest.raises(Invalid) as refused:
        DeliveryEvent.parse({"event_type": "", "event_timestamp": 1, "message_id": "m"})
    assert [error["loc"] for error in refused.value.errors()] == [("event_type",)]
