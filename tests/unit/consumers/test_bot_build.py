"""Issue 22: the engine refuses, when it builds the user's Application, what would lose a step
across Lambda instances (pipeline.telegram_bot.inspection), and counts the updates no handler
took instead of passing them as processed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from local.fakes.telegram import TelegramFake
from tests.unit.consumer_support import Output, telegram_envelope
from tests.unit.consumers.conftest import DeployedConsumer
from tests.unit.consumers.test_bot import press, start

NOT_PERSISTENT = "is not persistent: its states would live in one instance's memory"
FIX_IT = "give it name=... and persistent=True"


def bot_calls(telegram: TelegramFake) -> list[str]:
    return [c["path"].rsplit("/", 1)[-1] for c in telegram.calls() if not c["path"].endswith("/getMe")]


@pytest.mark.parametrize(
    ("factory", "refusal"),
    [
        ("not_persistent", f"ConversationHandler survey (group 0) {NOT_PERSISTENT}"),
        ("not_persistent_in_a_later_group", f"ConversationHandler survey (group 1) {NOT_PERSISTENT}"),
        (
            "not_persistent_nested_in_a_state",
            f"ConversationHandler details (group 0, in conversation survey) {NOT_PERSISTENT}",
        ),
        ("arbitrary_callback_data", "arbitrary callback data is not persisted"),
    ],
)
def test_an_application_that_would_drop_a_step_after_a_cold_start_is_refused_saying_what_to_change(
    deploy_bot: Callable[[str], DeployedConsumer], telegram: TelegramFake, factory: str, refusal: str
) -> None:
    bot = deploy_bot(f"tests.unit.consumers.unsafe_bots:{factory}")
    assert bot.deliver(telegram_envelope(start())).failed == []
    [reason] = bot.dead_letter_reasons()
    assert reason.startswith("BOT_APPLICATION: ")
    assert refusal in reason
    assert (FIX_IT if "persistent" in refusal else "remove .arbitrary_callback_data()") in reason
    assert bot_calls(telegram) == []  # no handler ran: redriven after the fix, the step happens


def test_a_button_press_no_handler_takes_is_counted_as_unhandled_not_passed_as_processed(
    deploy_bot: Callable[[str], DeployedConsumer], telegram: TelegramFake, output: Callable[[Any], Output]
) -> None:
    """A press of the example's "Yes" in a chat that is in no conversation (its state ended or
    expired): no handler matches it."""
    bot = deploy_bot("bot.examples.lead_bot:build")
    out = output(bot.app.worker)
    pressed = telegram_envelope(press("confirm"))
    assert bot.app.runner.process(pressed.envelope) == {"bot": "unhandled", "update": "callback_query"}
    assert bot_calls(telegram) == []
    [logged] = out.logs("no handler took the update: acknowledged, counted as unhandled")
    assert (logged["update"], logged["chat_id"]) == ("callback_query", 123456789)
    # The counter is flushed with the invocation's metrics.
    assert bot.deliver(telegram_envelope(press("confirm", update_id=900004))).failed == []
    assert out.emf("BotUpdatesUnhandled")
