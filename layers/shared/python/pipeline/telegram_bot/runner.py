"""The bot consumer's `process`: the engine (python-telegram-bot) imported at the init.

python-telegram-bot (with httpx and asyncio) costs about as much to import as `import boto3`
(without `cryptography`, which only Passport uses: `pipeline.telegram_bot.passport`).
Every update needs it, so it is imported with the handler's init, which Lambda runs at a full
vCPU, not with the first update, which runs at the function's share of one (`pipeline.aws`).
What the engine does per update: `pipeline.telegram_bot.engine`.
"""

from __future__ import annotations

from typing import Any

from pipeline import aws
from pipeline.envelope import Envelope
from pipeline.telegram_bot import passport

with passport.deferred():  # python-telegram-bot's first import, without Passport's cryptography
    from pipeline.telegram_bot.engine import BotEngine

# The module of the engine (bench/imports.py names it among what a cold path loads).
ENGINE_MODULE = BotEngine.__module__


class BotRunner:
    """Module-level in the bot function; `process` is the worker's `process`."""

    def __init__(self) -> None:
        self.engine = BotEngine()
        if aws.in_execution_environment():
            self.engine.prepare()

    def process(self, envelope: Envelope) -> dict[str, Any]:
        return self.engine.process(envelope)
