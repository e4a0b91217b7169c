"""What the engine refuses in the user's Application when it builds it (issue 22), and why.

Any Lambda instance may get a chat's next update, and each new instance starts from the
`bot_state` table alone. So everything a step leaves for the next one must be persisted:

- a ConversationHandler that is not persistent keeps its states in one instance's memory: after
  a cold start (or on another instance) the chat has no state, and the next step (a button
  press) matches no handler: no answerCallbackQuery, no edit, the update counted as processed;
- arbitrary callback data (`ApplicationBuilder.arbitrary_callback_data`) keeps each button's
  data in a cache the pipeline does not persist: after a cold start a press carries
  InvalidCallbackData.

Both are refused with what to change (`ApplicationRefused`, a PermanentError: each update is
dead-lettered with the reason, its notice on the alarm topic, and redriven after the fix),
conversations nested in other conversations' states and in any handler group included.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from telegram.ext import Application, ApplicationBuilder, ConversationHandler

from pipeline.errors import PermanentError
from pipeline.telegram_bot import passport
from pipeline.telegram_bot.reference import APPLICATION_ENV

ARBITRARY_CALLBACK_DATA = (
    "arbitrary callback data is not persisted: after a cold start a button press would carry "
    "InvalidCallbackData; remove .arbitrary_callback_data() and give each button a string "
    "callback_data (up to 64 bytes), keeping what it stands for in chat_data or user_data"
)
PASSPORT_NEEDS_CRYPTOGRAPHY = (
    "Telegram Passport (.private_key()) needs the cryptography package, which no layer of the bot "
    "ships: pin python-telegram-bot[passport] in functions/bot/requirements.txt"
)


class ApplicationRefused(PermanentError):
    """The user's Application would lose steps across instances (module docstring)."""


class PipelineBuilder(ApplicationBuilder):  # type: ignore[type-arg]
    """The builder handed to the user's factory: refuses arbitrary callback data when asked for,
    rather than when the first button press comes back undecodable."""

    __slots__ = ()

    def arbitrary_callback_data(self, arbitrary_callback_data: bool | int) -> Any:
        if arbitrary_callback_data:
            raise ApplicationRefused(f"{APPLICATION_ENV}: {ARBITRARY_CALLBACK_DATA}")
        return super().arbitrary_callback_data(arbitrary_callback_data)

    def private_key(self, private_key: Any, password: Any = None) -> Any:
        """Telegram Passport: PTB's cryptography, which its import was kept from (`passport`)."""
        try:
            passport.enable()
        except ImportError as error:
            raise ApplicationRefused(f"{APPLICATION_ENV}: {PASSPORT_NEEDS_CRYPTOGRAPHY} ({error})") from error
        return super().private_key(private_key, password)


def conversations(application: Application[Any, Any, Any, Any, Any, Any]) -> Iterator[tuple[int, str, Any]]:
    """(group, where, handler) of each ConversationHandler, nested ones included (by the public
    entry_points, states and fallbacks, not PTB's private child list)."""
    pending: list[tuple[int, str, Any]] = [
        (group, f"group {group}", handler)
        for group, handlers in sorted(application.handlers.items())
        for handler in handlers
    ]
    while pending:
        group, where, handler = pending.pop(0)
        if not isinstance(handler, ConversationHandler):
            continue
        yield group, where, handler
        inner = f"{where}, in conversation {handler.name or '(unnamed)'}"
        children = [*handler.entry_points, *handler.fallbacks]
        children += [h for state in handler.states.values() for h in state]
        pending.extend((group, inner, child) for child in children)


def refusals(application: Application[Any, Any, Any, Any, Any, Any]) -> list[str]:
    """What would lose a step across instances, each with what to change."""
    found = []
    for _, where, handler in conversations(application):
        if not handler.persistent:
            name = handler.name or "(unnamed)"
            found.append(
                f"ConversationHandler {name} ({where}) is not persistent: its states would live in "
                "one instance's memory and a later step (a button press) would be dropped; give "
                "it name=... and persistent=True"
            )
    if application.bot.callback_data_cache is not None:  # an ExtBot built by the user
        found.append(ARBITRARY_CALLBACK_DATA)
    return found


def check(application: Application[Any, Any, Any, Any, Any, Any], reference: object) -> None:
    problems = refusals(application)
    if problems:
        raise ApplicationRefused(f"{APPLICATION_ENV}: {reference} refused: " + "; ".join(problems))
