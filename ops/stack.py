"""Where the CLI finds the pipeline: CloudFormation stack outputs, or the local runtime's file.

Both sources end up as the same `StackOutputs` (output key -> value), so every command works
unchanged against AWS and against `make local`. The output keys are `infra.outputs.OutputKey`,
which the stack names its outputs with.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from botocore.exceptions import ClientError
from pydantic import ValidationError

from infra.config import (
    DEFAULT_STACK_NAME,
    DEFAULT_STAGE,
    PipelineSettings,
    SettingsError,
    local_state_dir,
    settings_error_lines,
    valid_stage,
)
from infra.outputs import OutputKey  # the stack names its outputs with it (no CDK import)
from infra.paths import CDK_JSON
from ops import REPO_ROOT
from ops.errors import OpsError
from pipeline import aws
from pipeline.registry import CONSUMERS

__all__ = ["DEFAULT_STACK_NAME"]  # the default stage's stack (infra.config)
# Where `make local` writes it (local.runtime's state directory): the same from any directory.
LOCAL_STACK_FILE = local_state_dir(DEFAULT_STAGE) / "stack.json"
DEFAULT_LOCAL_FILE = REPO_ROOT / LOCAL_STACK_FILE


def local_stack_file(stage: str) -> Path:
    """The stack file `make local --stage <stage>` writes (`infra.config.local_state_dir`)."""
    return REPO_ROOT / local_state_dir(stage) / "stack.json"


def stage_settings(stage: str | None, cdk_json: Path | None = None) -> PipelineSettings:
    """cdk.json's settings for `stage` (None: the stage cdk.json pins, else the default), as
    `cdk deploy -c stage=<stage>` reads them; OpsError (one line per problem) if refused."""
    cdk_json = cdk_json or CDK_JSON
    try:
        document = json.loads(cdk_json.read_text(encoding="utf-8")) if cdk_json.is_file() else {}
        context = dict(document.get("context") or {}) if isinstance(document, dict) else {}
        if stage is not None:
            context["stage"] = valid_stage(stage)
        return PipelineSettings.from_context(context)
    except (ValidationError, SettingsError) as error:
        raise OpsError(f"{cdk_json.name}: {'; '.join(settings_error_lines(error))}") from None
    except (OSError, ValueError, AttributeError) as error:
        raise OpsError(f"{cdk_json.name}: {' '.join(str(error).split())[:200]}") from None


# botocore's service-specific endpoint variables, as `local.overlay` sets them for the functions.
LOCAL_STAND_IN_ENDPOINTS = {
    "bedrock": "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
    "end_user_messaging": "AWS_ENDPOINT_URL_PINPOINT_SMS_VOICE_V2",
}
# The local runtime's names of the webhook's secrets (`local.resources`); the others are the
# consumers' logical names, exported as `OutputKey.secret_id(name)` as the stack does.
LOCAL_WEBHOOK_SECRETS = {
    "telegram": OutputKey.TELEGRAM_SECRET_ID,
    "crm": OutputKey.CRM_SECRET_ID,
    "crm_token": OutputKey.CRM_TOKEN_SECRET_ID,
    "bitrix24_app_token": OutputKey.BITRIX24_APP_TOKEN_SECRET_ID,
}


@dataclass(frozen=True)
class ConsumerQueues:
    consumer: str
    queue_url: str
    dlq_url: str
    delivery_dlq_url: str | None = None


@dataclass(frozen=True)
class StackOutputs:
    """Output values by key, and where they came from (named in error messages)."""

    origin: str
    values: Mapping[str, str]
    # The Telegram Bot API base to use instead of the real one (the local runtime's fake).
    telegram_api_base: str | None = None

    def get(self, key: str) -> str | None:
        value = self.values.get(key)
        return value or None

    def require(self, key: str) -> str:
        value = self.get(key)
        if value is None:
            raise OpsError(f"{self.origin} has no output {key!r} (is it deployed from this version?)")
        return value

    def consumer_queues(self) -> list[ConsumerQueues]:
        """The registry's consumers that exist in this stack (a disabled one has no queue outputs)."""
        return [
            ConsumerQueues(
                c.name,
                self.require(OutputKey.queue_url(c.name)),
                self.require(OutputKey.dlq_url(c.name)),
                self.get(OutputKey.delivery_dlq_url(c.name)),
            )
            for c in CONSUMERS
            if self.get(OutputKey.queue_url(c.name))
        ]

    def consumer_queue(self, consumer: str) -> ConsumerQueues:
        for queues in self.consumer_queues():
            if queues.consumer == consumer:
                return queues
        known = ", ".join(q.consumer for q in self.consumer_queues()) or "none"
        raise OpsError(f"no consumer {consumer!r} in {self.origin} (deployed consumers: {known})")


def from_cloudformation(stack_name: str) -> StackOutputs:
    """Outputs of a deployed stack (region and credentials from the usual boto3 sources)."""
    try:
        stacks = aws.client("cloudformation").describe_stacks(StackName=stack_name)["Stacks"]
    except ClientError as error:
        message = error.response.get("Error", {}).get("Message", "")
        if "does not exist" in message:
            region = aws.client("cloudformation").meta.region_name
            raise OpsError(
                f"stack {stack_name!r} not found in region {region}: deploy it (cdk deploy), "
                "or pass --stack NAME / --region REGION, or --local for the local runtime"
            ) from error
        raise
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}
    return StackOutputs(origin=f"stack {stack_name!r}", values=outputs)


def from_local_file(path: Path) -> StackOutputs:
    """The local runtime's stack file; points boto3 at its moto server for this process."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as error:
        raise OpsError(f"{path} not found: start the local runtime first (make local)") from error
    except (OSError, ValueError) as error:
        raise OpsError(f"cannot read {path}: {error}") from error
    if not isinstance(data, dict):
        raise OpsError(f"{path} does not hold a JSON object")
    endpoint = data.get("aws_endpoint")
    if not endpoint:
        raise OpsError(f"{path} has no 'aws_endpoint'")
    _point_boto3_at(str(endpoint), data.get("region"))
    fakes = data.get("fakes") or {}
    # The services the local runtime's functions reach on stand-ins, not on moto.
    for fake, variable in LOCAL_STAND_IN_ENDPOINTS.items():
        if fakes.get(fake):
            os.environ[variable] = str(fakes[fake])
    return StackOutputs(
        origin=str(path), values=_local_outputs(data), telegram_api_base=fakes.get("telegram")
    )


def _local_outputs(data: Mapping[str, Any]) -> dict[str, str]:
    """The stack outputs the local runtime's file stands for (see `local/runtime.py` stack_info)."""
    secrets, tables = data.get("secrets") or {}, data.get("tables") or {}
    delivery_events = data.get("sms_delivery_events") or {}
    outputs = {
        OutputKey.WEBHOOK_URL: data.get("webhook_url"),
        OutputKey.CRM_URL: data.get("crm_url"),
        OutputKey.EVENTS_TOPIC_ARN: data.get("topic_arn"),
        OutputKey.JOURNAL_TABLE: tables.get("journal"),
        OutputKey.ALARM_TOPIC_ARN: data.get("alarm_topic_arn"),
        OutputKey.VERSION: data.get("version"),
        OutputKey.SMS_CONFIGURATION_SET: delivery_events.get("configuration_set"),
        OutputKey.SMS_EVENTS_TOPIC_ARN: delivery_events.get("topic_arn"),
        OutputKey.sms_events_dlq_url("failed"): delivery_events.get("failed_events_queue_url"),
    }
    for name, table in tables.items():
        outputs[OutputKey.table_name(name)] = table
    for name, secret_id in secrets.items():
        outputs[LOCAL_WEBHOOK_SECRETS.get(name) or OutputKey.secret_id(name)] = secret_id
    for name, queue in (data.get("queues") or {}).items():
        outputs[OutputKey.queue_url(name)] = queue.get("url")
        outputs[OutputKey.dlq_url(name)] = queue.get("dlq_url")
    return {key: str(value) for key, value in outputs.items() if value}


def local_runtime_running(path: Path = DEFAULT_LOCAL_FILE) -> bool:
    """Whether a local runtime that wrote `path` still answers at its AWS endpoint (moto)."""
    try:
        endpoint = urlsplit(str(json.loads(path.read_text(encoding="utf-8"))["aws_endpoint"]))
        with socket.create_connection((endpoint.hostname or "127.0.0.1", endpoint.port or 80), timeout=0.5):
            return True
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _point_boto3_at(endpoint: str, region: str | None) -> None:
    """boto3 honours AWS_ENDPOINT_URL; moto accepts any credentials, so fake ones are fine here."""
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    if region:
        os.environ["AWS_DEFAULT_REGION"] = region
    os.environ.setdefault("AWS_DEFAULT_REGION", "eu-central-1")
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    aws.reset_clients()
