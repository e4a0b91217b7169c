"""Secrets Manager reads, cached for `max_age` seconds: the one place secrets are read.

Two readers share one cache (`_CACHE`, by reader and secret id; `clear_cache()` forgets it) and
the process's Secrets Manager client (`pipeline.aws`, built at first use, so tests and the local
runtime decide where it points):

- `secret_string` / `secret_json`: what a consumer calls remote APIs with (a bot token, a CRM
  webhook), named by its logical registry name ("crm_api"); the secret's id comes from the
  environment variable the stack sets (`CRM_API_SECRET_ID`). Failures are classified for the
  worker, and no reason quotes a value.
- `with_refreshed_secret`: a consumer's call that the remote refused as unauthorized (a rotated
  token the cache does not know yet) is made once more after re-reading the secret past the
  cache, so "put the new token, redrive" works at once instead of after `max_age`.
- `secret_candidates` / `check_with_refresh`: what the webhook checks requests against. A rotated
  secret (Telegram's webhook `secret_token`, a CRM signing key) is briefly known to both sides
  in two versions: the sender may still use the old value while we already read the new one.
  So a check accepts the current value (`AWSCURRENT`) and, only while the current version is
  younger than `SECRET_ROTATION_GRACE_SECONDS`, the previous one (`AWSPREVIOUS`).

The rotating reader fetches both stages and the current version's `CreatedDate` as one cached
value; the previous stage only while the window is open (a secret older than the grace period
costs one call per read, not two). On the warm path nothing calls Secrets Manager until `max_age`
expires. The window is measured from the version's creation (the rotation's `createSecret`
step), a moment before it became current: the grace period is at most that much shorter.

The cache is ours, not Powertools Parameters': that package imports boto3 (its AppConfig and
DynamoDB providers), which the webhook, calling AWS through botocore's clients alone, then
never loads (docs/perf.md measures what that saves). Its expiry runs on the monotonic clock, as
Powertools' did on the wall clock: the rotation window's clock (`_now`) is another.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from pipeline import aws
from pipeline.errors import UNAUTHORIZED, AccountRefused, PermanentError, TransientError
from pipeline.registry import secret_env_var

CACHE_MAX_AGE_SECONDS = 300
DEFAULT_ROTATION_GRACE_SECONDS = 3600
# After a failed check, the cached value is re-read at most this often: a sender that already
# uses a newly rotated value is accepted within a minute instead of after `max_age`, and a flood
# of bad requests costs at most one Secrets Manager call a minute.
REFRESH_ON_MISMATCH_INTERVAL_SECONDS = 60

Result = TypeVar("Result")


class SecretReadError(Exception):
    """A secret could not be read: Secrets Manager failed or refused (the SDK's error is the
    cause), or the secret holds no SecretString. The message names the secret, never a value."""


@dataclass(frozen=True)
class _Cached:
    value: Any
    expires_at: float  # _monotonic()


# (reader, secret id) -> the value read and when it expires; and when each consumer secret was
# last re-read past the cache (`refresh_secret`). `clear_cache()` forgets both.
_CACHE: dict[tuple[str, str], _Cached] = {}
_forced_reads: dict[str, float] = {}
_PLAIN, _ROTATING = "plain", "rotating"


def clear_cache() -> None:
    """Forget every value read (tests; a new execution environment starts without them)."""
    _CACHE.clear()
    _forced_reads.clear()


def _cached(
    reader: str, secret_id: str, fetch: Callable[[str], Any], *, max_age: int, force_fetch: bool
) -> Any:
    """`fetch(secret_id)`, kept for `max_age` seconds; any failure raised as `SecretReadError`."""
    key = (reader, secret_id)
    entry = _CACHE.get(key)
    if entry is not None and not force_fetch and _monotonic() < entry.expires_at:
        return entry.value
    try:
        value = fetch(secret_id)
    except (ClientError, BotoCoreError, ValueError) as error:  # refused, unreachable, not a string
        raise SecretReadError(f"could not read secret {secret_id!r}: {error}") from error
    _CACHE[key] = _Cached(value, _monotonic() + max_age)
    return value


def _now() -> datetime:
    """The rotation window's clock (epoch: a version's CreatedDate is compared with it)."""
    return datetime.now(UTC)


def _monotonic() -> float:
    """The cache's clock, and the forced re-reads': the process's own, not the window's."""
    return time.monotonic()


def _in_window(current_created_at: datetime, grace_seconds: int, now: datetime) -> bool:
    """Whether the previous value is still accepted: the current version is younger than the grace."""
    return now - current_created_at < timedelta(seconds=grace_seconds)


@dataclass(frozen=True)
class RotatingSecret:
    current: str
    # None when the secret was never rotated, or when the current version was already older than
    # the grace period at the read (then the previous value was not read: it is no candidate).
    previous: str | None
    current_created_at: datetime
    fetched_at: datetime

    def candidates(self, grace_seconds: int, now: datetime) -> tuple[str, ...]:
        """The values a sender may legitimately use now: current, plus previous inside the window."""
        if self.previous is not None and _in_window(self.current_created_at, grace_seconds, now):
            return (self.current, self.previous)
        return (self.current,)


def _stage(secret_id: str, stage: str) -> dict[str, Any]:
    response: dict[str, Any] = aws.client("secretsmanager").get_secret_value(
        SecretId=secret_id, VersionStage=stage
    )
    if "SecretString" not in response:
        raise ValueError(f"secret {secret_id!r} has no SecretString (binary secrets are not supported)")
    return response


def _previous(secret_id: str) -> str | None:
    try:
        return str(_stage(secret_id, "AWSPREVIOUS")["SecretString"])
    except ClientError as error:
        # A secret that was never rotated has no AWSPREVIOUS version.
        if aws.error_code(error) == "ResourceNotFoundException":
            return None
        raise


def _read_rotating(secret_id: str) -> RotatingSecret:
    current = _stage(secret_id, "AWSCURRENT")
    now = _now()
    # Outside the window the previous value is never a candidate again (the current version
    # only gets older): not reading it saves a call at every cold start and cache refresh.
    in_window = _in_window(current["CreatedDate"], rotation_grace_seconds(), now)
    return RotatingSecret(
        current=current["SecretString"],
        previous=_previous(secret_id) if in_window else None,
        current_created_at=current["CreatedDate"],
        fetched_at=now,
    )


def _read_plain(secret_id: str) -> Any:
    """The SecretString, or the SecretBinary of a binary secret (which `secret_string` refuses)."""
    response = aws.client("secretsmanager").get_secret_value(SecretId=secret_id)
    return response["SecretString"] if "SecretString" in response else response.get("SecretBinary")


def secret_string(name: str, *, max_age: int = CACHE_MAX_AGE_SECONDS, force_fetch: bool = False) -> str:
    """The SecretString of the consumer secret `name` (logical name, e.g. "telegram_bot_token").

    A missing environment variable or a binary secret is a deployment error (PermanentError: the
    record waits in the DLQ with the reason until it is fixed and redriven); a failed read
    (throttling, IAM still propagating) is transient.
    """
    variable = secret_env_var(name)
    secret_id = os.environ.get(variable, "")
    if not secret_id:
        raise PermanentError(f"{variable} is not set")
    try:
        value = _cached(_PLAIN, secret_id, _read_plain, max_age=max_age, force_fetch=force_fetch)
    except SecretReadError as error:
        cause = error.__cause__
        code = aws.error_code(cause) if isinstance(cause, ClientError) else None
        raise TransientError(f"could not read secret {variable} ({code or type(cause).__name__})") from None
    if not isinstance(value, str):
        raise PermanentError(f"secret {variable} must be a SecretString")
    return value


def secret_json(
    name: str, *, max_age: int = CACHE_MAX_AGE_SECONDS, force_fetch: bool = False
) -> dict[str, Any]:
    """`secret_string(name)` parsed as a JSON object (PermanentError when it is not one)."""
    variable = secret_env_var(name)
    try:
        value = json.loads(secret_string(name, max_age=max_age, force_fetch=force_fetch))
    except ValueError:
        raise PermanentError(f"secret {variable} is not valid JSON") from None
    if not isinstance(value, dict):
        raise PermanentError(f"secret {variable} must be a JSON object")
    return value


def get_rotating_secret(
    secret_id: str, *, max_age: int = CACHE_MAX_AGE_SECONDS, force_fetch: bool = False
) -> RotatingSecret:
    """Both stages of `secret_id`; raises `SecretReadError` when it cannot be read."""
    secret: RotatingSecret = _cached(
        _ROTATING, secret_id, _read_rotating, max_age=max_age, force_fetch=force_fetch
    )
    return secret


def rotation_grace_seconds() -> int:
    return int(os.environ.get("SECRET_ROTATION_GRACE_SECONDS", DEFAULT_ROTATION_GRACE_SECONDS))


def secret_candidates(secret_id: str, *, force_fetch: bool = False) -> tuple[str, ...]:
    """The values of `secret_id` a request may be authenticated with right now."""
    secret = get_rotating_secret(secret_id, force_fetch=force_fetch)
    return secret.candidates(rotation_grace_seconds(), _now())


def check_with_refresh(
    secret_id: str,
    check: Callable[[tuple[str, ...]], Result],
    retry_if: Callable[[Result], bool],
) -> Result:
    """`check(candidates)`, run again on a fresh read when `retry_if(result)` and the cache is old enough.

    The second run catches a rotation that happened after the value was cached; the interval
    bounds how often requests with a wrong secret can make us call Secrets Manager.
    """
    secret = get_rotating_secret(secret_id)
    now = _now()
    result = check(secret.candidates(rotation_grace_seconds(), now))
    fetched_recently = now - secret.fetched_at < timedelta(seconds=REFRESH_ON_MISMATCH_INTERVAL_SECONDS)
    if fetched_recently or not retry_if(result):
        return result
    return check(secret_candidates(secret_id, force_fetch=True))


def refresh_secret(name: str) -> bool:
    """Re-read the consumer secret `name` past the cache (which keeps the new value); True when
    it was re-read and differs from the cached one. At most once per
    REFRESH_ON_MISMATCH_INTERVAL_SECONDS per secret and execution environment, so a flood of
    refusals costs at most one Secrets Manager call a minute."""
    now = _monotonic()
    last = _forced_reads.get(name)
    if last is not None and now - last < REFRESH_ON_MISMATCH_INTERVAL_SECONDS:
        return False
    _forced_reads[name] = now
    cached = secret_string(name)
    return secret_string(name, force_fetch=True) != cached


def with_refreshed_secret(name: str, call: Callable[[], Result]) -> Result:
    """`call()`, which reads the consumer secret `name` itself; when the remote refuses it as
    unauthorized (`AccountRefused`, cause "unauthorized"), `call()` once more if the secret,
    re-read past the cache (`refresh_secret`), has changed. Otherwise the refusal stands (the
    worker pauses the record: `pipeline.worker`)."""
    try:
        return call()
    except AccountRefused as error:
        if error.cause != UNAUTHORIZED or not refresh_secret(name):
            raise
    return call()
