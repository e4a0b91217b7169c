"""Logging helpers shared by the Lambdas."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any

CORRELATION_ID_HEADER = "x-correlation-id"
# An incoming correlation id ends up in every log line, the envelope and a response header:
# accept only short, plain values; anything else is replaced by the request id.
_SAFE_CORRELATION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/=+-]{0,127}")


def _safe(value: Any) -> str | None:
    return value if isinstance(value, str) and _SAFE_CORRELATION_ID.fullmatch(value) else None


def http_correlation_id(event: Mapping[str, Any]) -> str:
    """Correlation id of an API Gateway HTTP API (v2) request.

    The caller's `X-Correlation-Id` when it sent a safe one (so a trace can start outside AWS),
    else API Gateway's request id, else a fresh UUID (a test or local event without either).
    """
    headers = event.get("headers")
    if isinstance(headers, Mapping):
        for name, value in headers.items():
            if isinstance(name, str) and name.lower() == CORRELATION_ID_HEADER and _safe(value):
                return str(value)
    context = event.get("requestContext")
    request_id = _safe(context.get("requestId")) if isinstance(context, Mapping) else None
    return request_id or str(uuid.uuid4())


# Keep the country and operator code and the last two digits: enough to tell numbers apart and
# route a complaint, not enough to call anyone.
_PHONE_KEEP_HEAD = 6
_PHONE_KEEP_TAIL = 2
# A phone-looking run in free text: an optional "+", then 8 to 15 digits not inside a longer run.
_PHONE_IN_TEXT = re.compile(r"(?<![\d+])\+?\d{8,15}(?!\d)")


def mask_phone(phone: str) -> str:
    """'+375291234567' -> '+37529*****67'. A short number keeps only its last two digits."""
    if len(phone) <= _PHONE_KEEP_HEAD + _PHONE_KEEP_TAIL + 1:
        return "*" * max(len(phone) - _PHONE_KEEP_TAIL, 0) + phone[-_PHONE_KEEP_TAIL:]
    hidden = len(phone) - _PHONE_KEEP_HEAD - _PHONE_KEEP_TAIL
    return phone[:_PHONE_KEEP_HEAD] + "*" * hidden + phone[-_PHONE_KEEP_TAIL:]


def mask_phones(text: str) -> str:
    """Mask every phone-looking number in free text (a gateway's error message may quote it)."""
    return _PHONE_IN_TEXT.sub(lambda match: mask_phone(match.group(0)), text)
