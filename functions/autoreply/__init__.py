"""Autoreply consumer: answers commands and callback buttons through the Telegram Bot API."""
