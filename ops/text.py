"""Small formatting helpers shared by the commands."""

from __future__ import annotations


def format_age(seconds: float | None) -> str:
    """'45s', '3m07s', '2h05m', '1d03h'; '-' when unknown."""
    if seconds is None:
        return "-"
    seconds = max(int(seconds), 0)
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
