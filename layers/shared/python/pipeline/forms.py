"""`application/x-www-form-urlencoded` bodies with PHP-style bracket keys, as nested dicts.

Bitrix24 outgoing webhooks and amoCRM webhooks post PHP arrays flattened into form fields:

    data[FIELDS][ID]=759          -> {"data": {"FIELDS": {"ID": "759"}}}
    leads[status][0][id]=1        -> {"leads": {"status": {"0": {"id": "1"}}}}
    a[]=x&a[]=y                   -> {"a": ["x", "y"]}

Numeric indices stay string keys of a dict (their order is the caller's business); only `[]`
makes a list, and only as the last bracket. Every value is a str.

The body is untrusted: a `FormError` says what is wrong with it (by field position, never by
quoting a name or a value, which may carry a token or a phone number). Stricter than PHP where
PHP silently guesses: a name both scalar and nested, a repeated scalar field, brackets that do
not close, and text after the last bracket are refused rather than merged or renamed.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl

MAX_FIELDS = 1000
MAX_DEPTH = 8  # bracket groups after the base name: data[FIELDS][ID] has 2

# A base name without brackets, then zero or more [segment] groups, and nothing after them.
_KEY = re.compile(r"(?P<base>[^\[\]]+)(?P<groups>(?:\[[^\[\]]*\])*)")
_GROUP = re.compile(r"\[([^\[\]]*)\]")


class FormError(ValueError):
    """Why a form body cannot be read; the message never quotes a field name or value."""


def parse_form(raw: bytes) -> dict[str, Any]:
    """The form `raw` as nested dicts (see the module docstring); FormError if it is not one."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FormError("form body is not UTF-8") from None
    try:
        pairs = parse_qsl(
            text,
            keep_blank_values=True,
            strict_parsing=False,
            encoding="utf-8",
            errors="strict",
            max_num_fields=MAX_FIELDS,
        )
    except UnicodeDecodeError:  # a %-escape that decodes to invalid UTF-8
        raise FormError("form body is not UTF-8 once %-decoded") from None
    except ValueError:  # parse_qsl: "Max number of fields exceeded"
        raise FormError(f"form has more than {MAX_FIELDS} fields") from None

    form: dict[str, Any] = {}
    for position, (name, value) in enumerate(pairs, start=1):
        _insert(form, _path(name, position), value, position)
    return form


def _path(name: str, position: int) -> list[str]:
    """`a[b][c]` -> ["a", "b", "c"]; `a[]` -> ["a", ""] (an empty segment appends)."""
    match = _KEY.fullmatch(name)
    if match is None:
        raise FormError(f"form field {position} has a malformed name (brackets)")
    segments = [match["base"], *_GROUP.findall(match["groups"])]
    if len(segments) - 1 > MAX_DEPTH:
        raise FormError(f"form field {position} is nested deeper than {MAX_DEPTH} brackets")
    if "" in segments[1:-1]:
        raise FormError(f"form field {position} has empty brackets before its last bracket")
    return segments


def _insert(form: dict[str, Any], path: list[str], value: str, position: int) -> None:
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
