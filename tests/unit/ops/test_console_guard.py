"""The console shows only what it is asked for (issue 40), over HTTP: the login link works once,
a redirect stays on the console's own site, and every filter matches a whole value. The same in
a real browser: tests/e2e/test_console_guard_browser.py; generated cases: test_console_properties."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from starlette.testclient import TestClient

from ops.console.app import SESSION_COOKIE, Console, build_app
from ops.console.data import Where
from pipeline import aws
from pipeline.telegram_bot.state import item_attributes
from tests.unit.ops.console_stack import BOT_STATE_TABLE, CHATS, ORDERS, STACK, seed_console_stack

PORT = 8765
BASE = f"http://127.0.0.1:{PORT}"


@pytest.fixture
def console() -> Iterator[Console]:
    with mock_aws():
        seed_console_stack()
        yield Console(
            Where(local=False, local_file=Path("unused"), stack_name=STACK), PORT, audit=lambda _: None
        )


def browser(console: Console) -> TestClient:
    return TestClient(build_app(console), base_url=BASE, follow_redirects=False)


def logged_in(console: Console) -> TestClient:
    client = browser(console)
    assert client.get(f"/?token={console.token}").status_code == 303
    return client


def test_the_login_link_works_once_and_becomes_an_httponly_strict_session_cookie(console: Console) -> None:
    link = f"/?token={console.token}"
    first = browser(console)

    answer = first.get(link)

    assert answer.status_code == 303 and answer.headers["location"] == "/events"
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"{SESSION_COOKIE}=") and "HttpOnly" in cookie and "SameSite=strict" in cookie
    again, other = first.get(link), browser(console).get(link)
    assert (again.status_code, other.status_code) == (403, 403)
    assert "used token" in other.text
    assert len(console.sessions) == 1
    assert first.get("/events").status_code == 200  # the session the link made goes on working


def test_a_wrong_token_does_not_use_the_link_up(console: Console) -> None:
    token = console.token
    assert browser(console).get("/?token=guess").status_code == 403
    assert browser(console).get(f"/?token={token}").status_code == 303


@pytest.mark.parametrize(
    "path",
    [
        "//evil.example",
        "//evil.example/events",
        "/\\evil.example",
        "/%2F%2Fevil.example",
        "/%2f/evil.example",
        "/%252F%252Fevil.example",
        "/%5Cevil.example",
        "/%255Cevil.example",
        "/%09/evil.example",
        "///evil.example",
    ],
)
def test_the_login_redirect_never_leaves_the_console(console: Console, path: str) -> None:
    answer = browser(console).get(f"{BASE}{path}?token={console.token}")

    assert answer.status_code == 303
    assert answer.headers["location"] == "/events"


def test_the_login_redirect_keeps_a_path_of_the_console(console: Console) -> None:
    answer = browser(console).get(f"{BASE}/sms?token={console.token}")
    assert answer.headers["location"] == "/sms"


def shown_events(html: str) -> set[str]:
    return set(re.findall(r"data-event-id='([^']+)'", html))


@pytest.mark.parametrize(("chat", "event_id"), [(chat, event_id) for chat, event_id in CHATS.items()])
def test_the_events_chat_filter_matches_the_whole_chat_id(console: Console, chat: int, event_id: str) -> None:
    page = logged_in(console).get(f"/events?chat={chat}")

    assert page.status_code == 200
    assert shown_events(page.text) == {event_id}


@pytest.mark.parametrize(("order", "event_id"), list(ORDERS.items()))
def test_the_events_order_filter_matches_the_whole_order_id(
    console: Console, order: str, event_id: str
) -> None:
    client = logged_in(console)

    assert shown_events(client.get(f"/events?order={order}").text) == {event_id}
    assert shown_events(client.get(f"/events?order=crm:{order}").text) == {event_id}


def test_a_chat_s_conversation_view_holds_that_chat_s_state_only(console: Console) -> None:
    page = logged_in(console).get("/bot?chat=12")

    assert page.status_code == 200
    keys = set(re.findall(r"<td>((?:chat|user|conversation)#[^<]+)</td>", page.text))
    assert keys == {"chat#12", "user#12", "conversation#order#[12,12]"}


def test_a_chat_s_conversation_view_reads_that_chat_by_its_key_and_never_scans(console: Console) -> None:
    """Chat 123's conversations (one of them with user 12 in it) stay in the table: the view
    reads chat 12's items by their keys and Queries the `by_chat` index on 12, no Scan."""
    dynamodb = boto3.client("dynamodb")
    for pk in ("conversation#order#[123,12]", "conversation#quiz#[123]"):
        dynamodb.put_item(TableName=BOT_STATE_TABLE, Item=item_attributes(pk, '"ASK"', 1))
    calls: list[tuple[str, dict[str, Any]]] = []

    def record(model: Any, params: dict[str, Any], **_: Any) -> None:
        calls.append((model.name, params))

    events = aws.resource("dynamodb").meta.client.meta.events
    events.register("before-parameter-build.dynamodb", record)
    try:
        page = logged_in(console).get("/bot?chat=12")
    finally:
        events.unregister("before-parameter-build.dynamodb", record)

    assert page.status_code == 200
    keys = set(re.findall(r"<td>((?:chat|user|conversation)#[^<]+)</td>", page.text))
    assert keys == {"chat#12", "user#12", "conversation#order#[12,12]"}
    assert "123" not in " ".join(keys) and "[123" not in page.text
    state_calls = [(name, params) for name, params in calls if params.get("TableName") == BOT_STATE_TABLE]
    assert "Scan" not in {name for name, _ in state_calls}
    [query] = [params for name, params in state_calls if name == "Query"]
    assert query["IndexName"] == "by_chat" and query["ExpressionAttributeValues"] == {":chat": {"S": "12"}}
    read = sorted(params["Key"]["pk"]["S"] for name, params in state_calls if name == "GetItem")
    assert read == ["chat#12", "conversation#order#[12,12]", "user#12"]
