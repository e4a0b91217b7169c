"""JSON text read as pydantic's `model_validate_json` reads it: one reader for every document
that comes as text (the SMS rules file, End User Messaging's delivery events).

pydantic's parser (jiter) refuses some text Python's `json` reads: a lone surrogate, values nested
deeper than it goes, numbers with more than 4300 characters before their point, bytes that are no
UTF-8. Such text is refused as a whole (`json_invalid`, loc `()`), and a document's refusals are
worded for JSON ("Input should be an object"), as pydantic words them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

from pipeline.validation import Invalid, refusal

T = TypeVar("T")

# Values nested deeper than this are refused (a scalar counts as a level, as an empty array does).
JSON_MAX_DEPTH = 201
# Characters of a number before its point or exponent (Python's limit of an int's digits too).
NUMBER_MAX_DIGITS = 4300
_SURROGATE = re.compile("[\ud800-\udfff]")
# pydantic's wording of a refusal of a JSON value where it differs from a Python value's.
_JSON_WORDING = {
    "model_type": "Input should be an object",
    "dict_type": "Input should be an object",
    "tuple_type": "Input should be a valid array",
    "list_type": "Input should be a valid array",
}


def parse_json(title: str, text: str | bytes, parse: Callable[[Any], T]) -> T:
    """`parse` of the JSON value in `text` (bytes: UTF-8), refused as `model_validate_json`
    refuses it: text that is no JSON (`json_invalid`, loc `()`), a `str` with a lone surrogate
    (`string_unicode`), then `parse`'s refusals worded for JSON."""
    if isinstance(text, bytes):
        try:
            text = text.decode()  # UTF-8 only, as jiter reads it (Python's json would guess)
        except UnicodeDecodeError as error:
            raise Invalid(title, [refusal((), "json_invalid", f"Invalid JSON: {error}")]) from None
    else:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate in the text itself (an undecodable byte)
            message = "Input should be a valid string, unable to parse raw data as a unicode string"
            raise Invalid(title, [refusal((), "string_unicode", message)]) from None
    try:
        data = json.loads(text, parse_int=_integer, parse_float=_float)
    except (ValueError, RecursionError) as error:
        raise Invalid(title, [refusal((), "json_invalid", f"Invalid JSON: {error}")]) from None
    unreadable = _unreadable(data, 1)
    if unreadable:
        raise Invalid(title, [refusal((), "json_invalid", f"Invalid JSON: {unreadable}")])
    try:
        return parse(data)
    except Invalid as error:
        problems = [
            {**problem, "msg": _JSON_WORDING.get(problem["type"], problem["msg"])}
            for problem in error.errors()
        ]
        raise Invalid(error.title, problems) from None


def _integer(text: str) -> int:
    if len(text) > NUMBER_MAX_DIGITS:
        raise ValueError("number out of range")
    return int(text)


def _float(text: str) -> float:
    if len(re.split(r"[.eE]", text, maxsplit=1)[0]) > NUMBER_MAX_DIGITS:
        raise ValueError("number out of range")
    return float(text)


def _unreadable(value: Any, depth: int) -> str | None:
    """Why jiter would refuse a value Python's `json` read at `depth`, if it would."""
    if depth > JSON_MAX_DEPTH:
        return "recursion limit exceeded"
    if isinstance(value, str):
        return "lone surrogate in hex escape" if _SURROGATE.search(value) else None
    if isinstance(value, dict):
        if any(_SURROGATE.search(key) for key in value):
            return "lone surrogate in hex escape"
        value = list(value.values())
    if isinstance(value, list):
        return next((why for item in value if (why := _unreadable(item, depth + 1))), None)
    return None
