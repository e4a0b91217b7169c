"""pydantic's lax reading of one JSON value, without pydantic: what `pipeline.validation`'s `Fields`
reads a field with. Each function is held to pydantic itself (tests/unit/test_validation_numbers.py)
or to the models `Fields` replaced (the oracle tests named in `pipeline.validation`).
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

# Rust's `str::trim`, with which pydantic trims a number's text: Unicode's White_Space, which
# Python's `str.strip()` exceeds (it also strips U+001C-U+001F, which pydantic refuses).
_WHITESPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
# An integer's text as JSON writes it, how pydantic reads an int's text first (jiter's number): at
# most 4300 characters, a sign included (Python's `int()` counts digits only).
_JSON_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)")
_JSON_INTEGER_START = re.compile(r"-?[1-9][0-9]*")
_DIGITS_MAX = 4300
# The text of a float as Rust parses one (ASCII; "1.", ".5", "1e3", "inf", "infinity", "nan").
_FLOAT_TEXT = re.compile(
    r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|(?i:inf|infinity|nan))"
)


def integer(value: Any) -> int | None:
    """pydantic's lax integer (`str_as_int`): an int (a bool too), an integral float within 64
    bits, the text of one as JSON writes it, or once cleaned (`_cleaned_integer`: " 1_000 ", "+5",
    "3.00")."""
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float) and value.is_integer() and -(2.0**63) < value < 2.0**63:
        return int(value)
    if isinstance(value, str):
        number = _json_integer(value)
        if number is None:
            cleaned = _cleaned_integer(value)
            number = None if cleaned is None else _json_integer(cleaned)
        return number
    return None


def _json_integer(text: str) -> int | None:
    if len(text) > _DIGITS_MAX or _JSON_INTEGER.fullmatch(text) is None:
        return None
    return int(text)


def _cleaned_integer(text: str) -> str | None:
    """pydantic's `clean_int_str`: the text of an integer without its spaces, a `+`, leading zeros,
    a `.0...` and `_` between digits; None if it is none ("1.", "_1", "1__0", "+-1")."""
    before = len(text)
    text = text.strip(_WHITESPACE)
    if text.startswith("+"):
        if text.startswith("+-"):
            return None
        text = text[1:]
    sign = ""
    if text.startswith("-"):
        if text.startswith(("--", "-+")):
            return None
        sign, text = "-", text[1:]
    stripped = _without_leading_zeros(text)
    if stripped is None:
        return None
    text = stripped
    point = text.find(".")
    if point >= 0 and text[point + 1 :] and not text[point + 1 :].strip("0"):
        text = text[:point]
    if _underscores_between(text):
        return sign + text.replace("_", "")
    return None if len(text) == before else sign + text


def _without_leading_zeros(text: str) -> str | None:
    """pydantic's `strip_leading_zeros`, quirks kept: "0_0" is "0", "00.0" is "0.0", and "0-9" is
    "-9"."""
    if not text or text[0] not in "0123456789-":
        return None
    if text[0] != "0":
        return text
    for index, char in enumerate(text[1:], 1):
        if char in "123456789-":
            return text[index:]
        if char == ".":
            return text[index - 1 :]
        if char not in "0_":
            return None
    return text[-1]


def _underscores_between(text: str) -> bool:
    """pydantic's `strip_underscores` applies: `_` in the text, never first, last or doubled."""
    return "_" in text and not text.startswith("_") and not text.endswith("_") and "__" not in text


def floating(value: Any) -> float | None:
    """pydantic's lax number: an int or float (a bool too), or the text of one as Rust reads it
    ("1e3", "inf", " 5 "), then without its `_` ("1_000.5")."""
    if isinstance(value, int | float):
        try:
            return float(value)
        except OverflowError:  # an int too large for a float
            return None
    if isinstance(value, str):
        number = _float_text(value.strip(_WHITESPACE))
        if number is None and _underscores_between(value):
            number = _float_text(value.replace("_", ""))
        return number
    return None


def _float_text(text: str) -> float | None:
    return float(text) if text.isascii() and _FLOAT_TEXT.fullmatch(text) else None


# pydantic's lax booleans from text (exact, case-insensitive; no surrounding spaces) and numbers.
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


def boolean(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.lower()
        return True if text in _TRUE else False if text in _FALSE else None
    return None


# pydantic's (speedate's) RFC 3339 text of a moment with its offset: `T`, `t`, `_` or a space between
# date and time, seconds and a fraction (`.` or `,`, cut to microseconds) optional, `Z` or `+HH[:]MM`.
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt_ ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d+))?)?"
    r"(?:[Zz]|([+-])(\d{2}):?(\d{2}))"
)
# A Unix time as text: a whole number, or one with a point, then perhaps an exponent ("1700000000",
# "-1.5", ".5", "1.5e3"; not "1e3").
_UNIX_TEXT = re.compile(r"[+-]?(?:\d+|(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?)")
# Past this many seconds either way, pydantic reads a Unix time as milliseconds.
_UNIX_MILLISECONDS_FROM = 2e10
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def aware_moment(value: Any) -> datetime | None:
    """pydantic's `AwareDatetime`: a datetime with its offset, its RFC 3339 text, or a Unix time
    (seconds, or milliseconds past 2e10) as a number or its text, read as UTC."""
    if isinstance(value, datetime):
        return value if value.tzinfo is not None and value.utcoffset() is not None else None
    if isinstance(value, str):
        match = _RFC3339.fullmatch(value)
        if match is not None:
            return _rfc3339(match)
        if not _UNIX_TEXT.fullmatch(value):
            return None
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if value != value or value in (float("inf"), float("-inf")):
        return None
    try:
        if abs(value) > _UNIX_MILLISECONDS_FROM:
            return _EPOCH + timedelta(milliseconds=value)
        return _EPOCH + timedelta(seconds=value)
    except OverflowError:
        return None


def _rfc3339(match: re.Match[str]) -> datetime | None:
    year, month, day, hour, minute, second, fraction, sign, offset_hours, offset_minutes = match.groups()
    offset = timedelta(0)
    if sign is not None:
        if int(offset_hours) > 23 or int(offset_minutes) > 59:
            return None
        offset = timedelta(hours=int(offset_hours), minutes=int(offset_minutes))
        offset = -offset if sign == "-" else offset
    try:
        return datetime(
            int(year),
            int(month),
            int(day),
            int(hour),
            int(minute),
            int(second or 0),
            int((fraction or "0")[:6].ljust(6, "0")),
            tzinfo=UTC if offset == timedelta(0) else timezone(offset),
        )
    except ValueError:
        return None


def search(pattern: str, value: str) -> bool:
    """pydantic's `pattern` (Rust's regex, unanchored): a final `$` is the text's end, never before a
    final newline as Python's `$` also matches."""
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.search(pattern, value) is not None


def bound_refusal(
    number: float, ge: float | None, gt: float | None, le: float | None
) -> tuple[str, str] | None:
    """pydantic's (type, message) for a number outside its bounds (NaN is outside every one)."""
    if gt is not None and not number > gt:
        return "greater_than", f"Input should be greater than {gt}"
    if ge is not None and not number >= ge:
        return "greater_than_equal", f"Input should be greater than or equal to {ge}"
    if le is not None and not number <= le:
        return "less_than_equal", f"Input should be less than or equal to {le}"
    return None


INTEGER_REFUSALS = {
    "int_type": "Input should be a valid integer",
    "int_parsing": "Input should be a valid integer, unable to parse string as an integer",
    "int_from_float": "Input should be a valid integer, got a number with a fractional part",
    "int_parsing_size": "Unable to parse input string as an integer, exceeded maximum size",
    "finite_number": "Input should be a finite number",
}


def integer_refusal(value: Any) -> str | None:
    """pydantic's type of refusal of `value` as a lax integer (None: it is one). A float must be
    finite and, whole, fit in 64 bits."""
    if isinstance(value, float) and not -(2**63) < value < 2**63:  # NaN too
        return "int_parsing_size" if math.isfinite(value) else "finite_number"
    if integer(value) is not None:
        return None
    if isinstance(value, str):
        # pydantic reads the text first as a JSON integer: one of more than 4300 characters is too large.
        start = _JSON_INTEGER_START.match(value)
        return "int_parsing_size" if start is not None and len(start.group()) > _DIGITS_MAX else "int_parsing"
    if isinstance(value, float):
        return "int_from_float" if math.isfinite(value) else "finite_number"
    return "int_type"
