"""Issue 22: two python-telegram-bot bots in the shape of PTB's own examples, changed only in
`build` (their main()), run through the local runtime and carry on across a restart of the bot's
process: functions/bot/examples/profile_bot.py (a persistent conversation over a reply keyboard,
answers in `user_data`) and functions/bot/examples/menu_bot.py (inline buttons: each press
answered, the menu's message edited).

The restart is `Runtime.restart_functions("bot")` in the middle of each conversation: a new
process, with no Application, conversation or `user_data` in memory; what it answers next can
only come from the `bot_state` table. Each scenario starts its own small runtime (webhook and
`bot`, with `python -m local --bot`'s settings), so the session pipeline is not needed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from local.runtime import Ports, Runtime
from local.settings import LocalSettings
from pipeline.registry import by_name
from pipeline.telegram_bot.state import conversation_key
from tests.e2e.support import Ids, Pipeline, callback_query, message, private_chat, user, wait_for
from tests.e2e.test_bot_conversation import assert_valid_bot_api_calls, bot_calls

pytestmark = pytest.mark.e2e

REPLY_TIMEOUT_SECONDS = 60.0


@pytest.fixture(autouse=True)
def isolated_scenario() -> Iterator[None]:
    """Replaces the conftest's: these scenarios do not use the session pipeline."""
    yield


@contextlib.contextmanager
def bot_runtime(application: str, state_dir: Path) -> Iterator[Pipeline]:
    settings = LocalSettings.from_cdk_json().with_bot(application)
    bot = dataclasses.replace(by_name("bot"), timeout_seconds=8)
    with Runtime(ports=Ports(), settings=settings, state_dir=state_dir, consumers=(bot,)) as runtime:
        yield Pipeline(runtime)


class Chat:
    """One user's private chat with the bot: sends updates, reads what the bot did about it."""

    def __init__(self, pipeline: Pipeline, scenario: int, conversation: str) -> None:
        self.pipeline, self.ids, self.conversation = pipeline, Ids(scenario), conversation
        self.sender = user(self.ids.number(), "Ann")
        self.id = int(self.sender["id"])
        self.menu_message_id = 0

    def calls(self) -> list[tuple[str, dict[str, Any]]]:
        return bot_calls(self.pipeline, self.id)

    def _send(self, kind: str, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """Send one update; the calls the bot made for it (once it made one that is not an answer)."""
        before = len(self.calls())
        assert self.pipeline.send_update({"update_id": self.ids.update_id(), kind: body}) == 200
        return wait_for(
            lambda: (new := self.calls()[before:]) and new[-1][0] != "answerCallbackQuery" and new,
            REPLY_TIMEOUT_SECONDS,
            "the bot's answer",
        )

    def say(self, text: str) -> str:
        [(method, params)] = self._send(
            "message", message(self.ids.number(), private_chat(self.sender), self.sender, text)
        )
        assert method == "sendMessage"
        return str(params["text"])

    def press(self, data: str) -> tuple[dict[str, Any], str, dict[str, Any]]:
        """Press a button of the menu message: (the press's answer, the edited text, the new keyboard)."""
        query = callback_query(f"{self.ids.number()}-{self.id}", self.sender, self.menu_message_id)
        query["data"] = data
        calls = self._send("callback_query", query)
        assert [method for method, _ in calls] == ["answerCallbackQuery", "editMessageText"], calls
        (_, answer), (_, edit) = calls
        assert answer["callback_query_id"] == query["id"]
        assert int(edit["message_id"]) == self.menu_message_id and int(edit["chat_id"]) == self.id
        return answer, str(edit["text"]), edit.get("reply_markup") or {}

    def state(self) -> Any:
        key = conversation_key(self.conversation, (self.id, self.id))
        item = self.pipeline.item("bot_state", {"pk": key})
        return None if item is None else json.loads(item["data"])

    def wait_for_state(self, state: Any) -> None:
        wait_for(lambda: self.state() == state or None, 30, f"conversation state {state}")

    def restart_the_bot(self) -> None:
        """A fresh bot process; only once the step before is committed, so nothing is in flight."""
        init_seconds = self.pipeline.runtime.restart_functions("bot")
        assert set(init_seconds) == {"bot"}
        assert self.pipeline.status()["bot"]["state"] == "ready"


def labels(markup: dict[str, Any]) -> list[str]:
    return [button["text"] for row in markup.get("inline_keyboard", []) for button in row]


def test_the_persistent_conversation_bot_carries_on_after_its_process_restarts(tmp_path: Path) -> None:
    with bot_runtime("bot.examples.profile_bot:build", tmp_path / "state") as pipeline:
        chat = Chat(pipeline, 61, "profile")
        assert chat.say("/start") == "Hi! Tell me about yourself. Pick a topic."
        assert chat.say("Age") == "Your age? Tell me."
        chat.wait_for_state(1)  # TYPING_REPLY, committed

        chat.restart_the_bot()  # between the question and its answer

        assert chat.say("33") == "Noted. So far: age: 33."
        assert chat.say("Something else...") == "Which topic? For example: favourite food."
        chat.wait_for_state(2)  # TYPING_CHOICE

        chat.restart_the_bot()

        assert chat.say("favourite food") == "Your favourite food? Tell me."
        assert chat.say("pancakes") == "Noted. So far: age: 33; favourite food: pancakes."
        assert chat.say("/show_data") == "What I know: age: 33; favourite food: pancakes."
        assert chat.say("Done") == "I learned: age: 33; favourite food: pancakes. Until next time!"
        chat.wait_for_state(None)  # ended

        chat.restart_the_bot()  # user_data outlives the conversation and the process

        assert chat.say("/start") == "Hi again! I know your age: 33; favourite food: pancakes. Pick a topic."
        assert chat.say("Age") == "Your age? Last time you said 33."
        calls = chat.calls()
        keyboards = [params.get("reply_markup") for _, params in calls]
        topics = {
            "keyboard": [
                [{"text": "Age"}, {"text": "City"}],
                [{"text": "Something else..."}],
                [{"text": "Done"}],
            ],
            "one_time_keyboard": True,
        }
        # The topics after /start and after each answer; the keyboard removed at "Done".
        assert [i for i, keyboard in enumerate(keyboards) if keyboard == topics] == [0, 2, 5, 8]
        assert keyboards[7] == {"remove_keyboard": True}
        assert_valid_bot_api_calls(calls)
        assert pipeline.runtime.wait_until_drained(timeout=60)
        assert pipeline.dlq_depth("bot") == 0


def test_the_inline_keyboard_bot_answers_each_press_and_edits_its_menu_across_a_restart(
    tmp_path: Path,
) -> None:
    with bot_runtime("bot.examples.menu_bot:build", tmp_path / "state") as pipeline:
        chat = Chat(pipeline, 62, "menu")
        chat.menu_message_id = 4242  # the id the Telegram stand-in gave the menu does not matter here
        assert chat.say("/start") == "Pick a size"
        assert labels(chat.calls()[0][1]["reply_markup"]) == ["Small", "Large"]

        answer, text, keyboard = chat.press("small")
        assert "text" not in answer and text == "Small it is. Pick a topping"
        assert labels(keyboard) == ["Cheese", "Mushrooms"]
        chat.wait_for_state(1)  # TOPPING, committed

        chat.restart_the_bot()  # between two presses

        answer, text, keyboard = chat.press("cheese")
        assert text == "A small pizza with cheese. Order it?" and labels(keyboard) == ["Order", "Start over"]
        answer, text, keyboard = chat.press("start over")
        assert text == "Pick a size" and labels(keyboard) == ["Small", "Large"]
        answer, text, _ = chat.press("large")
        chat.wait_for_state(1)

        chat.restart_the_bot()

        answer, text, _ = chat.press("mushrooms")
        assert text == "A large pizza with mushrooms. Order it?"
        answer, text, keyboard = chat.press("order")
        assert answer["text"] == "Thanks!" and text == "Ordered: a large pizza with mushrooms."
        assert keyboard == {}
        chat.wait_for_state(None)  # ended

        calls = chat.calls()
        assert [m for m, _ in calls].count("answerCallbackQuery") == 6
        assert_valid_bot_api_calls(calls)
        assert pipeline.runtime.wait_until_drained(timeout=60)
        assert pipeline.dlq_depth("bot") == 0
