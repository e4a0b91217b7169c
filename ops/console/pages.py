"""The console's HTML: plain pages and forms, no script, rendered from the Jinja2 templates in
`templates/` (one layout, `base.html`, that every page extends; the shared pieces in
`macros.html`). A new page is a template extending `base.html` and a `render` call.

Every value is escaped (autoescape: a template writes no value as raw HTML) and phone-masked:
free text (reasons, errors, state data) by the `text` filter, every phone-looking number; ids,
keys, times and the CLI's lines by `ident`, +international numbers, as `ops journal` prints
them. Actions are POST forms carrying the session's CSRF token."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from ops.console import events
from ops.console.data import masked, masked_id
from ops.text import format_age

TEMPLATES = Path(__file__).resolve().parent / "templates"
NAV = (
    ("/events", "Events"),
    ("/consumers", "Consumers"),
    ("/dlqs", "DLQs"),
    ("/sms", "SMS journal"),
    ("/bot", "Bot conversations"),
    ("/broadcasts", "Broadcasts"),
    ("/alarms", "Alarms"),
)
STATE_CLASS = {
    events.PROCESSED: "ok",
    events.DUPLICATE: "ok",
    events.RETRYING: "warn",
    events.WAITING: "warn",
    events.REDRIVEN: "warn",
    events.DEAD_LETTERED: "bad",
    events.NOT_ROUTED: "muted",
}
DECISIONS = ("accepted", "not-sent", "abandon")


def text(value: Any) -> str:
    """Free text, every phone-looking number masked (the template escapes it)."""
    if value is None or value == "":
        return "-"
    return masked(value)


def ident(value: Any) -> str:
    """An id, key, count, time or name, +international numbers masked (the template escapes it)."""
    if value is None or value == "":
        return "-"
    return masked_id(value)


def href(path: str, query: Mapping[str, str]) -> str:
    """A link's target: `path` and the query's non-empty values."""
    return path + ("?" + urlencode({k: v for k, v in query.items() if v}) if query else "")


def _call_line(call: Mapping[str, Any]) -> str:
    return f"{call['method']} ({call['status']})"


ENVIRONMENT = Environment(
    loader=FileSystemLoader(TEMPLATES),
    autoescape=True,
    undefined=StrictUndefined,
    keep_trailing_newline=False,
)
ENVIRONMENT.filters.update(text=text, ident=ident, age=format_age, call_line=_call_line)
ENVIRONMENT.globals.update(href=href, state_class=STATE_CLASS, nav=NAV, decisions=DECISIONS)


def render(template: str, title: str, where: str, active: str = "", **context: Any) -> str:
    """A whole page: `template` (extending base.html) with the layout's title, deployment label
    and highlighted nav path."""
    return ENVIRONMENT.get_template(template).render(title=title, where=where, active=active, **context)
