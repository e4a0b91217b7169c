"""CRM order-status events: how the webhook authenticates them (signature or token).

The event is read by `pipeline.crm.event_model.CrmEvent.parse` (imported by the first CRM
request: a Telegram-only webhook never loads it).

A CRM signs each request with a shared key:

    X-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(key, "<t>.<raw body>")>

The timestamp is part of the signed text so a captured request cannot be replayed after
`SIGNATURE_TOLERANCE_SECONDS`. Several `v1=` values may be sent (a CRM signing with two keys
during its own rotation); any one matching any candidate key is enough.

`customer.phone` is normalised to E.164 (`pipeline.phones`). National forms need the
deployment's default region: `CrmEvent.parse(payload, phone_default_region="BY")`; without it (a
consumer reading a payload the webhook already normalised) only international forms are accepted.

A sender that cannot compute an HMAC (a templated CRM robot or trigger) may instead present a
static token, when the deployment's `crm_auth` enables it (`CRM_AUTH_MODES`): in a header
(`Authorization: Bearer <token>` or `X-Crm-Token: <token>`) or in the URL path
(`POST /crm/events/<token>`). The webhook compares it in constant time with the `crm_token`
secret, as it does Telegram's secret token.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import re
import time
from collections.abc import Iterable
from typing import Literal

SIGNATURE_HEADER = "X-Signature"
# Static-token authentication (`crm_auth` = "token" or "signature_or_token").
TOKEN_HEADER = "X-Crm-Token"  # noqa: S105 - a header name, not a value
BEARER_SCHEME = "bearer"
CrmAuth = Literal["signature", "token", "signature_or_token"]
CRM_AUTH_MODES: tuple[CrmAuth, ...] = ("signature", "token", "signature_or_token")
DEFAULT_CRM_AUTH: CrmAuth = "signature"
# The webhook's environment variable naming the accepted modes (set from the `crm_auth` setting).
CRM_AUTH_ENV = "CRM_AUTH"


def crm_auth_mode(value: str) -> CrmAuth:
    """`value` as a mode; anything else is a deployment error (validated at synth)."""
    for mode in CRM_AUTH_MODES:
        if value == mode:
            return mode
    raise ValueError(f"{CRM_AUTH_ENV} must be one of {list(CRM_AUTH_MODES)}")


def accepts_signature(mode: CrmAuth) -> bool:
    return mode in ("signature", "signature_or_token")


def accepts_token(mode: CrmAuth) -> bool:
    return mode in ("token", "signature_or_token")


SIGNATURE_TOLERANCE_SECONDS = 300
ORDER_STATUS_CHANGED = "order.status_changed"

_SIGNATURE_PART = re.compile(r"(?P<key>[a-z0-9]+)=(?P<value>[^,=]*)")
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")

# The refusal type of a `customer.phone` that is not an acceptable number.
PHONE_ERROR_TYPE = "phone_number"


# The event types the pipeline handles; any other (`order.created`, ...) is acknowledged and
# counted by the webhook, never published: refusing it would have the CRM retry it forever.
HANDLED_TYPES = ("order.status_changed",)


class SignatureCheck(enum.Enum):
    """Outcome of a signature check; the value is safe to log."""

    VALID = "valid"
    MISSING = "missing"
    MALFORMED = "malformed"
    STALE = "stale"
    MISMATCH = "mismatch"


def _digest(key: str, body: bytes, timestamp: int) -> str:
    signed = str(timestamp).encode() + b"." + body
    return hmac.new(key.encode(), signed, hashlib.sha256).hexdigest()


def sign(key: str, body: bytes, timestamp: int | None = None) -> str:
    """The `X-Signature` value for `body` (tests and local tools play the CRM with it)."""
    timestamp = int(time.time()) if timestamp is None else timestamp
    return f"t={timestamp},v1={_digest(key, body, timestamp)}"


def _parse(header: str) -> tuple[int, list[str]] | None:
    timestamp: int | None = None
    signatures: list[str] = []
    for part in header.split(","):
        match = _SIGNATURE_PART.fullmatch(part.strip())
        if match is None:
            return None
        key, value = match["key"], match["value"]
        if key == "t":
            if timestamp is not None or not _TIMESTAMP.fullmatch(value):
                return None
            timestamp = int(value)
        elif key == "v1":
            if not _HEX_DIGEST.fullmatch(value):
                return None
            signatures.append(value)
        # Other schemes (v0, v2, ...) are ignored, as they would be by a receiver that predates them.
    if timestamp is None or not signatures:
        return None
    return timestamp, signatures


def verify(
    header: str | None,
    body: bytes,
    keys: Iterable[str],
    now: float | None = None,
    tolerance: int = SIGNATURE_TOLERANCE_SECONDS,
) -> SignatureCheck:
    """Check `header` against `body` with every candidate key, in constant time per comparison."""
    if not header:
        return SignatureCheck.MISSING
    parsed = _parse(header)
    if parsed is None:
        return SignatureCheck.MALFORMED
    timestamp, signatures = parsed
    now = time.time() if now is None else now
    if abs(now - timestamp) > tolerance:
        return SignatureCheck.STALE
    matched = False
    # No early exit: every comparison runs so timing does not tell which key or value matched.
    for key in keys:
        expected = _digest(key, body, timestamp)
        for signature in signatures:
            matched |= hmac.compare_digest(expected, signature)
    return SignatureCheck.VALID if matched else SignatureCheck.MISMATCH
