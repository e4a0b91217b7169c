"""`pipeline.validation`'s lax numbers read text as pydantic's did (its Rust code, `str_as_int` and
`str_as_float`, ported with its quirks), checked against pydantic itself.

Comparing the SMS settings and delivery events with the pydantic models they replaced
(tests/unit/sms/test_sms_settings_oracle.py), then number texts with pydantic itself (the generated
test below), found each case here: the first reading stripped Python's spaces (pydantic's are
Unicode's White_Space, without U+001C-U+001F), took "1." for an integer and any integral float for
one (pydantic: within 64 bits), let Python's limits escape as a ValueError or an OverflowError
instead of a refusal, and read a float's text with Python's grammar (pydantic: Rust's, then once
more without its `_`, spaces kept).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from pipeline.validation import Fields, Invalid

INT: TypeAdapter[int] = TypeAdapter(int)
FLOAT: TypeAdapter[float] = TypeAdapter(float)


def ours(value: Any, kind: type[int] | type[float]) -> int | float | None:
    fields = Fields("Numbers", {"n": value})
    number = fields.number("n", kind)
    try:
        fields.done()
    except Invalid:
        return None
    return number  # type: ignore[no-any-return]


def pydantics(value: Any, kind: type[int] | type[float]) -> int | float | None:
    try:
        return (INT if kind is int else FLOAT).validate_python(value)
    except ValidationError:
        return None


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 24 else f"{text[:12]}...({len(text)} characters)"


def same(got: Any, expected: Any) -> bool:
    if isinstance(got, float) and math.isnan(got):
        return isinstance(expected, float) and math.isnan(expected)
    return got == expected and type(got) is type(expected)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1.", None),
        ("\x1c5", None),
        ("5\x1f", None),
        ("\xa05", 5),
        ("5\u3000", 5),
        ("0-9", -9),  # pydantic's quirk: leading zeros stripped up to a minus
        ("0__777", 777),
        ("0_0.0", 0),
        (1e20, None),
        (2.0**63, None),
        (-(2.0**63), None),
        (9.2e18, 9_200_000_000_000_000_000),
        ("9" * 4300, int("9" * 4300)),
        ("9" * 4301, None),  # was Python's ValueError, escaping the check
        ("-" + "9" * 4300, None),
    ],
    ids=short,
)
def test_an_integer_found_read_otherwise_is_read_as_pydantic_reads_it(
    value: Any, expected: int | None
) -> None:
    assert ours(value, int) == expected
    assert pydantics(value, int) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("\xa05", 5.0),
        ("\x855", 5.0),
        ("5\u2028", 5.0),
        ("\x1c5", None),
        ("6e_6", 6e6),  # Rust refuses it, then reads it without its `_`
        ("8._4", 8.4),
        ("+_5", 5.0),
        ("5_5\n", None),  # ... but without its spaces stripped
        ("\xa092_2", None),
        (10**400, None),  # was Python's OverflowError, escaping the check
    ],
    ids=short,
)
def test_a_float_found_read_otherwise_is_read_as_pydantic_reads_it(
    value: Any, expected: float | None
) -> None:
    assert ours(value, float) == expected
    assert pydantics(value, float) == expected


number_parts = st.sampled_from(
    [
        *"0123456789._eE+- \t\n\x0b\x1c\x1f",
        "inf",
        "nan",
        "infinity",
        "\xa0",
        "\x85",
        "\u2003",
        "\u0663",
        "\u200b",
    ]
)
number_texts = (
    st.lists(number_parts, max_size=10).map("".join)
    | st.text(max_size=6)
    | st.floats().map(str)
    | st.integers().map(str)
)
numbers = (
    number_texts
    | st.floats()
    | st.integers(-(2**70), 2**70)
    | st.sampled_from([2.0**63, -(2.0**63), 10**400, True, False])
)


@given(value=numbers)
@settings(max_examples=3000)
def test_a_lax_number_is_read_as_pydantic_reads_it(value: Any) -> None:
    for kind in (int, float):
        assert same(ours(value, kind), pydantics(value, kind)), kind
