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
tests/unit/sms/test_sms_*_oracle.py, tests/unit/crm_sources/test_*_oracle.py). How one value is
read (lax numbers, booleans, moments, patterns) is `pipeline.lax`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from typing import Any, Final, Protocol, TypeVar, runtime_checkable

from pipeline import lax

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

    def field_names(self, whole: str = "(whole)") -> list[str]:
        """The refused fields, dotted (`order.id`), sorted, each once; `whole` for a refusal of the
        whole document. What a reason or a log may say: never a value (it may be a phone number)."""
        return sorted({".".join(str(part) for part in error["loc"]) or whole for error in self._errors})

    def _describe(self) -> str:
        count = len(self._errors)
        lines = [f"{count} validation error{'s' if count != 1 else ''} for {self.title}"]
        for error in self._errors:
            lines.append(".".join(str(part) for part in error["loc"]) or "(body)")
            lines.append(f"  {error['msg']} [type={error['type']}]")
        return "\n".join(lines)


def refusal(loc: tuple[str | int, ...], kind: str, message: str) -> dict[str, Any]:
    return {"type": kind, "loc": loc, "msg": message}


def blank_is_none(value: Any) -> Any:
    """`value`, or None where it is a blank text (empty or spaces): how the CRMs write a field
    they leave unset."""
    return None if isinstance(value, str) and not value.strip() else value


def aliased(data: Mapping[str, Any], alias: str, name: str) -> str:
    """The key a field with an alias is read under, as pydantic's `populate_by_name` read it: its
    alias, else its own name where only that is given. A refusal names that key (a missing field,
    its alias)."""
    return name if alias not in data and name in data else alias


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
        """A string; `pattern`: a regular expression found in it (`lax.search`, as pydantic applies one)."""
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
        elif pattern is not None and not lax.search(pattern, value):
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
        number = lax.integer(value)
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
            refused = lax.integer_refusal(value)
            if refused is not None:
                self.problems.append(refusal((key,), refused, lax.INTEGER_REFUSALS[refused]))
                return value
        number = lax.integer(value) if kind is int else lax.floating(value)
        if number is None:
            self.problems.append(refusal((key,), "float_parsing", "Input should be a valid number"))
            return value
        outside = lax.bound_refusal(number, ge, gt, le)
        if outside is not None:
            self.problems.append(refusal((key,), *outside))
        return number

    def boolean(self, key: str, *, default: Any = MISSING) -> Any:
        """pydantic's lax boolean (`true`, 1, "yes", "off", ...)."""
        value = self._get(key, default)
        if key not in self.data:
            return value
        flag = lax.boolean(value)
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

    def aware_moment(self, key: str, *, default: Any = MISSING) -> Any:
        """A moment with its offset (pydantic's `AwareDatetime`; see `lax.aware_moment`); None too
        where the default is None."""
        value = self._get(key, default)
        if key not in self.data or (value is None and default is None):
            return value
        moment = lax.aware_moment(value)
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

    def sequence(
        self, key: str, kind: type[int] | type[str], *, length: int | None = None, default: Any = MISSING
    ) -> Any:
        """A tuple of lax ints or of strings (`kind`), from a list or tuple: pydantic's
        `tuple[int, int]` with `length`, `tuple[str, ...]` without (None allowed where the default
        is None). An item refused is named by its index."""
        value = self._get(key, default)
        if key not in self.data or (value is None and default is None):
            return value
        if self._array(key, value) is None:
            return value
        if length is not None and len(value) > length:
            message = f"Tuple should have at most {length} items after validation, not {len(value)}"
            self.problems.append(refusal((key,), "too_long", message))
            return value
        items: list[Any] = []
        for index, item in enumerate(value):
            if kind is int:
                refused = lax.integer_refusal(item)
                if refused is not None:
                    self.problems.append(refusal((key, index), refused, lax.INTEGER_REFUSALS[refused]))
                items.append(item if refused is not None else lax.integer(item))
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
            kind = lax.integer_refusal(item)
            if kind is not None:
                self.problems.append(refusal((key, name), kind, lax.INTEGER_REFUSALS[kind]))
            numbers[name] = item if kind is not None else lax.integer(item)
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
