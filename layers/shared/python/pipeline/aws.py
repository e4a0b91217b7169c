"""Lazy, cached boto3 clients.

Clients are built on first use, never at import time, so tests (moto's `mock_aws`) and the
local runtime (a moto server, selected with the standard `AWS_ENDPOINT_URL` variable that
boto3 honours) decide where they point. `reset_clients()` drops the cache between tests.
"""

from __future__ import annotations

import functools
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

# Short timeouts: a Lambda must fail fast and let SQS/Telegram retry rather than hang.
_CONFIG = Config(
    connect_timeout=3,
    read_timeout=10,
    retries={"mode": "standard", "max_attempts": 3},
)


@functools.cache
def client(service: str) -> Any:
    """Return the process-wide client for `service` (e.g. "sns", "sqs", "dynamodb")."""
    return boto3.session.Session().client(service, config=_CONFIG)  # type: ignore[call-overload]


@functools.cache
def non_retrying_client(service: str) -> Any:
    """A client that never repeats a request by itself, for calls that are not idempotent.

    botocore's standard retries resend a request after a 5xx, a throttle or a read timeout; for
    an API without an idempotency token (sending an SMS) that resend is a second message. The
    caller decides instead, knowing whether the first request may have been taken.
    """
    no_retries = _CONFIG.merge(Config(retries={"mode": "standard", "total_max_attempts": 1}))
    return boto3.session.Session().client(service, config=no_retries)  # type: ignore[call-overload]


@functools.cache
def resource(service: str) -> Any:
    """Return the process-wide resource for `service` (used for DynamoDB tables)."""
    return boto3.session.Session().resource(service, config=_CONFIG)  # type: ignore[call-overload]


def error_code(error: ClientError) -> str:
    """The AWS error code of a failed call ("ConditionalCheckFailedException"), "" when it has none."""
    return str(error.response.get("Error", {}).get("Code", ""))


def reset_clients() -> None:
    """Forget every cached client and resource (tests, local runtime re-pointing)."""
    client.cache_clear()
    non_retrying_client.cache_clear()
    resource.cache_clear()
