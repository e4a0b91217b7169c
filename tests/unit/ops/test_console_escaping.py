"""A value with HTML in it (a chat title `<script>`, a dead letter's reason, a filter typed in) is
text on every page of the console, never markup: the templates are autoescaped.

Over HTTP where a test can put the value where the console reads it (a chat's bot state, a DLQ
message, a filter, an action's fields); and every page template, the layout included, rendered
with the value in every field it shows (a new page's template must be listed here)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from starlette.testclient import TestClient

from infra.outputs import OutputKey
from ops.console import events, pages
from ops.console.app import Console, build_app
from ops.console.data import Where
from pipeline.telegram_bot.state import item_attributes
from tests.unit.ops.console_stack import BOT_STATE_TABLE, STACK, seed_console_stack
from tests.unit.ops.support import dead_letter

PORT = 8765
BASE = f"http://127.0.0.1:{PORT}"
HOSTILE = "<script>alert('x')</script><img src=x onerror=alert(1)>\"'"
# Its tags as the page shows them (its quotes may be quoted again: a refusal names it by repr).
ESCAPED = ("&lt;script&gt;alert(", "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;")


def assert_text_only(page: str) -> None:
    """The value is on the page, escaped, and no tag or attribute of it is."""
    assert all(part in page for part in ESCAPED)
    assert "<script" not in page.lower() and "<img" not in page.lower()


@pytest.fixture
def client() -> Iterator[TestClient]:
    with mock_aws():
        outputs = seed_console_stack()
        # A group chat whose title is markup, as the bot keeps it; a dead letter whose reason is.
        boto3.client("dynamodb").put_item(
            TableName=BOT_STATE_TABLE, Item=item_attributes("chat#12", json.dumps({"title": HOSTILE}), 2)
        )
        dead_letter(outputs[OutputKey.dlq_url("crm")], 7, reason=f"permanent: {HOSTILE}")
        console = Console(
            Where(local=False, local_file=Path("unused"), stack_name=STACK), PORT, audit=lambda _: None
        )
        client = TestClient(build_app(console), base_url=BASE, follow_redirects=False)
        assert client.get(f"/?token={console.token}").status_code == 303
        [csrf] = console.sessions.values()
        client.headers["x-test-csrf"] = csrf
        yield client


@pytest.mark.parametrize(
    "path",
    [
        "/events?source=" + HOSTILE,
        "/dlqs",
        "/sms?order=" + HOSTILE,
        "/bot?chat=12",
        "/confirm/redrive?consumer=crm&message_id=" + HOSTILE,
        "/confirm/broadcast-pause?id=" + HOSTILE,
    ],
)
def test_a_value_with_html_is_text_on_every_page(client: TestClient, path: str) -> None:
    answer = client.get(path, params=None)
    assert answer.status_code in (200, 502), answer.text
    assert_text_only(answer.text)


def test_an_action_s_refusal_naming_the_value_shows_it_as_text(client: TestClient) -> None:
    answer = client.post(
        "/actions/redrive", data={"consumer": HOSTILE, "csrf": client.headers["x-test-csrf"]}
    )
    assert answer.status_code == 200 and "refused" in answer.text
    assert_text_only(answer.text)


@dataclass
class Step:
    consumer: str = HOSTILE
    state: str = HOSTILE
    routed: bool = True
    why_not: str = HOSTILE
    detail: str = HOSTILE
    attempts: str = HOSTILE
    at: str = HOSTILE
    dlq_message_id: str = HOSTILE


@dataclass
class Path_:
    event_id: str = HOSTILE
    source: str = HOSTILE
    type: str = HOSTILE
    summary: str = HOSTILE
    correlation_id: str = HOSTILE
    group: str = HOSTILE
    received_at: str = HOSTILE
    steps: list[Step] = field(default_factory=lambda: [Step(), Step(routed=False)])


SHOWN = [
    "consumer",
    "queue_depth",
    "in_flight",
    "dlq_depth",
    "failing",
    "last_error",
    "age_source",
    "delivery_dlq_depth",
    "message_id",
    "event_id",
    "type",
    "correlation_id",
    "dead_letter_reason",
    "note",
    "receive_count",
    "sent_at",
    "key",
    "order",
    "unknown_since",
    "recipient",
    "attempts",
    "last_outcome",
    "order_id",
    "attempt_count",
    "delivery_status",
    "name",
    "state",
    "reason",
    "data",
]
ROW = dict.fromkeys(SHOWN, HOSTILE) | {
    "oldest_age_seconds": 5,
    "age_seconds": 5,
    "calls": [{"method": HOSTILE, "status": HOSTILE}],
}
# A broadcast as the console lists it (ops.broadcast.recent), every shown field the value.
BROADCAST_ROW = dict.fromkeys(
    ["id", "created", "text", "total", "sent", "blocked", "failed", "unknown", "cancelled", "remaining"],
    HOSTILE,
) | {"state": "sending", "rate_per_second": HOSTILE, "seconds_left": 5, "pages_published": 1, "pages": 2}
# Every page template, with its fields all holding the value.
CONTEXTS: dict[str, dict[str, Any]] = {
    "events.html": {"paths": [Path_()], "filters": events.Filters(HOSTILE, HOSTILE, HOSTILE, HOSTILE)},
    "consumers.html": {"rows": [ROW]},
    "dlqs.html": {"rows": [ROW], "peeked": {HOSTILE: [ROW]}},
    "sms.html": {"unknown": [ROW], "found": [ROW], "order": HOSTILE, "phone": HOSTILE},
    "bot.html": {"chat": HOSTILE, "view": {"state": [ROW], "steps": [ROW]}},
    "alarms.html": {"rows": [ROW], "local": True},
    "broadcasts.html": {
        "rows": [BROADCAST_ROW, BROADCAST_ROW | {"state": "paused"}],
        "max_text": 4096,
        "templates_file": HOSTILE,
    },
    "confirm.html": {
        "question": [HOSTILE],
        "path": "/actions/x",
        "csrf": HOSTILE,
        "fields": {HOSTILE: HOSTILE},
        "back": "/x",
    },
    "result.html": {"lines": [HOSTILE], "error": HOSTILE, "back": "/x"},
    "error.html": {"message": HOSTILE},
}
NOT_PAGES = {"base.html", "macros.html"}


def test_every_page_template_is_checked_here() -> None:
    templates = {path.name for path in pages.TEMPLATES.glob("*.html")} - NOT_PAGES
    assert templates == set(CONTEXTS)


@pytest.mark.parametrize("template", sorted(CONTEXTS))
def test_every_field_of_every_page_template_is_escaped(template: str) -> None:
    page = pages.render(template, HOSTILE, HOSTILE, "/events", **CONTEXTS[template])
    assert_text_only(page)
    # Nothing of it breaks out of a quoted attribute either.
    assert "onerror=alert(1)>" not in page and "' onerror" not in page
