"""`application/x-www-form-urlencoded` bodies with PHP-style bracket keys.

Bitrix24 outgoing webhooks and amoCRM webhooks post PHP arrays flattened into form fields:

    data[FIELDS][ID]=759          -> {"data": {"FIELDS": {"ID": "759"}}}
    leads[status][0][id]=1        -> {"leads": {"status": {"0": {"id": "1"}}}}
    a[]=x&a[]=y                   -> {"a": ["x", "y"]}

Two readers. `form_fields` yields each field in order, its name split into bracket segments and
its value decoded only when asked for: a reader keeps what it needs and builds nothing else (an
amoCRM batch may carry tens of thousands of custom-field fields the webhook never reads).
`parse_form` builds the whole form as nested dicts, for small forms (a Bitrix24 event): numeric
indices stay string keys of a dict (their order is the caller's business); only `[]` makes a
list, and only as the last bracket. Every value is a str.

The body is untrusted: a `FormError` says what is wrong with it (by field position, never by
quoting a name or a value, which may carry a token or a phone number). Stricter than PHP where
PHP silently guesses: a name whose brackets do not close or that has text after the last bracket
is refused rather than renamed, and `parse_form` refuses a name both scalar and nested and a
repeated scalar field rather than merging them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_plus

CONTENT_TYPE = "application/x-www-form-urlencoded"
# API Gateway's HTTP API payload quota (10 MB): no larger request reaches the webhook, and no
# reader here reads one. `local.apigw` refuses larger requests by this same figure.
MAX_BODY_BYTES = 10 * 1024 * 1024
# `parse_form` only, which builds every field: a Bitrix24 event has about ten.
MAX_FIELDS = 1000
MAX_DEPTH = 8  # bracket groups after the base name: data[FIELDS][ID] has 2

# A base name without brackets, then zero or more [segment] groups, and nothing after them.
_KEY = re.compile(r"(?P<base>[^\[\]]+)(?P<groups>(?:\[[^\[\]]*\])*)")
_GROUP = re.compile(r"\[([^\[\]]*)\]")
_FIELD = re.compile(r"[^&]+")


class FormError(ValueError):
    """Why a form body cannot be read; the message never quotes a field name or value."""


class FormTooLarge(FormError):
    """The body is over MAX_BODY_BYTES."""


def is_form(content_type: str | None) -> bool:
    """Whether a Content-Type header value names a form body (parameters such as charset aside)."""
    return (content_type or "").partition(";")[0].strip().lower() == CONTENT_TYPE


@dataclass(frozen=True, slots=True)
class FormField:
    """One field: its 1-based position, its name's segments (`a[b][]` -> ("a", "b", "")), and its
    value as sent, decoded by `value()`."""

    position: int
    path: tuple[str, ...]
    encoded_value: str

    def value(self) -> str:
        return _decode(self.encoded_value, self.position)


def form_fields(raw: bytes) -> Iterator[FormField]:
    """Every field of the form `raw`, in order, one at a time; FormError (at the first field it
    is about) for a body over MAX_BODY_BYTES, not UTF-8, or with a malformed name."""
    if len(raw) > MAX_BODY_BYTES:
        raise FormTooLarge(f"form body of {len(raw)} bytes exceeds the {MAX_BODY_BYTES}-byte limit")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FormError("form body is not UTF-8") from None
    # A field without "=" has a blank value; empty fields (`a=1&&b=2`) are no fields, as in parse_qsl.
    for position, match in enumerate(_FIELD.finditer(text), start=1):
        name, _, value = match.group().partition("=")
        yield FormField(position, _path(_decode_name(name, position), position), value)


def parse_form(raw: bytes) -> dict[str, Any]:
    """The form `raw` as nested dicts (see the module docstring); FormError if it is not one, or
    has more than MAX_FIELDS fields or a name nested deeper than MAX_DEPTH brackets."""
    form: dict[str, Any] = {}
    for field in form_fields(raw):
        if field.position > MAX_FIELDS:
            raise FormError(f"form has more than {MAX_FIELDS} fields")
        if len(field.path) - 1 > MAX_DEPTH:
            raise FormError(f"form field {field.position} is nested deeper than {MAX_DEPTH} brackets")
        _insert(form, field.path, field.value(), field.position)
    return form


def _decode_name(encoded: str, position: int) -> str:
    """`_decode`, quicker for the usual name: brackets as `%5B`/`%5D` and no other escape.

    Replacing those two escapes first decodes them as unquote would (an escape is `%` and two hex
    digits, and `[`/`]` are neither, so no other escape is made or broken); any `%` left is then
    decoded in full.
    """
    name = encoded.replace("%5B", "[").replace("%5D", "]").replace("%5b", "[").replace("%5d", "]")
    return _decode(name, position) if "%" in name or "+" in name else name


def _decode(encoded: str, position: int) -> str:
    try:
        return unquote_plus(encoded, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:  # a %-escape that decodes to invalid UTF-8
        raise FormError(f"form field {position} is not UTF-8 once %-decoded") from None


def _path(name: str, position: int) -> tuple[str, ...]:
    """`a[b][c]` -> ("a", "b", "c"); `a[]` -> ("a", "") (an empty segment appends)."""
    if "[" not in name and "]" not in name and name:
        return (name,)
    match = _KEY.fullmatch(name)
    if match is None:
        raise FormError(f"form field {position} has a malformed name (brackets)")
    segments = (match["base"], *_GROUP.findall(match["groups"]))
    if "" in segments[1:-1]:
        raise FormError(f"form field {position} has empty brackets before its last bracket")
    return segments


def _insert(form: dict[str, Any], path: tuple[str, ...], value: str, position: int) -> None:
    node: dict[str, Any] = form
    for depth, segment in enumerate(path[:-1]):
        last_step = depth == len(path) - 2
        child = node.get(segment)
        if last_step and path[-1] == "":
            # name[...][] : a list of values.
            if child is None:
                node[segment] = [value]
            elif isinstance(child, list):
                child.append(value)
            else:
                raise FormError(f"form field {position} appends to a name that is not a list")
            return
        if child is None:
            child = node[segment] = {}
        elif not isinstance(child, dict):
            raise FormError(f"form field {position} nests under a name that is also a scalar or a list")
        node = child
    leaf = path[-1]
    if leaf in node:
        existing = node[leaf]
        if isinstance(existing, str):
            raise FormError(f"form field {position} repeats a name given before")
        raise FormError(f"form field {position} gives a scalar to a name that is also nested or a list")
    node[leaf] = value
