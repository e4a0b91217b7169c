"""How a consumer tells the worker runtime what kind of failure it hit.

- `TransientError`: may succeed later (timeout, 5xx, 429, throttling). The record is retried
  after a backoff; at the `max_receive_count`-th delivery the worker dead-letters it with the
  reason (the SQS redrive policy catches crashes).
- `PermanentError`: will never succeed as is (4xx, validation). The record goes to the DLQ at
  once with its reason, without burning retries.
- `HandedBack`: not tried, only put off (Telegram's pacing or flood control asks to wait longer
  than the invocation has left): the record goes back to its queue with the delay, uncounted
  (`pipeline.worker`).
- `AccountRefused`: the remote refused the whole account (revoked token, blocked, unpaid, out
  of balance). The record is paused: it stays queued and comes back later, uncounted, so it
  succeeds by itself once the account works again (`pipeline.worker`).
- Any other exception is treated as transient: an unknown bug retries and, if it persists,
  ends in the DLQ through the redrive policy; it never loops forever.
"""

from __future__ import annotations


class ConsumerError(Exception):
    """Base of the classified failures; `reason` is safe to log (no secrets, no phone numbers)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TransientError(ConsumerError):
    """Retry later. `retry_after` (seconds), when the remote said so (Telegram 429), wins over backoff."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


class HandedBack(TransientError):
    """Not an attempt: the record must wait `delay` seconds (the pacing's slot or the bot-wide
    flood wait), longer than this invocation may sleep. The worker returns it to its queue with
    that delay and counts nothing against it (`pipeline.worker`)."""

    def __init__(self, reason: str, delay: float) -> None:
        super().__init__(reason, delay)
        self.delay = delay


class PermanentError(ConsumerError):
    """Do not retry: dead-letter the record now."""


# What a `RemoteRefused` was refused for; consumers use it as a metric dimension.
REFUSAL_KINDS = ("unauthorized", "not_found", "refused")


class RemoteRefused(PermanentError):
    """A remote service definitely said no; `kind` says to what:

    - "unauthorized": the credential is invalid, revoked or lacks the scope/permission;
    - "not_found": the entity asked for does not exist (or no longer does);
    - "refused": any other definite refusal (a malformed answer included).
    """

    def __init__(self, reason: str, kind: str) -> None:
        if kind not in REFUSAL_KINDS:
            raise ValueError(f"kind must be one of {list(REFUSAL_KINDS)}")
        super().__init__(reason)
        self.kind = kind


# Why a remote refused the account (not one message); consumers use it as a metric dimension.
UNAUTHORIZED = "unauthorized"
FLOOD_CONTROL = "flood_control"
ACCOUNT_CAUSES = (
    UNAUTHORIZED,  # the credential is invalid or revoked, also after re-reading its secret
    "blocked",  # the vendor blocked the account (amoCRM 403, a Bitrix24 portal deleted/blocked)
    "unpaid",  # the plan expired or the API is not paid for (amoCRM 402, Bitrix24 ACCESS_DENIED)
    "out_of_balance",  # an SMS gateway has no money left to send with
    FLOOD_CONTROL,  # Telegram asked the whole bot to wait longer than a hand-back may (`pipeline.pacing`)
)


class AccountRefused(ConsumerError):
    """The remote refused the account, not this message: every message of the consumer would
    fail the same way until a person acts (pays, unblocks, rotates a token). Neither transient
    (backoff would spend the retries in minutes) nor permanent (every message would be
    dead-lettered): the worker pauses the record (`pipeline.worker`), and it comes back later,
    uncounted, until the account works again. `cause` is one of ACCOUNT_CAUSES.
    """

    def __init__(self, reason: str, cause: str) -> None:
        if cause not in ACCOUNT_CAUSES:
            raise ValueError(f"cause must be one of {list(ACCOUNT_CAUSES)}")
        super().__init__(reason)
        self.cause = cause
