"""The console's broadcasts page (issue 45) in a real browser: headless Chromium (Debian's
`chromium`) under Playwright, on `python -m ops console` started as an operator starts it, against
a moto server holding a deployed-looking stack with 250 subscribers (tests/unit/ops/
test_broadcast_commands.py's). The operator writes a message, sees the count and the message as
sent before anything is written, confirms, watches the progress the consumer counts, and pauses,
resumes and cancels it with the buttons."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
import requests

from ops.stack import DEFAULT_STACK_NAME
from pipeline import broadcast as jobs
from tests.e2e.browser import (
    AWS_ENVIRONMENT,
    chromium,
    moto_server,
    opened_page,
    origin,
    screenshot,
    serve_console,
)
from tests.unit.ops.support import Deployed, drain
from tests.unit.ops.test_broadcast_commands import seed_broadcast_stack


@pytest.fixture(scope="module")
def moto_stack() -> Iterator[tuple[str, Deployed]]:
    with moto_server() as endpoint:
        # moto's state is this process's, whichever server serves it (the guard test's module
        # seeds its own stack in it too): this module starts from none and leaves none.
        requests.post(f"{endpoint}/moto-api/reset", timeout=10)
        try:
            yield endpoint, seed_broadcast_stack()
        finally:
            requests.post(f"{endpoint}/moto-api/reset", timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser: Any, moto_stack: tuple[str, Deployed]) -> Iterator[Any]:
    environment = {**AWS_ENVIRONMENT, "AWS_ENDPOINT_URL": moto_stack[0]}
    options = ["--stack", DEFAULT_STACK_NAME, "--region", "eu-central-1"]
    with serve_console(options, lambda _: None, environment) as url, opened_page(browser, url) as opened:
        yield opened


def row(page: Any, broadcast_id: str) -> Any:
    return page.locator(f"tr:has(td[data-broadcast='{broadcast_id}'])")


def row_of(page: Any, broadcast_id: str) -> list[str]:
    """The broadcast's cells on the broadcasts page, freshly loaded."""
    page.goto(f"{origin(page.url)}/broadcasts")
    return [str(text) for text in row(page, broadcast_id).locator("td").all_inner_texts()]


def steer(page: Any, broadcast_id: str, action: str) -> str:
    """Click the row's `action…` link, then Confirm; the result's lines."""
    page.goto(f"{origin(page.url)}/broadcasts")
    row(page, broadcast_id).get_by_role("link", name=f"{action}…").click()
    assert f"would make broadcast {broadcast_id}" in page.locator("div.lines").inner_text()
    page.get_by_role("button", name="Confirm").click()
    return str(page.locator("#result").inner_text())


def test_a_broadcast_is_previewed_confirmed_watched_and_steered_from_the_console(
    page: Any, moto_stack: tuple[str, Deployed]
) -> None:
    _, stack = moto_stack
    page.get_by_role("link", name="Broadcasts").click()
    assert page.locator("h2").inner_text() == "Broadcasts"
    assert page.locator("#broadcasts").inner_text() == "no broadcast yet"
    page.fill("textarea[name='text']", "Our summer sale starts today!")
    page.fill("input[name='language']", "de")
    page.get_by_role("button", name="Preview…").click()

    question = page.locator("div.lines").inner_text()
    assert "recipients: 124" in question  # the de-AT users, less the one who blocked the bot
    assert "Our summer sale starts today!" in question and "dry run: nothing sent" in question
    assert drain(stack.queue_urls["broadcast"]) == []  # the preview wrote and sent nothing
    screenshot(page, "broadcast-confirm")
    page.get_by_role("button", name="Confirm").click()

    result = page.locator("#result").inner_text()
    assert "recipients: 124" in result and "pages: 2" in result, page.content()
    broadcast_id = result.split("bin/ops broadcast status ", 1)[1].split()[0]
    pages = [json.loads(m["Body"])["payload"] for m in drain(stack.queue_urls["broadcast"])]
    assert sorted(len(p["chats"]) for p in pages) == [24, 100]
    shown = row_of(page, broadcast_id)
    assert shown[1] == "sending" and shown[4] == "124" and shown[10:12] == ["124", "2 of 2"]

    # The consumer counts its pages (as functions/broadcast does): the page shows the outcomes.
    table = boto3.resource("dynamodb").Table(stack.journal_table)
    started = time.time() - 5
    jobs.count_page(table, broadcast_id, 0, {"sent": 99, "blocked": 1}, started)
    jobs.count_page(table, broadcast_id, 1, {"sent": 24}, started + 5)
    shown = row_of(page, broadcast_id)
    assert shown[1] == "done" and shown[5:7] == ["123", "1"] and shown[10] == "0"
    screenshot(page, "broadcasts")

    # A second one, scheduled for later: paused, resumed and cancelled with the buttons.
    page.fill("textarea[name='text']", "Merry Christmas!")
    page.fill("input[name='tag']", "vip")
    page.fill("input[name='at']", "2099-12-24T18:00+01:00")
    page.get_by_role("button", name="Preview…").click()
    assert "recipients: 1" in page.locator("div.lines").inner_text()
    page.get_by_role("button", name="Confirm").click()
    later = page.locator("#result").inner_text().split("bin/ops broadcast status ", 1)[1].split()[0]
    assert row_of(page, later)[1] == "scheduled"
    assert f"{later}: paused" in steer(page, later, "pause")
    assert row_of(page, later)[1] == "paused"
    assert f"{later}: sending" in steer(page, later, "resume")
    assert f"{later}: cancelled" in steer(page, later, "cancel")
    shown = row_of(page, later)
    assert shown[1] == "cancelled" and shown[-1] == ""  # no button left on it
    screenshot(page, "broadcasts-steered")
