"""The console's HTML: plain pages and forms, no script. Every value is escaped and phone-masked:
free text (reasons, errors, state data) by `text()`, every phone-looking number; ids, keys,
times and the CLI's lines by `ident()`, +international numbers, as `ops journal` prints them.
Actions are POST forms carrying the session's CSRF token."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from ops.console import events
from ops.console.data import masked, masked_id
from ops.text import format_age

NAV = (
    ("/events", "Events"),
    ("/consumers", "Consumers"),
    ("/dlqs", "DLQs"),
    ("/sms", "SMS journal"),
    ("/bot", "Bot conversations"),
    ("/alarms", "Alarms"),
)
STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1b1f24;background:#f6f7f9}
header{background:#1f2a37;color:#fff;padding:8px 16px;display:flex;gap:16px;align-items:center}
header a{color:#cfe3ff;text-decoration:none}header a.on{color:#fff;font-weight:600}
header .where{margin-left:auto;color:#9fb0c3;font-size:12px}
main{padding:12px 16px}table{border-collapse:collapse;background:#fff;margin:8px 0;width:100%}
th,td{border:1px solid #dde1e6;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef1f4}code{font-size:12px}.ok{color:#137333}.bad{color:#b3261e;font-weight:600}
.warn{color:#a05a00}.muted{color:#6b7480}form.inline{display:inline}
button{cursor:pointer}.event{background:#fff;border:1px solid #dde1e6;margin:8px 0;padding:8px}
.lines{background:#111;color:#e6e6e6;padding:8px;white-space:pre-wrap}
"""
STATE_CLASS = {
    events.PROCESSED: "ok",
    events.DUPLICATE: "ok",
    events.RETRYING: "warn",
    events.WAITING: "warn",
    events.REDRIVEN: "warn",
    events.DEAD_LETTERED: "bad",
    events.NOT_ROUTED: "muted",
}


def text(value: Any) -> str:
    """Free text: escaped, every phone-looking number masked."""
    if value is None or value == "":
        return "-"
    return html.escape(masked(value))


def ident(value: Any) -> str:
    """An id, key, count, time or name: escaped, +international numbers masked."""
    if value is None or value == "":
        return "-"
    return html.escape(masked_id(value))


def page(title: str, where: str, body: str, active: str = "") -> str:
    nav = "".join(
        f'<a href="{path}" class="{"on" if path == active else ""}">{name}</a>' for path, name in NAV
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{ident(title)} - ops console</title>"
        f"<style>{STYLE}</style></head><body><header><b>ops console</b>{nav}"
        f"<span class='where'>{ident(where)}</span></header><main><h2>{ident(title)}</h2>{body}</main>"
        "</body></html>"
    )


def table(
    headers: Sequence[str], rows: Iterable[Sequence[str]], empty: str = "nothing", name: str = ""
) -> str:
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    named = f" id='{html.escape(name)}'" if name else ""
    if not body:
        return f"<p class='muted'{named}>{text(empty)}</p>"
    head = "".join(f"<th>{ident(h) if h else ''}</th>" for h in headers)
    return f"<table{named}><tr>{head}</tr>{body}</table>"


def link(path: str, label: str, **query: str) -> str:
    href = path + ("?" + urlencode({k: v for k, v in query.items() if v}) if query else "")
    return f'<a href="{html.escape(href)}">{ident(label)}</a>'


def filter_form(path: str, fields: Mapping[str, str], button: str = "Filter") -> str:
    inputs = "".join(
        f"<label>{ident(name)} <input name='{html.escape(name)}' value='{html.escape(value)}'></label> "
        for name, value in fields.items()
    )
    return f"<form method='get' action='{path}'>{inputs}<button type='submit'>{text(button)}</button></form>"


def action_form(path: str, csrf: str, label: str, fields: Mapping[str, str], name: str = "") -> str:
    hidden = "".join(
        f"<input type='hidden' name='{html.escape(k)}' value='{html.escape(v)}'>" for k, v in fields.items()
    )
    return (
        f"<form class='inline' method='post' action='{path}'>"
        f"<input type='hidden' name='csrf' value='{html.escape(csrf)}'>{hidden}"
        f"<button type='submit' name='go' value='1' data-action='{html.escape(name or label)}'>"
        f"{ident(label)}</button></form>"
    )


def state(value: str) -> str:
    return (
        f"<span class='{STATE_CLASS.get(value, '')}' data-state='{html.escape(value)}'>{text(value)}</span>"
    )


# -- the pages -------------------------------------------------------------------------------------
def events_body(paths: list[events.EventPath], filters: events.Filters) -> str:
    form = filter_form(
        "/events",
        {"source": filters.source, "type": filters.type, "chat": filters.chat, "order": filters.order},
    )
    if not paths:
        return form + "<p class='muted'>no event logged yet (the latest ones are shown here)</p>"
    blocks = []
    for path in paths:
        rows = []
        for step in path.steps:
            action = ""
            if step.dlq_message_id:
                action = link(
                    "/confirm/redrive", "redrive…", consumer=step.consumer, message_id=step.dlq_message_id
                )
            rows.append(
                (
                    f"<span data-consumer='{html.escape(step.consumer)}'>{ident(step.consumer)}</span>",
                    state(step.state),
                    text(step.why_not if not step.routed else step.detail),
                    ident(step.attempts or None),
                    ident(step.at),
                    action,
                )
            )
        blocks.append(
            f"<div class='event' data-event-id='{html.escape(path.event_id)}'>"
            f"<b>{ident(path.event_id)}</b> {ident(path.source)} {ident(path.type)} "
            f"— {state(path.summary)}<br><span class='muted'>correlation id {ident(path.correlation_id)}"
            f" · group {ident(path.group)} · received {ident(path.received_at)}</span>"
            + table(("consumer", "state", "reason / why not routed", "receives", "at", ""), rows)
            + "</div>"
        )
    return form + "".join(blocks)


def consumers_body(rows: list[dict[str, Any]]) -> str:
    return table(
        ("consumer", "queue", "in flight", "oldest", "DLQ", "failing", "last error"),
        (
            (
                ident(r["consumer"]),
                ident(r["queue_depth"]),
                ident(r["in_flight"]),
                ident(format_age(r["oldest_age_seconds"])),
                f"<span class='{'bad' if r['dlq_depth'] else 'ok'}'>{r['dlq_depth']}</span>",
                "<span class='bad'>failing</span>" if r["failing"] else "<span class='ok'>no</span>",
                text(r["last_error"]),
            )
            for r in rows
        ),
    )


def dlqs_body(rows: list[dict[str, Any]], peeked: dict[str, list[dict[str, Any]]]) -> str:
    parts = [
        table(
            ("consumer", "DLQ depth", "in flight", "oldest", "delivery DLQ", ""),
            (
                (
                    ident(r["consumer"]),
                    ident(r["dlq_depth"]),
                    ident(r["in_flight"]),
                    ident(format_age(r["oldest_age_seconds"]) if r["age_source"] else None),
                    ident(r["delivery_dlq_depth"]),
                    link("/confirm/redrive", "redrive all…", consumer=r["consumer"])
                    if r["dlq_depth"]
                    else "",
                )
                for r in rows
            ),
        )
    ]
    for consumer, messages in peeked.items():
        parts.append(f"<h3>{ident(consumer)} DLQ</h3>")
        parts.append(
            table(
                ("message", "event", "type", "correlation id", "reason", "receives", "sent", ""),
                (
                    (
                        ident(m["message_id"]),
                        ident(m["event_id"]),
                        ident(m["type"]),
                        ident(m["correlation_id"]),
                        text(m["dead_letter_reason"] or m["note"]),
                        ident(m["receive_count"]),
                        ident(m["sent_at"]),
                        link("/confirm/redrive", "redrive…", consumer=consumer, message_id=m["message_id"]),
                    )
                    for m in messages
                ),
            )
        )
    return "".join(parts)


DECISIONS = ("accepted", "not-sent", "abandon")


def sms_body(
    unknown: list[dict[str, Any]], found: list[dict[str, Any]] | None, order: str, phone: str
) -> str:
    def actions(key: str) -> str:
        return " ".join(link("/confirm/resolve", f"--{d}…", key=key, decision=d) for d in DECISIONS)

    parts = ["<h3>Unknown outcomes (need a decision)</h3>"]
    parts.append(
        table(
            ("key", "order", "unknown since", "recipient", "attempts", "last outcome", "resolve"),
            (
                (
                    f"<code>{ident(r['key'])}</code>",
                    ident(r["order"]),
                    ident(f"{r['unknown_since']} ({format_age(r['age_seconds'])})"),
                    text(r["recipient"]),
                    ident(r["attempts"]),
                    ident(r["last_outcome"]),
                    actions(r["key"]),
                )
                for r in unknown
            ),
            empty="no SMS record in state unknown",
            name="unknown",
        )
    )
    parts.append("<h3>Find by order or masked phone</h3>")
    parts.append(filter_form("/sms", {"order": order, "phone": phone}, "Find"))
    if found is not None:
        parts.append(
            table(
                ("key", "order", "state", "recipient", "attempts", "delivery", "receipts / attempts"),
                (
                    (
                        f"<code>{ident(r['key'])}</code>",
                        ident(r.get("order_id")),
                        ident(r.get("state")),
                        text(r.get("recipient")),
                        ident(r.get("attempt_count")),
                        ident(r.get("delivery_status")),
                        f"<code>{ident(r.get('attempts'))}</code>",
                    )
                    for r in found
                ),
                empty="no SMS record matches",
                name="found",
            )
        )
    return "".join(parts)


def bot_body(chat: str, view: dict[str, Any] | None) -> str:
    parts = [filter_form("/bot", {"chat": chat}, "Show")]
    if view is None:
        return "".join(parts)
    parts.append("<h3>Conversation state</h3>")
    parts.append(
        table(
            ("item", "data"),
            ((ident(s["key"]), f"<code>{text(s['data'])}</code>") for s in view["state"]),
            empty="no state kept for this chat",
        )
    )
    parts.append("<h3>Latest steps and their Bot API calls</h3>")
    parts.append(
        table(
            ("event", "type", "state", "calls"),
            (
                (
                    ident(s["event_id"]),
                    ident(s["type"]),
                    state(s["state"]),
                    text(", ".join(f"{c['method']} ({c['status']})" for c in s["calls"]) or None),
                )
                for s in view["steps"]
            ),
            empty="no bot step logged for this chat",
        )
    )
    return "".join(parts)


def alarms_body(rows: list[dict[str, Any]], local: bool) -> str:
    note = (
        "<p class='muted'>Locally no alarm exists: this is what the stack's DLQ and error alarms "
        "would say.</p>"
        if local
        else ""
    )
    return note + table(
        ("alarm", "state", "reason"),
        (
            (
                ident(r["name"]),
                f"<span class='{'bad' if r['state'] == 'ALARM' else 'ok'}'>{ident(r['state'])}</span>",
                text(r["reason"]),
            )
            for r in rows
        ),
    )


def confirm_body(question: list[str], path: str, csrf: str, fields: Mapping[str, str], back: str) -> str:
    lines = "\n".join(question)
    return (
        f"<div class='lines'>{ident(lines)}</div><p>Go ahead?</p>"
        + action_form(path, csrf, "Confirm", fields, name="confirm")
        + f" {link(back, 'Cancel')}"
    )


def result_body(lines: list[str], error: str | None, back: str) -> str:
    shown = "\n".join(lines)
    problem = f"<p class='bad' id='error'>error: {text(error)}</p>" if error else ""
    return f"{problem}<div class='lines' id='result'>{ident(shown)}</div><p>{link(back, 'Back')}</p>"
