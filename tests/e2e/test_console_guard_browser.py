"""The console shows only what it is asked for (issue 40), in a real browser: headless Chromium
(Debian's `chromium`) under Playwright, on `python -m ops console --stack Guard` started as an
operator starts it, against a moto server holding a deployed-looking stack (chats 12, 123, -12;
orders 4, 42: tests/unit/ops/console_stack.py). The browser resolves no other name (browser.
LOOPBACK_ONLY) and a request off 127.0.0.1 that reaches the router is recorded and aborted: an
open redirect fails the navigation, and nothing leaves the machine."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from ops.console.app import SESSION_COOKIE
from tests.e2e.browser import AWS_ENVIRONMENT, chromium, moto_server, origin, screenshot, serve_console
from tests.unit.ops.console_stack import CHATS, ORDERS, STACK, seed_console_stack


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    with moto_server() as endpoint:
        seed_console_stack()
        yield endpoint


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def console(moto_endpoint: str) -> Iterator[str]:
    """A console of its own per test: its login link works once."""
    environment = {**AWS_ENVIRONMENT, "AWS_ENDPOINT_URL": moto_endpoint}
    with serve_console(["--stack", STACK, "--region", "eu-central-1"], lambda _: None, environment) as url:
        yield url


def guarded_context(browser: Any, offsite: list[str]) -> Any:
    """A browser context whose requests off 127.0.0.1 are recorded and aborted (never sent)."""
    context = browser.new_context(viewport={"width": 1280, "height": 560})

    def only_here(route: Any) -> None:
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            offsite.append(route.request.url)
            route.abort()

    context.route("**/*", only_here)
    return context


def test_the_login_link_works_once_and_its_redirect_stays_on_the_console(browser: Any, console: str) -> None:
    here, token = origin(console), console.split("token=", 1)[1]
    offsite: list[str] = []
    first = guarded_context(browser, offsite)
    try:
        page = first.new_page()
        try:  # the link's path made hostile: `//evil.example` is another site to a browser
            page.goto(f"{here}//evil.example?token={token}")
        except Exception as error:  # an aborted navigation to the other site
            pytest.fail(f"the login redirect left the console: {error}; off-site: {offsite}")
        assert offsite == []
        assert page.url == f"{here}/events"
        [cookie] = [c for c in first.cookies() if c["name"] == SESSION_COOKIE]
        assert (cookie["httpOnly"], cookie["sameSite"]) == (True, "Strict")
        assert page.locator("h2").inner_text() == "Events"

        second = guarded_context(browser, offsite)
        try:
            again = second.new_page()
            answer = again.goto(console)  # the very link, once more, in another browser
            assert answer is not None and answer.status == 403
            assert "refused" in again.locator("body").inner_text()
            assert second.cookies() == []
        finally:
            second.close()
        assert page.goto(f"{here}/events") is not None and page.locator("h2").inner_text() == "Events"
    finally:
        first.close()


def shown_events(page: Any) -> set[str]:
    return {
        str(v) for v in page.locator("div.event").evaluate_all("(els) => els.map(e => e.dataset.eventId)")
    }


def test_each_filter_shows_its_whole_value_only(browser: Any, console: str) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 700})
    try:
        page = context.new_page()
        page.set_default_timeout(30_000)
        page.goto(console)
        assert page.url.endswith("/events")
        assert shown_events(page) == set(CHATS.values()) | set(ORDERS.values())

        for chat in (12, 123, -12):
            page.fill("input[name='chat']", str(chat))
            page.click("button[type='submit']")
            assert shown_events(page) == {CHATS[chat]}, chat
        page.fill("input[name='chat']", "")
        page.fill("input[name='order']", "4")
        page.click("button[type='submit']")
        assert shown_events(page) == {ORDERS["4"]}
        screenshot(page, "guard-events-order-4")

        page.goto(f"{origin(console)}/bot")
        page.fill("input[name='chat']", "12")
        page.click("button[type='submit']")
        items = {t for t in page.locator("td").all_inner_texts() if re.match(r"(chat|user|conversation)#", t)}
        assert items == {"chat#12", "user#12", "conversation#order#[12,12]"}
        screenshot(page, "guard-bot-chat-12")
    finally:
        context.close()
