"""The bot consumer's `process`, with python-telegram-bot imported at the first update.

python-telegram-bot (with httpx and asyncio) costs about as much to import as `import boto3`;
like boto3 for the other consumers, it is imported when the first update needs it, not at init
(`bench/imports.py` reports both parts). What the engine does per update:
`pipeline.telegram_bot.engine`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipeline import coldstart
from pipeline.envelope import Envelope

if TYPE_CHECKING:
    from pipeline.telegram_bot.engine import BotEngine

# What the first update imports (bench/imports.py times it after the handler's init).
ENGINE_MODULE = "pipeline.telegram_bot.engine"


class BotRunner:
    """Module-level in the bot function; `process` is the worker's `process`."""

    def __init__(self) -> None:
        self._engine: BotEngine | None = None

    @property
    def engine(self) -> BotEngine:
        if self._engine is None:
            with coldstart.paused(ENGINE_MODULE):  # PTB's import, like an init's (see pipeline.coldstart)
                from pipeline.telegram_bot.engine import BotEngine

            self._engine = BotEngine()
        return self._engine

    def process(self, envelope: Envelope) -> dict[str, Any]:
        return self.engine.process(envelope)
