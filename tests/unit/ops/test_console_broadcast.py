"""The console's broadcasts page (issue 45) against a deployed-looking stack (moto): the list with
each broadcast's progress, a create that shows the CLI's dry run (the count and the message as
sent) before anything is written, and pause, resume and cancel, each confirmed first. The
browser test (tests/e2e/test_console_broadcast_browser.py) clicks through the same page."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto import mock_aws
from starlette.testclient import TestClient

from infra.outputs import OutputKey
from ops.console.app import Console, build_app
from ops.console.data import Where
from ops.stack import DEFAULT_STACK_NAME
from pipeline import broadcast as jobs
from tests.unit.ops.support import Deployed, drain
from tests.unit.ops.test_broadcast_commands import seed_broadcast_stack

BASE = "http://127.0.0.1:8765"
audited: list[str] = []


@pytest.fixture
def stack() -> Iterator[Deployed]:
    with mock_aws():
        yield seed_broadcast_stack()


@pytest.fixture
def console(stack: Deployed) -> Console:
    audited.clear()
    where = Where(local=False, local_file=Path("unused"), stack_name=DEFAULT_STACK_NAME)
    return Console(where, 8765, audit=audited.append)


@pytest.fixture
def client(console: Console) -> TestClient:
    client = TestClient(build_app(console), base_url=BASE, follow_redirects=False)
    assert client.get(f"/?token={console.token}").status_code == 303
    return client


def csrf(console: Console) -> str:
    [token] = console.sessions.values()
    return token


def cells(page: str, broadcast_id: str) -> list[str]:
    row = re.search(rf"<tr><td data-broadcast='{broadcast_id}'>(.*?)</tr>", page, re.S)
    assert row is not None, page
    return [
        re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", "<td>" + row.group(1))
    ]


def test_create_asks_with_the_count_and_the_message_then_sends_and_lists_it(
    client: TestClient, console: Console, stack: Deployed
) -> None:
    assert "no broadcast yet" in client.get("/broadcasts").text

    question = client.get(
        "/confirm/broadcast-create", params={"text": "Sale starts today!", "language": "de"}
    )

    assert question.status_code == 200
    assert "recipients: 124" in question.text and "Sale starts today!" in question.text
    assert "dry run: nothing sent" in question.text
    assert drain(stack.queue_urls["broadcast"]) == []  # asking wrote and sent nothing
    assert "no broadcast yet" in client.get("/broadcasts").text

    done = client.post(
        "/actions/broadcast-create",
        data={"text": "Sale starts today!", "language": "de", "template": "", "csrf": csrf(console)},
    )

    assert done.status_code == 200 and "broadcast-create: done" in done.text, done.text
    broadcast_id = re.search(r"id: (bc-[\w-]+)", done.text).group(1)  # type: ignore[union-attr]
    assert len(drain(stack.queue_urls["broadcast"])) == 2
    # The audit trail has the CLI's lines (free text, so the id's long digit run is masked there).
    assert any("console broadcast-create" in line and "recipients: 124" in line for line in audited)
    shown = cells(client.get("/broadcasts").text, broadcast_id)
    # id, state, created, text, total, sent, blocked, failed, unknown, cancelled, remaining, rate, left
    assert shown[1] == "sending" and shown[3] == "Sale starts today!"
    assert shown[4:12] == ["124", "0", "0", "0", "0", "0", "124", "2 of 2"]


def test_progress_is_shown_as_the_consumer_counts_pages(
    client: TestClient, console: Console, stack: Deployed
) -> None:
    client.post("/actions/broadcast-create", data={"text": "Hi", "csrf": csrf(console)})
    table = boto3.resource("dynamodb").Table(stack.journal_table)
    [job] = jobs.recent(table, 5)
    started = time.time() - 10
    # As the consumer counts its pages: the first at `started`, the second 10 s later.
    jobs.count_page(table, job["broadcast_id"], 0, {"sent": 97, "blocked": 2, "unknown": 1}, started)
    jobs.count_page(table, job["broadcast_id"], 1, {"sent": 99, "failed": 1}, started + 10)

    shown = cells(client.get("/broadcasts").text, job["broadcast_id"])

    assert shown[4:11] == ["249", "196", "2", "1", "1", "0", "49"]
    assert float(shown[12]) == 20.0  # 200 chats in 10 s
    assert shown[13] == "2s"  # 49 left at 20 a second


def test_pause_resume_and_cancel_are_each_confirmed_and_run_the_cli(
    client: TestClient, console: Console, stack: Deployed
) -> None:
    client.post("/actions/broadcast-create", data={"text": "Hi", "tag": "vip", "csrf": csrf(console)})
    [job] = jobs.recent(boto3.resource("dynamodb").Table(stack.journal_table), 5)
    broadcast_id = job["broadcast_id"]
    page = client.get("/broadcasts").text
    assert f"/confirm/broadcast-pause?id={broadcast_id}" in page
    assert f"/confirm/broadcast-resume?id={broadcast_id}" not in page

    question = client.get("/confirm/broadcast-pause", params={"id": broadcast_id})
    assert f"dry run: would make broadcast {broadcast_id} paused" in question.text
    assert cells(client.get("/broadcasts").text, broadcast_id)[1] == "sending"  # asking changed nothing

    for action, state in (
        ("pause", "paused"),
        ("resume", "sending"),
        ("pause", "paused"),
        ("cancel", "cancelled"),
    ):
        answer = client.post(f"/actions/broadcast-{action}", data={"id": broadcast_id, "csrf": csrf(console)})
        assert f"{broadcast_id}: {state}" in answer.text, answer.text
        assert cells(client.get("/broadcasts").text, broadcast_id)[1] == state

    refused = client.get("/confirm/broadcast-resume", params={"id": broadcast_id})
    assert refused.status_code == 502 and "is cancelled" in refused.text
    assert f"?id={broadcast_id}" not in client.get("/broadcasts").text  # no action left on it


def test_a_broadcast_action_without_the_csrf_token_is_refused_and_sends_nothing(
    client: TestClient, stack: Deployed
) -> None:
    assert client.post("/actions/broadcast-create", data={"text": "Hi"}).status_code == 403
    assert drain(stack.queue_urls["broadcast"]) == []
    assert "no broadcast yet" in client.get("/broadcasts").text


def test_an_interrupted_create_shows_its_unpublished_pages_and_resume_publishes_them(
    client: TestClient, console: Console, stack: Deployed
) -> None:
    # What a create that died after publishing two of its three pages leaves (the job, its
    # stored plan, two pages noted as published).
    table = boto3.resource("dynamodb").Table(stack.journal_table)
    chats = list(range(7000, 7250))
    planned = jobs.plan({None: chats})
    broadcast_id, now = jobs.new_id(), time.time()
    jobs.store_pages(table, broadcast_id, planned, now)
    jobs.create(table, jobs.job_item(broadcast_id, "Hi", 250, at=now, now=now, audience={}, pages=3))
    topic = console.where.stack().require(OutputKey.EVENTS_TOPIC_ARN)
    jobs.publish_pages(boto3.client("sns"), topic, table, broadcast_id, planned[:2])
    assert len(drain(stack.queue_urls["broadcast"])) == 2
    assert cells(client.get("/broadcasts").text, broadcast_id)[11] == "2 of 3"

    question = client.get("/confirm/broadcast-resume", params={"id": broadcast_id})
    assert f"would publish the 1 unpublished pages (2) of {broadcast_id}" in question.text
    answer = client.post("/actions/broadcast-resume", data={"id": broadcast_id, "csrf": csrf(console)})

    assert "pages published: 1" in answer.text, answer.text
    [page] = [json.loads(m["Body"])["payload"] for m in drain(stack.queue_urls["broadcast"])]
    assert (page["page"], page["chats"]) == (2, chats[200:])
    assert cells(client.get("/broadcasts").text, broadcast_id)[11] == "3 of 3"


def test_a_confirmation_sent_twice_creates_one_broadcast(
    client: TestClient, console: Console, stack: Deployed
) -> None:
    question = client.get("/confirm/broadcast-create", params={"text": "Hi", "tag": "vip"}).text
    fields = dict(re.findall(r"<input type='hidden' name='([^']+)' value='([^']*)'>", question))
    assert fields["csrf"] == csrf(console) and fields["once"]

    first = client.post("/actions/broadcast-create", data=fields)
    again = client.post("/actions/broadcast-create", data=fields)  # a reload, a double click

    assert "broadcast-create: done" in first.text
    assert "broadcast-create: refused" in again.text and "sent before" in again.text
    assert len(jobs.recent(boto3.resource("dynamodb").Table(stack.journal_table), 5)) == 1
    assert len(drain(stack.queue_urls["broadcast"])) == 1
