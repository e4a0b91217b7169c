"""Construct ids and output names derived from registry names ("telegram_bot_token" -> "TelegramBotToken"),
and the physical names the stack gives resources itself (each begins with the stage's stack name)."""

from __future__ import annotations

import hashlib

# Characters of the stack name's digest that stand for the part a name limit cuts off.
_DIGEST_CHARS = 8


def pascal_case(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)


def stack_scoped_name(stack_name: str, suffix: str, limit: int) -> str:
    """`<stack_name><suffix>`, at most `limit` characters. A stack name too long for it is cut and
    ends in a digest of the whole name, so two stacks (two stages) never share the name: cutting
    alone would drop the stage, the part that tells them apart."""
    whole = f"{stack_name}{suffix}"
    if len(whole) <= limit:
        return whole
    digest = hashlib.sha256(stack_name.encode()).hexdigest()[:_DIGEST_CHARS]
    keep = limit - len(suffix) - _DIGEST_CHARS - 1
    if keep < 1:
        raise ValueError(f"no name of {limit} characters ends in {suffix!r}")
    return f"{stack_name[:keep]}-{digest}{suffix}"
