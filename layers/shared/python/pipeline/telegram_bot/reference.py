"""`bot_application`: where the user's Application builder lives, "package.module:callable".

The module is imported from the functions' code asset (`functions/`), so the stack refuses at
synth a reference whose module file is not there; the function parses the same value again from
BOT_APPLICATION (no python-telegram-bot import here: the stack and the local runtime read it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# The environment variable the bot function reads it from (the registry's requires_setting, upper).
APPLICATION_ENV = "BOT_APPLICATION"
# Set only by the local runtime (local.overlay): the bot may then be asked by the Telegram
# stand-in to die right after a journaled answer (pipeline.telegram_bot.calls).
CRASH_HOOKS_ENV = "LOCAL_CRASH_HOOKS"
# The header of the stand-in's answer that asks for that crash.
CRASH_HEADER = "x-local-crash-after-journal"
_REFERENCE = re.compile(r"^(?P<module>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):(?P<attribute>[A-Za-z_]\w*)$")


@dataclass(frozen=True)
class ApplicationReference:
    module: str
    attribute: str

    @classmethod
    def parse(cls, value: str) -> ApplicationReference:
        match = _REFERENCE.fullmatch(value.strip())
        if match is None:
            raise ValueError(
                "bot_application must be 'package.module:callable' (e.g. bot.examples.lead_bot:build)"
            )
        return cls(match["module"], match["attribute"])

    def module_file(self, root: Path) -> Path | None:
        """The module's source under `root` (a module file or a package), or None."""
        base = root.joinpath(*self.module.split("."))
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    def __str__(self) -> str:
        return f"{self.module}:{self.attribute}"
