"""A broadcast made from a template (issue 45, `ops broadcast create --template`): each page names
the language of its chats and the real `broadcast` consumer sends that language's text through the
Telegram stand-in (a page without one, the job's fallback `text`); after each page it counts, the
consumer emits how many chats the broadcast has left (`BroadcastRemaining`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from local.fakes.telegram import TelegramFake
from pipeline import aws
from pipeline import broadcast as jobs
from tests.unit.consumer_support import JOURNAL_TABLE, Output
from tests.unit.consumers.conftest import DeployedConsumer
from tests.unit.consumers.test_broadcast import drain, job, sender  # noqa: F401 - the fixture
from tests.unit.consumers.test_pacing_hand_back import Clock, paced

GERMAN = [2_000_000 + n for n in range(120)]
OTHERS = [3_000_000 + n for n in range(30)]
TEXTS = {"en": "Our sale starts today!", "de": "Heute beginnt unser Ausverkauf!"}


def test_each_page_gets_its_language_s_text_and_the_remaining_chats_are_a_metric(
    sender: DeployedConsumer,  # noqa: F811
    telegram: TelegramFake,
    monkeypatch: pytest.MonkeyPatch,
    output: Callable[[Any], Output],
) -> None:
    clock = Clock()
    paced(sender, clock, monkeypatch)
    telegram.keep_every_call()
    printed = output(sender.app.worker)
    table = aws.resource("dynamodb").Table(JOURNAL_TABLE)
    planned = jobs.plan({"de": GERMAN, None: OTHERS})
    broadcast_id, now = jobs.new_id(), time.time()
    item = jobs.job_item(
        broadcast_id,
        TEXTS["en"],
        len(GERMAN) + len(OTHERS),
        at=now,
        now=now,
        audience={},
        texts=TEXTS,
        pages=len(planned),
    )
    jobs.create(table, item)
    for page in planned:
        envelope, attributes = jobs.page_envelope(broadcast_id, page.number, page.chats, page.language)
        sender.queues.send(envelope.to_json(), attributes)

    drain(sender, clock)

    texts = {
        int(call["body"]["chat_id"]): call["body"]["text"]
        for call in telegram.calls()
        if call["path"].endswith("/sendMessage") and call["status"] == 200
    }
    assert texts == {**dict.fromkeys(GERMAN, TEXTS["de"]), **dict.fromkeys(OTHERS, TEXTS["en"])}
    assert job(broadcast_id)["state"] == jobs.DONE
    # An invocation's EMF line holds its values (a list when there are several).
    values = [line["BroadcastRemaining"] for line in printed.emf("BroadcastRemaining")]
    remaining = sorted(v for value in values for v in (value if isinstance(value, list) else [value]))
    assert remaining == [0, 30, 50]  # after each of the three pages (100 de, 20 de, 30 others)
