"""Conversations with the example bot (`functions/bot/examples/lead_bot.py`), the `bot` consumer.

Each conversation is a private chat of its own: /start (the bot asks for the phone), the shared
contact ("Got it.", then "Shall we call you at ...?" with [Yes] [Change]), the [Yes] press (the
question is edited into the thanks). The bot consumer reads every update (FIFO, one group per
chat) and journals each Bot API call, so a step replayed after a crash answers from the journal
(`pipeline.telegram_bot.calls`). Planned here (pure, seeded); posted as Telegram sends them
(`local.chaos.posts`); checked by `local.chaos.checks`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

OPEN_CONVERSATIONS = 6
# The steps of a conversation, in order, as step kinds.
BOT_KINDS = ("bot_start", "bot_contact", "bot_yes")
# The example bot's texts (the campaign's process does not import the bot: PTB, `functions/` off
# its path); `tests/unit/local/test_chaos_checks.py` holds them to lead_bot's.
ASK_PHONE = "Hi! Share your phone number and we will call you back."
GOT_IT = "Got it."
CONFIRM_PREFIX = "Shall we call you at"
THANKS = "Thanks, we will call you soon."
KNOWN = "Thanks, you are already on our list: we will call you soon."
# Chat ids of conversations: apart from the autoreply chats (`local.chaos.workload`).
CHAT_OFFSET = 60_000


def outputs(kind: str, text: str | None = None) -> str | None:
    """Which of its outputs a step's reply `text` is (None: not one of that step's)."""
    if kind == "bot_start":
        return "ask" if text == ASK_PHONE else None
    if kind == "bot_contact":
        if text == GOT_IT:
            return "got it"
        return "question" if text is not None and text.startswith(CONFIRM_PREFIX) else None
    return "thanks" if text in (THANKS, KNOWN) else None


# Each step's outputs: sendMessage texts (the first two) or the question edited (the third).
STEP_OUTPUTS: dict[str, tuple[str, ...]] = {
    "bot_start": ("ask",),
    "bot_contact": ("got it", "question"),
    "bot_yes": ("thanks",),
}


@dataclass
class _Conversation:
    chat: int
    number: int
    next: int = 0


class ConversationPlanner:
    """The conversations open at once and their next steps, on the campaign's seeded `random`."""

    def __init__(self, seed: int, first_chat: int, pick: random.Random) -> None:
        self.seed, self.first_chat, self.random = seed, first_chat, pick
        self.number = 0
        self.open: list[_Conversation] = []

    def step(self, update: int) -> tuple[str, dict[str, Any]]:
        """(kind, args) of a conversation's next step."""
        self.open = [c for c in self.open if c.next < len(BOT_KINDS)]
        while len(self.open) < OPEN_CONVERSATIONS:
            self.number += 1
            self.open.append(_Conversation(self.first_chat + CHAT_OFFSET + self.number, self.number))
        conversation = self.random.choice(self.open)
        kind = BOT_KINDS[conversation.next]
        conversation.next += 1
        args: dict[str, Any] = {"chat": conversation.chat, "update": update}
        if kind == "bot_contact":
            args["phone"] = f"+4915776{conversation.number % 1_000_000:06d}"
        if kind == "bot_yes":
            args["query"] = f"bq{self.seed}-{conversation.number}"
        return kind, args
