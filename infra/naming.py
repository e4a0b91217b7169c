"""Construct ids and output names derived from registry names ("telegram_bot_token" -> "TelegramBotToken")."""

from __future__ import annotations


def pascal_case(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)
