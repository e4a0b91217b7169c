"""Checks for the documents the functions read, without pydantic.

Importing pydantic and building its schemas costs about 0.4x of `import boto3` at each cold start
(docs/perf.md), and every document a function reads has plain fields, so they are checked here:
the envelope (`pipeline.envelope`), the Telegram update (`pipeline.telegram`), the worker's
settings (`pipeline.worker`), the `ai` consumer's reading of a model's answer, the `crm`
consumer's of its secret, the CRM order event (`pipeline.crm.event_model`), the SMS settings,
rules and delivery events (`pipeline.sms`), and the Bitrix24 and amoCRM webhooks and REST answers
(`pipeline.crm.bitrix24`, `pipeline.crm.amocrm`). Only the deployment's settings (`infra.config`,
read at synth and by the tools) stay pydantic models.

A refusal has pydantic's shape (`errors()`: `loc`, `msg`, `type`, never the input, which may be a
phone number) and `Invalid` is a `ValueError`, as pydantic's `ValidationError` is: one reader of
refusals (the webhook's 4xx body, the worker's dead-letter reason, the synth's problems) serves
both. Each converted document has an oracle test holding it to the pydantic model it replaced, on
generated input (tests/unit/test_validation_oracle.py, tests/unit/webhook/test_crm_event_oracle.py,
tests/unit/sms/test_sms_*_oracle.py, tests/unit/crm_sources/test_*_oracle.py); lax numbers are
read as pydantic's Rust code reads them (tests/unit/test_validation_numbers.py).
"""

from __future__ import annotations

import math
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


def _integer(value: Any) -> int | None:
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


def _float(value: Any) -> float | None:
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
        if kind is int:
            refused = _integer_refusal(value)
            if refused is not None:
                self.problems.append(refusal((key,), refused, _INTEGER_REFUSALS[refused]))
                return value
        number = _integer(value) if kind is int else _float(value)
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
        """`rule(value)`, its ValueError a refusal of `key` (pydantic's field validator: it runs only
        on a valid value, none of whose items was refused)."""
        if any(problem["loc"][:1] == (key,) for problem in self.problems) or key not in self.data:
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

    def optional_aware_moment(self, key: str) -> Any:
        """`aware_moment`, or None where absent or null (pydantic's `AwareDatetime | None = None`)."""
        if self.data.get(key) is None:
            return None
        return self.aware_moment(key)

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
                refused = _integer_refusal(item)
                if refused is not None:
                    self.problems.append(refusal((key, index), refused, _INTEGER_REFUSALS[refused]))
                items.append(item if refused is not None else _integer(item))
            else:
                if not isinstance(item, str):
                    self.problems.append(
                        refusal((key, index), "string_type", "Input should be a valid string")
                    )
                items.append(item)
        for index in range(len(value), length or 0):
            self.problems.append(refusal((key, index), "missing", "Field required"))
        return tuple(items)

    def text_tuple(self, key: str, *, default: Any = MISSING) -> Any:
        """A JSON array of strings (`tuple[str, ...]`), as a tuple; each item that is not a string
        is refused by its index."""
        return self.sequence(key, str, default=default)

    def integer_mapping(self, key: str, *, default: Any = MISSING) -> Any:
        """A JSON object of integers (`dict[str, int]`, each a lax int: "12", 3.0, true); each value
        that is not one is refused by its key, with pydantic's type of refusal."""
        value = self.mapping(key, default=default)
        if key not in self.data or not isinstance(value, dict):
            return value
        numbers = {}
        for name, item in value.items():
            if not isinstance(name, str):
                self.problems.append(refusal((key, name, "[key]"), "string_type", _NOT_TEXT))
            kind = _integer_refusal(item)
            if kind is not None:
                self.problems.append(refusal((key, name), kind, _INTEGER_REFUSALS[kind]))
            numbers[name] = item if kind is not None else _integer(item)
        return numbers

    def text_or_texts(self, key: str, *, min_length: int = 0, default: Any = MISSING) -> Any:
        """A string or a JSON object of strings (`str | dict[str, str]`, `min_length` bounding the
        string's or the object's length). Refused, each member of the union says why under its
        name, `(key, "str")` and `(key, "dict[str,str]", ...)`, as pydantic's union does."""
        value = self._get(key, default)
        if key not in self.data:
            return value
        if isinstance(value, Mapping):
            value = dict(value)
            wrong: list[tuple[Any, ...]] = []
            for name, text in value.items():
                wrong += [] if isinstance(name, str) else [(name, "[key]")]
                wrong += [] if isinstance(text, str) else [(name,)]
            if wrong:
                self.problems.append(refusal((key, "str"), "string_type", _NOT_TEXT))
                for where in wrong:
                    self.problems.append(refusal((key, "dict[str,str]", *where), "string_type", _NOT_TEXT))
                return value
        elif not isinstance(value, str):
            self.problems.append(refusal((key, "str"), "string_type", _NOT_TEXT))
            self.problems.append(
                refusal((key, "dict[str,str]"), "dict_type", "Input should be a valid dictionary")
            )
            return value
        if len(value) < min_length:
            s = "" if min_length == 1 else "s"
            message = f"Value should have at least {min_length} item{s} after validation, not {len(value)}"
            self.problems.append(refusal((key,), "too_short", message))
        return value

    def models(
        self, key: str, parse: Callable[[Any], T], *, min_length: int = 0, default: Any = MISSING
    ) -> Any:
        """A JSON array of documents (`tuple[Model, ...]`), each read by `parse` (refused with
        `Invalid`: its refusals under `(key, index)`); pydantic's `too_short` when fewer than
        `min_length` of them were read."""
        value = self._get(key, default)
        items = self._array(key, value) if key in self.data else None
        if items is None:
            return value
        documents = []
        for index, item in enumerate(items):
            try:
                documents.append(parse(item))
            except Invalid as error:
                for problem in error.errors():
                    self.problems.append(
                        refusal((key, index, *problem["loc"]), problem["type"], problem["msg"])
                    )
        if len(documents) < min_length:
            s = "" if min_length == 1 else "s"
            message = (
                f"Tuple should have at least {min_length} item{s} after validation, not {len(documents)}"
            )
            self.problems.append(refusal((key,), "too_short", message))
        return tuple(documents)

    def whole(self, rule: Callable[[], object]) -> None:
        """`rule()`, a check of the whole document (pydantic's model validator, mode="after"): it runs
        only when every field so far is valid and no key is extra, so it may rely on the values;
        its ValueError is the document's refusal (loc `()`), and no later one runs."""
        extra = self._known is not None and any(key not in self._known for key in self.data)
        if self.problems or extra:
            return
        try:
            rule()
        except ValueError as error:
            self.problems.append(refusal((), "value_error", f"Value error, {error}"))

    def _array(self, key: str, value: Any) -> list[Any] | tuple[Any, ...] | None:
        """A JSON array's items (a list or a tuple); anything else refused as pydantic's tuple."""
        if isinstance(value, list | tuple):
            return value
        self.problems.append(refusal((key,), "tuple_type", "Input should be a valid tuple"))
        return None


_NOT_TEXT = "Input should be a valid string"
_INTEGER_REFUSALS = {
    "int_type": "Input should be a valid integer",
    "int_parsing": "Input should be a valid integer, unable to parse string as an integer",
    "int_from_float": "Input should be a valid integer, got a number with a fractional part",
    "int_parsing_size": "Unable to parse input string as an integer, exceeded maximum size",
    "finite_number": "Input should be a finite number",
}


def _integer_refusal(value: Any) -> str | None:
    """pydantic's type of refusal of `value` as a lax integer (None: it is one). A float must be
    finite and, whole, fit in 64 bits."""
    if isinstance(value, float) and not -(2**63) < value < 2**63:  # NaN too
        return "int_parsing_size" if math.isfinite(value) else "finite_number"
    if _integer(value) is not None:
        return None
    if isinstance(value, str):
        # pydantic reads the text first as a JSON integer: one of more than 4300 characters is too large.
        start = _JSON_INTEGER_START.match(value)
        return "int_parsing_size" if start is not None and len(start.group()) > _DIGITS_MAX else "int_parsing"
    if isinstance(value, float):
        return "int_from_float" if math.isfinite(value) else "finite_number"
    return "int_type"
