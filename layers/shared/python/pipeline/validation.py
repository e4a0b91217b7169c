"""Checks for the documents on the Telegram functions' cold path, without pydantic.

Importing pydantic and building its schemas costs about 0.4x of `import boto3` at each cold start
(docs/perf.md). The documents read on the Telegram functions' first invocation have plain fields,
so they are checked here: the envelope (`pipeline.envelope`), the Telegram update
(`pipeline.telegram`), the worker's settings (`pipeline.worker`), the `ai` consumer's reading of
a model's answer and the `crm` consumer's of its secret. The models with richer rules (CRM events,
SMS rules, the CRMs' webhooks, deployment settings) stay pydantic models, imported only where
they are used.

A refusal has pydantic's shape (`errors()`: `loc`, `msg`, `type`, never the input, which may be a
phone number) and `Invalid` is a `ValueError`, as pydantic's `ValidationError` is: one reader of
refusals (the webhook's 4xx body, the worker's dead-letter reason, the synth's problems) serves
both. tests/unit/test_validation_oracle.py checks these documents against the pydantic models
they replace, on generated input.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Final, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()
"""A field's default when it is required."""


@runtime_checkable
class Refusals(Protocol):
    """A refusal that lists its fields: `Invalid`, or pydantic's `ValidationError`."""

    def errors(self, *, include_input: bool = ...) -> list[Any]: ...


class Invalid(ValueError):
    """A document refused, with every field's reason."""

    def __init__(self, title: str, errors: list[dict[str, Any]]) -> None:
        self.title = title
        self._errors = [dict(error) for error in errors]
        super().__init__(self._describe())

    def errors(self, *, include_input: bool = False) -> list[dict[str, Any]]:
        """Each refusal as `{type, loc, msg}` (pydantic's keys; the input is never kept)."""
        del include_input  # pydantic's parameter, accepted so one reader serves both
        return [dict(error) for error in self._errors]

    def error_count(self) -> int:
        return len(self._errors)

    def _describe(self) -> str:
        count = len(self._errors)
        lines = [f"{count} validation error{'s' if count != 1 else ''} for {self.title}"]
        for error in self._errors:
            lines.append(".".join(str(part) for part in error["loc"]) or "(body)")
            lines.append(f"  {error['msg']} [type={error['type']}]")
        return "\n".join(lines)


def refusal(loc: tuple[str | int, ...], kind: str, message: str) -> dict[str, Any]:
    return {"type": kind, "loc": loc, "msg": message}


# pydantic's text of an integer: ASCII digits, `_` between them, optionally `.0...` ("12", "1_000", "3.00").
_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+(?:_[0-9]+)*(?:\.0+)?")
# What pydantic (Rust's `str::trim`, Unicode White_Space) strips around one; Python's `strip()` also
# strips \x1c-\x1f, which pydantic refuses.
_SPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680"
    + "".join(map(chr, range(0x2000, 0x200B)))
    + "\u2028\u2029\u202f\u205f\u3000"
)
# pydantic reads the text first as a JSON integer: one of more than 4300 characters is too large.
_JSON_INTEGER_START = re.compile(r"-?[1-9][0-9]*")
_MAX_INTEGER_DIGITS = 4300
# pydantic makes an int of a float only inside the signed 64-bit range.
_INT64_FROM_FLOAT = 2.0**63
_NOT_AN_INTEGER = ("int_type", "Input should be a valid integer")
_TOO_LARGE = ("int_parsing_size", "Unable to parse input string as an integer, exceeded maximum size")
_UNPARSED = ("int_parsing", "Input should be a valid integer, unable to parse string as an integer")


def _lax_integer(value: Any) -> int | tuple[str, str]:
    """pydantic's lax integer: an int (a bool too), an integral float, a string of one; else
    pydantic's (type, message) for the value."""
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return "finite_number", "Input should be a finite number"
        if not value.is_integer():
            return "int_from_float", "Input should be a valid integer, got a number with a fractional part"
        return int(value) if -_INT64_FROM_FLOAT < value < _INT64_FROM_FLOAT else _TOO_LARGE
    if not isinstance(value, str):
        return _NOT_AN_INTEGER
    start = _JSON_INTEGER_START.match(value)
    if start is not None and len(start.group()) > _MAX_INTEGER_DIGITS:
        return _TOO_LARGE
    text = value.strip(_SPACE)
    if not _INTEGER_TEXT.fullmatch(text):
        return _UNPARSED
    negative = text.startswith("-")
    digits = text.split(".", 1)[0].lstrip("+-").replace("_", "").lstrip("0") or "0"
    if negative + len(digits) > _MAX_INTEGER_DIGITS:  # a minus sign counts
        return _UNPARSED
    return -int(digits) if negative else int(digits)


def _integer(value: Any) -> int | None:
    """pydantic's lax integer (`_lax_integer`), None for what it refuses."""
    number = _lax_integer(value)
    return number if isinstance(number, int) else None


def _float(value: Any) -> float | None:
    """pydantic's lax number: an int or float (a bool too), or an ASCII string of one ("1e3", "inf")."""
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and value.isascii():
        try:
            return float(value)
        except ValueError:
            return None
    return None


# pydantic's lax booleans from text (exact, case-insensitive; no surrounding spaces) and numbers.
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


def _boolean(value: Any) -> bool | None:
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


def _aware_moment(value: Any) -> datetime | None:
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


def _search(pattern: str, value: str) -> bool:
    """pydantic's `pattern` (Rust's regex, unanchored): a final `$` is the text's end, never before a
    final newline as Python's `$` also matches."""
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.search(pattern, value) is not None


def _bound_refusal(
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


class Fields:
    """One document's fields, read and checked one by one; `done()` raises every refusal at once."""

    def __init__(self, title: str, data: Any, *, known: Collection[str] | None = None) -> None:
        """`known`: the only keys allowed (others refused, as pydantic's `extra="forbid"`); None
        keeps any other key."""
        if not isinstance(data, Mapping):
            raise Invalid(
                title,
                [refusal((), "model_type", f"Input should be a valid dictionary or instance of {title}")],
            )
        self.title = title
        self.data: Mapping[str, Any] = data
        self._known = known
        self.problems: list[dict[str, Any]] = []

    def _get(self, key: str, default: Any) -> Any:
        if key in self.data:
            return self.data[key]
        if default is MISSING:
            self.problems.append(refusal((key,), "missing", "Field required"))
        return default

    def text(
        self,
        key: str,
        *,
        min_length: int = 0,
        max_length: int | None = None,
        pattern: str | None = None,
        default: Any = MISSING,
    ) -> Any:
        """A string; `pattern`: a regular expression found in it (`_search`, as pydantic applies one)."""
        value = self._get(key, default)
        if key not in self.data or (value is None and default is None):
            return value
        if not isinstance(value, str):
            self.problems.append(refusal((key,), "string_type", "Input should be a valid string"))
        elif len(value) < min_length:
            s = "" if min_length == 1 else "s"
            self.problems.append(
                refusal((key,), "string_too_short", f"String should have at least {min_length} character{s}")
            )
        elif max_length is not None and len(value) > max_length:
            s = "" if max_length == 1 else "s"
            self.problems.append(
                refusal((key,), "string_too_long", f"String should have at most {max_length} character{s}")
            )
        elif pattern is not None and not _search(pattern, value):
            self.problems.append(
                refusal((key,), "string_pattern_mismatch", f"String should match pattern '{pattern}'")
            )
        return value

    def choice(self, key: str, options: tuple[str, ...], *, default: Any = MISSING) -> Any:
        """One of `options` (None too where the default is None)."""
        value = self._get(key, default)
        if key in self.data and value not in options and not (value is None and default is None):
            quoted = [f"'{option}'" for option in options]
            expected = ", ".join(quoted[:-1]) + f" or {quoted[-1]}" if len(quoted) > 1 else quoted[0]
            self.problems.append(refusal((key,), "literal_error", f"Input should be {expected}"))
        return value

    def integer(self, key: str, *, strict: bool = False, default: Any = MISSING) -> Any:
        """An integer; `strict`: an int and nothing else (not a bool, a float or a string)."""
        value = self._get(key, default)
        if key not in self.data:
            return value
        if strict:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            self.problems.append(refusal((key,), "int_type", "Input should be a valid integer"))
            return value
        number = _integer(value)
        if number is None:
            self.problems.append(refusal((key,), "int_type", "Input should be a valid integer"))
            return value
        return number

    def number(
        self,
        key: str,
        kind: type[int] | type[float] = int,
        *,
        ge: float | None = None,
        gt: float | None = None,
        le: float | None = None,
        default: Any = MISSING,
    ) -> Any:
        """A lax int or float (`kind`) within its bounds (None allowed where the default is None)."""
        value = self._get(key, default)
        if key not in self.data or (value is None and default is None):
            return value
        number: int | float | tuple[str, str] | None = _lax_integer(value) if kind is int else _float(value)
        if isinstance(number, tuple):
            self.problems.append(refusal((key,), *number))
            return value
        if number is None:
            self.problems.append(refusal((key,), "float_parsing", "Input should be a valid number"))
            return value
        outside = _bound_refusal(number, ge, gt, le)
        if outside is not None:
            self.problems.append(refusal((key,), *outside))
        return number

    def boolean(self, key: str, *, default: Any = MISSING) -> Any:
        """pydantic's lax boolean (`true`, 1, "yes", "off", ...)."""
        value = self._get(key, default)
        if key not in self.data:
            return value
        flag = _boolean(value)
        if flag is None:
            self.problems.append(refusal((key,), "bool_parsing", "Input should be a valid boolean"))
            return value
        return flag

    def text_mapping(self, key: str, *, default: Any = MISSING) -> Any:
        """A JSON object of strings (`dict[str, str]`); each value that is not one is refused by
        its key."""
        value = self.mapping(key, default=default)
        if key not in self.data or not isinstance(value, dict):
            return value
        for name, item in value.items():
            if not isinstance(item, str):
                self.problems.append(refusal((key, name), "string_type", "Input should be a valid string"))
        return value

    def mapping(self, key: str, *, default: Any = MISSING) -> Any:
        """A JSON object (a dict), or the default (None allowed where the default is None)."""
        value = self._get(key, default)
        if key not in self.data or (value is None and default is None):
            return value
        if not isinstance(value, Mapping):
            self.problems.append(refusal((key,), "dict_type", "Input should be a valid dictionary"))
            return value
        return dict(value)

    def moment(self, key: str) -> Any:
        """A datetime, or the ISO 8601 text of one (what the writer of a stored body wrote)."""
        value = self._get(key, MISSING)
        if key not in self.data or isinstance(value, datetime):
            return value
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value)
            except ValueError:
                pass
        self.problems.append(refusal((key,), "datetime_type", "Input should be a valid datetime"))
        return value

    def aware_moment(self, key: str) -> Any:
        """A moment with its offset (pydantic's `AwareDatetime`; see `_aware_moment`)."""
        value = self._get(key, MISSING)
        if key not in self.data:
            return value
        moment = _aware_moment(value)
        if moment is None:
            self.problems.append(refusal((key,), "datetime_parsing", "Input should be a valid datetime"))
            return value
        return moment

    def document(self, key: str, parse: Callable[[Any], T]) -> T | None:
        """A nested document, `parse(value)`; its refusals are this one's, under `key`."""
        value = self._get(key, MISSING)
        if key not in self.data:
            return None
        try:
            return parse(value)
        except Invalid as error:
            self.problems.extend({**problem, "loc": (key, *problem["loc"])} for problem in error.errors())
            return None

    def checked(self, key: str, value: T, rule: Callable[[T], T]) -> T:
        """`rule(value)`, its ValueError a refusal of `key` (pydantic's field validator)."""
        if any(problem["loc"] == (key,) for problem in self.problems) or key not in self.data:
            return value
        try:
            return rule(value)
        except ValueError as error:
            self.problems.append(refusal((key,), "value_error", f"Value error, {error}"))
            return value

    def done(self) -> None:
        if self._known is not None:
            for key in self.data:
                if key not in self._known:
                    self.problems.append(refusal((key,), "extra_forbidden", "Extra inputs are not permitted"))
        if self.problems:
            raise Invalid(self.title, self.problems)

    def sequence(
        self, key: str, kind: type[int] | type[str], *, length: int | None = None, default: Any = MISSING
    ) -> Any:
        """A tuple of lax ints or of strings (`kind`), from a list or tuple: pydantic's
        `tuple[int, int]` with `length`, `tuple[str, ...]` without (None allowed where the default
        is None). An item refused is named by its index."""
        value = self._get(key, default)
        if key not in self.data or (value is None and default is None):
            return value
        if not isinstance(value, list | tuple):
            self.problems.append(refusal((key,), "tuple_type", "Input should be a valid tuple"))
            return value
        if length is not None and len(value) > length:
            message = f"Tuple should have at most {length} items after validation, not {len(value)}"
            self.problems.append(refusal((key,), "too_long", message))
            return value
        items: list[Any] = []
        for index, item in enumerate(value):
            if kind is int:
                number = _lax_integer(item)
                if isinstance(number, tuple):
                    self.problems.append(refusal((key, index), *number))
                items.append(number)
            else:
                if not isinstance(item, str):
                    self.problems.append(
                        refusal((key, index), "string_type", "Input should be a valid string")
                    )
                items.append(item)
        for index in range(len(value), length or 0):
            self.problems.append(refusal((key, index), "missing", "Field required"))
        return tuple(items)
