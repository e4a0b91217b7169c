"""`make demo`: a scripted burst through the local API, then a summary per consumer.

The burst is what a real bot sees in a minute: a /start, text messages from two new contacts, a
group message, an inline button press, an edit, the bot being added to a group, and Telegram
resending two updates (same `update_id`, as it does when an answer is late). Then the CRM
notifies two order-status changes, signed (the second has an SMS rule), resends that one, and an
unsigned request is refused.
Resends must end as "duplicate" in every consumer, never as a second lead or reply.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from local.runtime import Runtime
from pipeline.crm.contract import SIGNATURE_HEADER, sign

TELEGRAM_TOKEN_HEADER = "X-Telegram-Bot-Api-Secret-Token"  # noqa: S105 - a header name
# Plus the longest batching window the runtime gathers (`Runtime.batching_windows`): a retried
# record waits it again.
DRAIN_TIMEOUT_SECONDS = 90.0

BOT = {"id": 123456, "is_bot": True, "first_name": "Local Pipeline Bot", "username": "local_pipeline_bot"}
ANNA = {
    "id": 1001,
    "is_bot": False,
    "first_name": "Anna",
    "last_name": "Kovacs",
    "username": "anna_k",
    "language_code": "en",
}
BORIS = {"id": 1002, "is_bot": False, "first_name": "Boris", "language_code": "de"}
GROUP = {"id": -1001234567890, "type": "supergroup", "title": "Local bike shop"}


def private_chat(user: dict[str, Any]) -> dict[str, Any]:
    chat = {"id": user["id"], "type": "private", "first_name": user["first_name"]}
    return {**chat, **({"username": user["username"]} if "username" in user else {})}


def message(
    message_id: int, chat: dict[str, Any], user: dict[str, Any], text: str, date: int
) -> dict[str, Any]:
    body: dict[str, Any] = {"message_id": message_id, "date": date, "chat": chat, "from": user, "text": text}
    if text.startswith("/"):
        length = len(text.split()[0].encode("utf-16-le")) // 2
        body["entities"] = [{"type": "bot_command", "offset": 0, "length": length}]
    return body


def telegram_updates(first_update_id: int = 100, now: int | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(label, update) pairs in sending order; two are resends of earlier updates."""
    now = int(time.time()) if now is None else now
    anna_chat, boris_chat = private_chat(ANNA), private_chat(BORIS)
    uid = iter(range(first_update_id, first_update_id + 100))
    start = {"update_id": next(uid), "message": message(1, anna_chat, ANNA, "/start", now)}
    lead_text = "Hi, I'd like to buy a road bike. My name is Anna, phone +49 151 2345 6789"
    lead = {"update_id": next(uid), "message": message(2, anna_chat, ANNA, lead_text, now + 1)}
    question = {
        "update_id": next(uid),
        "message": message(1, boris_chat, BORIS, "How much does delivery to Berlin cost?", now + 2),
    }
    group = {"update_id": next(uid), "message": message(77, GROUP, BORIS, "Hello everyone!", now + 3)}
    bot_reply = {"message_id": 3, "date": now + 4, "chat": anna_chat, "from": BOT, "text": "Pick one:"}
    button = {
        "update_id": next(uid),
        "callback_query": {
            "id": "4382bfdwdsb323b2d9",
            "from": ANNA,
            "message": bot_reply,
            "chat_instance": "-7308456391123456789",
            "data": "prices",
        },
    }
    edited = {
        "update_id": next(uid),
        "edited_message": {
            **message(2, anna_chat, ANNA, f"{lead_text} (evenings)", now + 1),
            "edit_date": now + 5,
        },
    }
    added = {
        "update_id": next(uid),
        "my_chat_member": {
            "chat": GROUP,
            "from": BORIS,
            "date": now + 6,
            "old_chat_member": {"status": "left", "user": BOT},
            "new_chat_member": {"status": "member", "user": BOT},
        },
    }
    return [
        ("private /start", start),
        ("private text (new lead)", lead),
        ("private text (2nd contact)", question),
        ("group message", group),
        ("callback_query", button),
        ("edited_message", edited),
        ("my_chat_member", added),
        ("resend of the lead text", lead),
        ("resend of /start", start),
    ]


def crm_events(now: datetime | None = None) -> list[tuple[str, dict[str, Any]]]:
    now = now or datetime.now(UTC)
    occurred = now.replace(microsecond=0).isoformat()
    paid = {
        "event_id": "evt-demo-1001",
        "type": "order.status_changed",
        "occurred_at": occurred,
        "order": {"id": "A-1001", "status": "paid", "previous_status": "new"},
        "customer": {"phone": "+4915123456789", "name": "Anna Kovacs"},
    }
    shipped = {
        "event_id": "evt-demo-1002",
        "type": "order.status_changed",
        "occurred_at": occurred,
        "order": {"id": "A-1001", "status": "shipped", "previous_status": "paid"},
        "customer": {"phone": "+4915123456789", "name": "Anna Kovacs"},
    }
    return [("order paid", paid), ("order shipped", shipped), ("resend of order shipped", shipped)]


def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    """POST and return the HTTP status (an error status is a result here, not an exception)."""
    headers = {"Content-Type": "application/json", **headers}
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)  # noqa: S310 - our http URL
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - our http URL
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def send_burst(runtime: Runtime, echo: bool = True) -> list[tuple[str, int]]:
    """Send every scripted request; returns (label, HTTP status) in order."""
    results: list[tuple[str, int]] = []

    def sent(label: str, status: int) -> None:
        results.append((label, status))
        if echo:
            print(f"  {status}  {label}", flush=True)

    secret = {TELEGRAM_TOKEN_HEADER: runtime.settings.telegram_secret}
    for label, update in telegram_updates():
        sent(
            f"telegram {update['update_id']}: {label}",
            post(runtime.webhook_url, json.dumps(update).encode(), secret),
        )
    key = runtime.settings.crm_signing_key
    for label, event in crm_events():
        body = json.dumps(event).encode()
        sent(
            f"crm {event['event_id']}: {label}",
            post(runtime.crm_url, body, {SIGNATURE_HEADER: sign(key, body)}),
        )
    unsigned = json.dumps(crm_events()[0][1]).encode()
    sent("crm without a signature (must be refused)", post(runtime.crm_url, unsigned, {}))
    return results


def fake_summary(runtime: Runtime) -> dict[str, dict[str, int]]:
    """Calls each fake received, by path (credentials already masked by the fakes)."""
    return {
        name: dict(Counter(call["path"] for call in fake.calls())) for name, fake in runtime.fakes.items()
    }


def summary_lines(status: dict[str, dict[str, Any]], fakes: dict[str, dict[str, int]]) -> list[str]:
    lines = ["", "Summary", ""]
    for name, entry in status.items():
        if entry["kind"] == "api":
            statuses = ", ".join(f"{count} x {code}" for code, count in entry["statuses"].items())
            lines.append(f"  {name:<11} {entry['requests']} requests: {statuses}")
        elif entry["kind"] == "schedule":
            lines.append(f"  {name:<11} {entry['invocations']} scheduled runs, {entry['errors']} errors")
        elif entry["state"] in ("missing handler", "init error"):
            lines.append(
                f"  {name:<11} {entry['state']}: {entry['detail']} (queue {entry.get('queue_depth', '?')})"
            )
        else:
            alarm = "  ALARM (DLQ not empty)" if entry.get("alarm") else ""
            if entry.get("failing"):
                alarm += f"  FAILING (last error: {entry.get('last_error')})"
            lines.append(
                f"  {name:<11} processed {entry['processed']:<3} duplicates {entry['duplicates']:<3} "
                f"retried {entry['retried']:<3} dead-lettered {entry['dead_lettered']:<3} "
                f"queue {entry.get('queue_depth', 0)} DLQ {entry.get('dlq_depth', 0)}{alarm}"
            )
    lines.append("")
    for name, paths in fakes.items():
        calls = ", ".join(f"{count} x {path}" for path, count in sorted(paths.items())) or "no calls"
        lines.append(f"  fake {name:<8} {calls}")
    return lines


def run_demo(runtime: Runtime, stop: threading.Event | None = None) -> dict[str, Any]:
    """Send the burst, wait for the queues to drain, print and return the summary."""
    print("Sending the demo burst:", flush=True)
    results = send_burst(runtime)
    gathered = {name: seconds for name, seconds in runtime.batching_windows().items() if seconds}
    gathering = ", ".join(f"{name} {seconds} s" for name, seconds in gathered.items())
    print(
        "\nWaiting for every queue to drain"
        + (f" (batching windows, as in AWS: {gathering} before an invocation)..." if gathered else "..."),
        flush=True,
    )
    timeout = DRAIN_TIMEOUT_SECONDS + 2 * max(gathered.values(), default=0)
    drained = runtime.wait_until_drained(timeout, cancel=stop)
    if not drained:
        print(f"Not drained after {timeout:.0f}s (retries pending?); summary so far:", flush=True)
    status = runtime.status()
    fakes = fake_summary(runtime)
    print("\n".join(summary_lines(status, fakes)), flush=True)
    runtime.write_state(status)
    return {"sent": results, "drained": drained, "functions": status, "fakes": fakes}
