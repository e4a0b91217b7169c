"""The one error the CLI turns into a one-line message and exit code 2."""

from __future__ import annotations


class OpsError(Exception):
    """An operator-facing failure; the message is one line and never holds a secret."""
