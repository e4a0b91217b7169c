"""A broadcast through the session's pipeline (`make local`'s default configuration), as an
operator sends one: `bin/ops broadcast create|status --local` (docs/broadcast.md).

Its audience is narrowed by language to this scenario's users (the session's store holds every
scenario's chats): they wrote /start through the webhook, the `store` consumer kept their
conversations, one of them has blocked the bot at the Telegram stand-in. The `broadcast`
consumer's calls are recorded like every function's, so the policy check after the scenarios
(tests/e2e/test_pipeline.py) holds its role to what it did. It runs in test_pipeline.py's module
(imported there, not collected from here): `make test` runs the files on two workers
(`--dist loadfile`), each with a session runtime of its own, and the policy check sees the calls
of its own worker's runtime only.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.support import Ids, Pipeline, message, private_chat, user, wait_for

pytestmark = pytest.mark.e2e

BROADCAST = 51  # this scenario's ids (`Ids`)
# Telegram's language_code of this scenario's users only: the audience filter finds them alone.
LANGUAGE = "fy"
TEXT = "The shop is closed on Monday for inventory."
# The deep link two of them came by (t.me/<bot>?start=<TAG>): the store keeps it as their tag.
TAG = "spring-fy51"


def ops_json(pipeline: Pipeline, *arguments: str) -> Any:
    completed = pipeline.ops("broadcast", *arguments, "--json")
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def test_an_operator_broadcast_reaches_each_subscriber_once_and_notes_the_one_who_blocked_the_bot(
    pipeline: Pipeline,
) -> None:
    ids = Ids(BROADCAST)
    users = [{**user(ids.number()), "language_code": LANGUAGE} for _ in range(4)]
    for number, sender in enumerate(users):
        start = f"/start {TAG}" if number % 2 else "/start"
        update = {
            "update_id": ids.update_id(),
            "message": message(ids.number(), private_chat(sender), sender, start),
        }
        assert pipeline.send_update(update) == 200
    assert pipeline.runtime.wait_until_drained(timeout=60)
    blocker = users[-1]["id"]
    pipeline.fake("telegram").control("/_blocked", {"chat_ids": [blocker]})

    dry = ops_json(pipeline, "create", "--text", TEXT, "--language", LANGUAGE, "--dry-run")
    assert dry["recipients"] == len(users)
    tagged = ops_json(pipeline, "create", "--text", TEXT, "--tag", TAG, "--dry-run")
    assert tagged["recipients"] == len(users[1::2])  # those who came by the deep link
    created = ops_json(pipeline, "create", "--text", TEXT, "--language", LANGUAGE, "--yes")
    assert created["recipients"] == len(users) and created["pages"] == 1

    def done() -> dict[str, Any] | None:
        shown = ops_json(pipeline, "status", created["id"])
        return shown if shown["state"] == "done" else None

    progress = wait_for(done, 60, "the broadcast done", interval=1)
    assert {name: progress[name] for name in ("sent", "blocked", "failed", "unknown")} == {
        "sent": 3,
        "blocked": 1,
        "failed": 0,
        "unknown": 0,
    }
    calls = [
        call
        for call in pipeline.fake("telegram").calls("/sendMessage")
        if isinstance(call["body"], dict) and call["body"].get("text") == TEXT
    ]
    answered = sorted((int(call["body"]["chat_id"]), call["status"]) for call in calls)
    assert answered == sorted([*((u["id"], 200) for u in users[:-1]), (blocker, 403)])
    # The 403 is noted as replies note it: the next broadcast leaves that chat out.
    assert pipeline.item("journal", {"id": f"blocked#{blocker}"}) is not None
    again = ops_json(pipeline, "create", "--text", TEXT, "--language", LANGUAGE, "--dry-run")
    assert again["recipients"] == len(users) - 1
