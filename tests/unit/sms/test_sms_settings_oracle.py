"""The SMS settings, checked by hand, against the pydantic model they replaced (a test-only oracle).

`pipeline.sms.settings` left pydantic for the cold path of `sms`, `reconciler` and `sms_events`
(docs/perf.md). It must accept and refuse what the model did, name the same fields (and give the
same reason where two fields disagree, loc `()`), and hold the same values. The model below is the
one replaced, verbatim but for its name; Hypothesis searches environments and field values for a
difference.

Deliberate differences, left out of the generated input:

- a digit Python's Unicode (15.1) does not know (Unicode 16's, e.g. U+10D40) is no digit of
  SMS_QUIET_HOURS: pydantic's Rust regex took it for one, and `quiet_window` (Python's `re`) then
  found no window, so quiet hours were on yet never applied (a test below);
- `parse` reads text and JSON values: Python values JSON has no type for (bytes where text is
  expected) are not modelled.
"""

from __future__ import annotations

import dataclasses
import os
import re
from datetime import timedelta
from typing import Any, Literal

import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pipeline.retention import SMS_RETENTION_DAYS, SMS_RETENTION_MIN_DAYS
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
