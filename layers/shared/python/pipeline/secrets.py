"""Rotation-aware secret reading, cached by Powertools Parameters.

A rotated secret (Telegram's webhook `secret_token`, a CRM signing key) is briefly known to both
sides in two versions: the sender may still use the old value while we already read the new
one. So a check accepts the current value (`AWSCURRENT`) and, only while the current version is
younger than `SECRET_ROTATION_GRACE_SECONDS`, the previous one (`AWSPREVIOUS`).

Powertools' `SecretsProvider` caches by name only (ignoring `VersionStage`) and returns only the
string, so a small provider fetches both stages and the current version's `CreatedDate` in one
cached value. On the warm path nothing calls Secrets Manager until `max_age` expires.
The window is measured from the version's creation (the rotation's `createSecret` step), a
moment before it became current: the grace period is at most that much shorter.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from aws_lambda_powertools.utilities.parameters.base import BaseProvider
from aws_lambda_powertools.utilities.parameters.constants import DEFAULT_PROVIDERS
from botocore.exceptions import ClientError

from pipeline import aws

CACHE_MAX_AGE_SECONDS = 300
DEFAULT_ROTATION_GRACE_SECONDS = 3600
# After a failed check, the cached value is re-read at most this often: a sender that already
# uses a newly rotated value is accepted within a minute instead of after `max_age`, and a flood
# of bad requests costs at most one Secrets Manager call a minute.
REFRESH_ON_MISMATCH_INTERVAL_SECONDS = 60
_PROVIDER_KEY = "pipeline_rotating_secrets"

Result = TypeVar("Result")


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class RotatingSecret:
    current: str
    previous: str | None
    current_created_at: datetime
    fetched_at: datetime

    def candidates(self, grace_seconds: int, now: datetime) -> tuple[str, ...]:
        """The values a sender may legitimately use now: current, plus previous inside the window."""
        in_window = now - self.current_created_at < timedelta(seconds=grace_seconds)
        if self.previous is not None and in_window:
            return (self.current, self.previous)
        return (self.current,)


class RotatingSecretProvider(BaseProvider):
    """Fetches AWSCURRENT and AWSPREVIOUS of a secret as one cacheable value."""

    def __init__(self, client: Any) -> None:
        super().__init__(client=client)
        self.client = client

    def _stage(self, name: str, stage: str) -> dict[str, Any]:
        response: dict[str, Any] = self.client.get_secret_value(SecretId=name, VersionStage=stage)
        if "SecretString" not in response:
            raise ValueError(f"secret {name!r} has no SecretString (binary secrets are not supported)")
        return response

    def _previous(self, name: str) -> str | None:
        try:
            return str(self._stage(name, "AWSPREVIOUS")["SecretString"])
        except ClientError as error:
            # A secret that was never rotated has no AWSPREVIOUS version.
            if error.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                return None
            raise

    def _get(self, name: str, **sdk_options: Any) -> dict[str, Any]:
        current = self._stage(name, "AWSCURRENT")
        return {
            "current": current["SecretString"],
            "previous": self._previous(name),
            "current_created_at": current["CreatedDate"],
            "fetched_at": _now(),
        }

    def _get_multiple(self, path: str, **sdk_options: Any) -> dict[str, str]:
        raise NotImplementedError("rotating secrets are read one by one")


def _provider() -> RotatingSecretProvider:
    # Registered with Powertools' providers so `parameters.clear_caches()` forgets it too.
    if _PROVIDER_KEY not in DEFAULT_PROVIDERS:
        DEFAULT_PROVIDERS[_PROVIDER_KEY] = RotatingSecretProvider(client=aws.client("secretsmanager"))
    provider: RotatingSecretProvider = DEFAULT_PROVIDERS[_PROVIDER_KEY]
    return provider


def get_rotating_secret(
    secret_id: str, *, max_age: int = CACHE_MAX_AGE_SECONDS, force_fetch: bool = False
) -> RotatingSecret:
    """Both stages of `secret_id`; raises Powertools' `GetParameterError` when it cannot be read."""
    value = _provider().get(secret_id, max_age=max_age, force_fetch=force_fetch)
    if not isinstance(value, dict):
        raise TypeError(f"unexpected cached value for secret {secret_id!r}")
    return RotatingSecret(**value)


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
