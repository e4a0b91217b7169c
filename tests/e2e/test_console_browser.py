"""The ops console in a real browser: headless Chromium (Debian's `chromium`) driven by Playwright.

`python -m ops console --local` runs as an operator starts it, against the session's pipeline;
the browser opens the URL it prints and clicks through: an update's path, a CRM lead dead-lettered
and redriven with the button, an unknown SMS resolved. Screenshots of each page are saved under
`.local/artifacts/console/` (CI keeps them as artefacts).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.browser import cells, chromium, console_of, opened_page, origin, screenshot, signed_in_state
from tests.e2e.support import (
    SENT_PHONES,
    Ids,
    Pipeline,
    http,
    message,
    order_status_changed,
    phone_number,
    private_chat,
    user,
    wait_for,
)

CONSOLE_SCENARIO = 90
# Every consumer of the session's pipeline a /start message reaches (it runs no `bot`).
TELEGRAM_MESSAGE_CONSUMERS = ("store", "crm", "autoreply", "analytics", "ai")


@pytest.fixture(scope="module")
def console(pipeline: Pipeline) -> Iterator[str]:
    with console_of(pipeline) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def session(browser: Any, console: str) -> dict[str, Any]:
    """The console's link works once: its session, shared by every test's fresh context."""
    return signed_in_state(browser, console)


@pytest.fixture
def page(browser: Any, console: str, session: dict[str, Any]) -> Iterator[Any]:
    with opened_page(browser, console, session) as opened:
        yield opened


def step_row(block: Any, consumer: str) -> Any:
    return block.locator(f"tr:has([data-consumer='{consumer}'])")


def start_update(ids: Ids) -> tuple[dict[str, Any], int]:
    sender = user(ids.number())
    update_id = ids.update_id()
    update = {
        "update_id": update_id,
        "message": message(ids.number(), private_chat(sender), sender, f"/start ref{update_id}"),
    }
    return update, sender["id"]


def event_block(page: Any, path: str, event_id: str, state: dict[str, str]) -> Any:
    """Reload `path` until the event's block shows each consumer in the given state."""
    block = page.locator(f"div.event[data-event-id='{event_id}']")

    def shown() -> bool:
        page.goto(f"{origin(page.url)}{path}")
        if block.count() != 1:
            return False
        return all(
            step_row(block, consumer).locator("[data-state]").get_attribute("data-state") == wanted
            for consumer, wanted in state.items()
        )

    wait_for(shown, 120, f"the console to show {event_id} as {state}", interval=1.0)
    return block


def test_an_update_s_path_shows_each_consumer_and_why_the_others_were_not_reached(
    pipeline: Pipeline, page: Any
) -> None:
    update, chat = start_update(Ids(CONSOLE_SCENARIO))
    assert pipeline.send_update(update) == 200
    event_id = pipeline.event_id(update)

    block = event_block(
        page, f"/events?chat={chat}", event_id, dict.fromkeys(TELEGRAM_MESSAGE_CONSUMERS, "processed")
    )

    sms = step_row(block, "sms")
    assert sms.locator("[data-state]").get_attribute("data-state") == "not routed"
    assert "source 'telegram' is not 'crm'" in sms.inner_text()
    [published] = [r for r in pipeline.log_records("webhook") if r.get("event_id") == event_id]
    assert f"correlation id {published['correlation_id']}" in block.inner_text()
    # Filtered by another chat, the event is not listed.
    page.goto(f"{origin(page.url)}/events?chat={chat + 1}")
    assert page.locator(f"div.event[data-event-id='{event_id}']").count() == 0
    page.goto(f"{origin(page.url)}/events?chat={chat}")
    screenshot(page, "events")


def test_a_dead_lettered_lead_is_redriven_with_the_button(pipeline: Pipeline, page: Any) -> None:
    ids, crm = Ids(CONSOLE_SCENARIO), pipeline.fake("crm")
    ids.update_id(), ids.number(), ids.number()  # the first test's
    update, chat = start_update(ids)
    crm.inject(fail_next=1, status=400, match="/leads")
    assert pipeline.send_update(update) == 200
    event_id = pipeline.event_id(update)

    block = event_block(page, f"/events?chat={chat}", event_id, {"crm": "in the DLQ", "store": "processed"})
    assert "400" in step_row(block, "crm").inner_text()
    screenshot(page, "events-dead-letter")
    base = origin(page.url)
    page.goto(f"{base}/alarms")
    assert cells(page, "DlqNotEmpty-crm-dlq")[1] == "ALARM"
    page.goto(f"{base}/consumers")
    assert cells(page, "crm")[4] == "1"  # the DLQ column
    screenshot(page, "consumers")
    crm.clear_faults()
    page.goto(f"{base}/events?chat={chat}")
    block.get_by_role("link", name="redrive…").click()
    question = page.locator("div.lines").inner_text()
    assert "dry run: would move message" in question
    assert "of the crm DLQ back to its queue" in question
    screenshot(page, "redrive-confirm")
    page.get_by_role("button", name="Confirm").click()

    assert "moved message" in page.locator("#result").inner_text(), page.content()
    screenshot(page, "redrive-done")
    wait_for(
        lambda: [c for c in crm.calls("/leads") if c["body"]["telegram_user_id"] == chat],
        60,
        "the redriven lead at the CRM",
    )
    event_block(page, f"/events?chat={chat}", event_id, {"crm": "processed"})
    assert pipeline.dlq_depth("crm") == 0
    page.goto(f"{base}/alarms")
    assert cells(page, "DlqNotEmpty-crm-dlq")[1] == "OK"


def test_an_unknown_sms_is_resolved_from_the_journal_page(pipeline: Pipeline, page: Any) -> None:
    phone = phone_number(CONSOLE_SCENARIO, 1)
    SENT_PHONES.add(phone)
    order_id = f"E2E-{CONSOLE_SCENARIO}-1"
    gateway = pipeline.fake("end_user_messaging")
    gateway.inject(drop_events_next=1)
    gateway.inject(drop_answer_next=1, match="SendTextMessage")
    event = order_status_changed(f"evt-e2e-{CONSOLE_SCENARIO}", order_id, "shipped", "paid", phone)
    assert pipeline.send_crm_event(event) == 200
    sms_page = f"{origin(page.url)}/sms?order={order_id}"
    [send] = wait_for(
        lambda: [c for c in gateway.calls() if order_id in (c["body"] or {}).get("MessageBody", "")],
        60,
        "the SMS worker's send",
    )
    record_key = f"sms#{send['body']['Context']['notification_key']}"
    wait_for(
        lambda: (pipeline.item("journal", {"id": record_key}) or {}).get("state") == "unknown",
        120,
        "the SMS to be unknown",
    )

    page.goto(sms_page)
    row = page.locator("table#unknown tr", has_text=order_id)
    assert row.count() == 1, page.content()
    key = row.locator("code").inner_text()
    assert phone not in page.content()
    assert phone[:6] in row.inner_text()  # masked as `ops journal` masks it: +49157*****01
    screenshot(page, "sms-unknown")
    row.get_by_role("link", name="--accepted…").click()
    assert f"dry run: would resolve SMS record '{key}' (now unknown) as --accepted" in page.inner_text(
        "div.lines"
    )
    page.get_by_role("button", name="Confirm").click()

    assert f"SMS record '{key}': unknown -> " in page.locator("#result").inner_text()
    screenshot(page, "sms-resolved")
    record = pipeline.item("journal", {"id": f"sms#{key}"})
    assert record is not None and record["state"] != "unknown" and record["resolved_by"] == "operator"
    page.goto(sms_page)  # found by its order: the record's new state, its phone masked
    found = page.locator("table#found tr", has_text=key)
    assert found.locator("td").nth(2).inner_text() == record["state"]
    assert phone not in page.content()
    assert phone not in "\n".join(pipeline.ops_outputs)


def test_the_console_refuses_requests_without_its_session_or_csrf_token(
    pipeline: Pipeline, console: str, page: Any
) -> None:
    base = origin(console)
    assert http("GET", f"{base}/events")[0] == 403  # no session cookie
    assert http("GET", f"{base}/?token=wrong")[0] == 403
    cookie = {c["name"]: c["value"] for c in page.context.cookies()}["ops_console_session"]
    session = {"Cookie": f"ops_console_session={cookie}"}
    assert http("GET", f"{base}/alarms", headers={**session, "Host": "evil.example:80"})[0] == 403
    form = {**session, "Content-Type": "application/x-www-form-urlencoded"}
    body = b"consumer=crm"
    assert http("POST", f"{base}/actions/redrive", body, form)[0] == 403  # no CSRF token
    assert http("POST", f"{base}/actions/redrive", body + b"&csrf=guess", form)[0] == 403
    page.goto(f"{base}/dlqs")
    assert page.locator("h2").inner_text() == "Dead-letter queues"
