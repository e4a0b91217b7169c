"""Issue 22: python-telegram-bot's own examples `persistentconversationbot.py` and
`inlinekeyboard2.py` (functions/bot/examples/ptb/, upstream but for `main()`) run through the
local runtime and carry on across a restart of the bot's process: a persistent conversation over
a reply keyboard with the answers in `user_data`, and inline buttons, each press answered and the
menu's message edited.

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
from tests.e2e.support import (
    SHORT_BOT_TIMEOUT_SECONDS,
    Ids,
    Pipeline,
    callback_query,
    message,
    private_chat,
    user,
    wait_for,
)
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
    bot = dataclasses.replace(by_name("bot"), timeout_seconds=SHORT_BOT_TIMEOUT_SECONDS)
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
        assert self.pipeline.runtime.wait_until_drained(timeout=60)
        init_seconds = self.pipeline.runtime.restart_functions("bot")
        assert set(init_seconds) == {"bot"}
        assert self.pipeline.status()["bot"]["state"] == "ready"


def labels(markup: dict[str, Any]) -> list[str]:
    return [button["text"] for row in markup.get("inline_keyboard", []) for button in row]


CHOICES = {
    "keyboard": [
        [{"text": "Age"}, {"text": "Favourite colour"}],
        [{"text": "Number of siblings"}, {"text": "Something else..."}],
        [{"text": "Done"}],
    ],
    "one_time_keyboard": True,
}


def test_ptbs_persistentconversationbot_carries_on_after_its_process_restarts(tmp_path: Path) -> None:
    with bot_runtime("bot.examples.ptb.persistentconversationbot:main", tmp_path / "state") as pipeline:
        chat = Chat(pipeline, 61, "my_conversation")
        assert chat.say("/start") == (
            "Hi! My name is Doctor Botter. I will hold a more complex conversation with you. "
            "Why don't you tell me something about yourself?"
        )
        assert chat.say("Age") == "Your age? Yes, I would love to hear about that!"
        chat.wait_for_state(1)  # TYPING_REPLY, committed

        chat.restart_the_bot()  # between the question and its answer

        assert chat.say("33") == (
            "Neat! Just so you know, this is what you already told me:\nage - 33\n"
            "You can tell me more, or change your opinion on something."
        )
        assert chat.say("Something else...") == (
            'Alright, please send me the category first, for example "Most impressive skill"'
        )
        chat.wait_for_state(2)  # TYPING_CHOICE

        chat.restart_the_bot()

        assert chat.say("Favourite food") == "Your favourite food? Yes, I would love to hear about that!"
        told = "\nage - 33\nfavourite food - pancakes\n"
        assert chat.say("Pancakes") == (
            f"Neat! Just so you know, this is what you already told me:{told}"
            "You can tell me more, or change your opinion on something."
        )
        assert chat.say("/show_data") == f"This is what you already told me: {told}"
        assert chat.say("Done") == f"I learned these facts about you: {told}Until next time!"
        chat.wait_for_state(None)  # ended

        chat.restart_the_bot()  # user_data outlives the conversation and the process

        assert chat.say("/start") == (
            "Hi! My name is Doctor Botter. You already told me your age, favourite food. Why don't you "
            "tell me something more about yourself? Or change anything I already know."
        )
        assert chat.say("Age") == "Your age? I already know the following about that: 33"
        calls = chat.calls()
        keyboards = [params.get("reply_markup") for _, params in calls]
        # The choices after /start and after each answer; the keyboard removed at "Done".
        assert [i for i, keyboard in enumerate(keyboards) if keyboard == CHOICES] == [0, 2, 5, 8]
        assert keyboards[7] == {"remove_keyboard": True}
        assert_valid_bot_api_calls(calls)
        assert pipeline.runtime.wait_until_drained(timeout=60)
        assert pipeline.dlq_depth("bot") == 0


def test_ptbs_inlinekeyboard2_answers_each_press_and_edits_its_menu_across_restarts(tmp_path: Path) -> None:
    with bot_runtime("bot.examples.ptb.inlinekeyboard2:main", tmp_path / "state") as pipeline:
        chat = Chat(pipeline, 62, "inlinekeyboard2")
        chat.menu_message_id = 4242  # the id the Telegram stand-in gave the menu does not matter here
        assert chat.say("/start") == "Start handler, Choose a route"
        assert labels(chat.calls()[0][1]["reply_markup"]) == ["1", "2"]

        _, text, keyboard = chat.press("0")  # "1"
        assert (text, labels(keyboard)) == ("First CallbackQueryHandler, Choose a route", ["3", "4"])

        chat.restart_the_bot()  # between two presses

        _, text, keyboard = chat.press("3")  # "4"
        assert (text, labels(keyboard)) == ("Fourth CallbackQueryHandler, Choose a route", ["2", "3"])
        _, text, keyboard = chat.press("2")  # "3": the conversation's second stage
        assert text == "Third CallbackQueryHandler. Do want to start over?"
        assert labels(keyboard) == ["Yes, let's do it again!", "Nah, I've had enough ..."]

        chat.restart_the_bot()

        # In the second stage "0" starts over; had the stage been lost, "0" would be route "1".
        _, text, keyboard = chat.press("0")
        assert (text, labels(keyboard)) == ("Start handler, Choose a route", ["1", "2"])
        _, text, keyboard = chat.press("1")  # "2"
        assert (text, labels(keyboard)) == ("Second CallbackQueryHandler, Choose a route", ["1", "3"])
        chat.press("2")  # "3"

        chat.restart_the_bot()

        _, text, keyboard = chat.press("1")  # "Nah, I've had enough ..."
        assert text == "See you next time!" and keyboard == {}
        chat.wait_for_state(None)  # ended

        calls = chat.calls()
        assert [m for m, _ in calls].count("answerCallbackQuery") == 7  # every press answered
        assert_valid_bot_api_calls(calls)
        assert pipeline.runtime.wait_until_drained(timeout=60)
        assert pipeline.dlq_depth("bot") == 0
