"""Credentials a consumer calls remote APIs with (a bot token, a CRM webhook), from Secrets Manager.

Read through Powertools Parameters (`get_secret`, cached `max_age` seconds: the warm path makes
no call). The provider is created at first use with the client from `pipeline.aws`, so tests and
the local runtime decide where it points. A consumer names a secret by its logical name in the
registry ("crm_api"); the secret's id comes from the environment variable the stack sets
(`CRM_API_SECRET_ID`). Failures are classified for the worker, and no reason quotes a value.
"""

from __future__ import annotations

import json
import os
from typing import Any

from aws_lambda_powertools.utilities import parameters
from aws_lambda_powertools.utilities.parameters.constants import DEFAULT_PROVIDERS
from aws_lambda_powertools.utilities.parameters.exceptions import GetParameterError
from botocore.exceptions import ClientError

from pipeline import aws
from pipeline.errors import PermanentError, TransientError
from pipeline.registry import secret_env_var

CACHE_MAX_AGE_SECONDS = 300


def _ensure_provider() -> None:
    # `get_secret` uses DEFAULT_PROVIDERS["secrets"]; `parameters.clear_caches()` and
    # `DEFAULT_PROVIDERS.clear()` (tests) reach it there.
    if "secrets" not in DEFAULT_PROVIDERS:
        DEFAULT_PROVIDERS["secrets"] = parameters.SecretsProvider(boto3_client=aws.client("secretsmanager"))


def secret_string(name: str, *, max_age: int = CACHE_MAX_AGE_SECONDS) -> str:
    """The SecretString of the consumer secret `name` (logical name, e.g. "telegram_bot_token").

    A missing environment variable or a binary secret is a deployment error (PermanentError: the
    record waits in the DLQ with the reason until it is fixed and redriven); a failed read
    (throttling, IAM still propagating) is transient.
    """
    variable = secret_env_var(name)
    secret_id = os.environ.get(variable, "")
    if not secret_id:
        raise PermanentError(f"{variable} is not set")
    _ensure_provider()
    try:
        value = parameters.get_secret(secret_id, max_age=max_age)
    except GetParameterError as error:
        cause = error.__context__  # Powertools raises it while handling the SDK's exception
        code = cause.response.get("Error", {}).get("Code") if isinstance(cause, ClientError) else None
        raise TransientError(f"could not read secret {variable} ({code or type(cause).__name__})") from None
    if not isinstance(value, str):
        raise PermanentError(f"secret {variable} must be a SecretString")
    return value


def secret_json(name: str, *, max_age: int = CACHE_MAX_AGE_SECONDS) -> dict[str, Any]:
    """`secret_string(name)` parsed as a JSON object (PermanentError when it is not one)."""
    variable = secret_env_var(name)
    try:
        value = json.loads(secret_string(name, max_age=max_age))
    except ValueError:
        raise PermanentError(f"secret {variable} is not valid JSON") from None
    if not isinstance(value, dict):
        raise PermanentError(f"secret {variable} must be a JSON object")
    return value
