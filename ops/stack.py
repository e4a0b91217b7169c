"""Where the CLI finds the pipeline: CloudFormation stack outputs, or the local runtime's file.

Both sources end up as the same `StackOutputs` (output key -> value), so every command works
unchanged against AWS and against `make local`. The output keys are declared here and only here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from infra.naming import pascal_case  # the stack names its outputs with it (no CDK import)
from ops.errors import OpsError
from pipeline import aws
from pipeline.registry import CONSUMERS

DEFAULT_STACK_NAME = "TelegramCrmPipeline"
DEFAULT_LOCAL_FILE = Path(".local") / "stack.json"


class OutputKey:
    """CloudFormation output keys of the stack (`infra/stack.py` `_outputs`); tests/infra checks
    that every output the stack has is one of `every()`."""

    WEBHOOK_URL = "WebhookUrl"
    CRM_URL = "CrmUrl"
    EVENTS_TOPIC_ARN = "EventsTopicArn"
    # Output names, not secrets:
    TELEGRAM_SECRET_ID = "TelegramSecretId"  # noqa: S105
    CRM_SECRET_ID = "CrmSecretId"  # noqa: S105
    BOT_TOKEN_SECRET_ID = "TelegramBotTokenSecretId"  # noqa: S105
    JOURNAL_TABLE = "JournalTableName"
    # Monitoring: subscribe to the alarm topic; the dashboard shows the whole pipeline.
    ALARM_TOPIC_ARN = "AlarmTopicArn"
    DASHBOARD_NAME = "DashboardName"
    # SMS (with the `sms` consumer); the delivery events exist only with End User Messaging.
    SMS_RECONCILER_NAME = "SmsReconcilerName"
    SMS_EVENTS_TOPIC_ARN = "SmsEventsTopicArn"
    SMS_CONFIGURATION_SET = "SmsConfigurationSet"
    # What the delivery-event handler failed on, and what SNS could not hand to it.
    SMS_EVENTS_DLQ_ROLES = ("failed", "undelivered")

    @staticmethod
    def table_name(table: str) -> str:
        return f"{pascal_case(table)}TableName"

    @staticmethod
    def secret_id(secret: str) -> str:
        return f"{pascal_case(secret)}SecretId"

    @staticmethod
    def queue_url(consumer: str) -> str:
        return f"{pascal_case(consumer)}QueueUrl"

    @staticmethod
    def dlq_url(consumer: str) -> str:
        return f"{pascal_case(consumer)}DlqUrl"

    @staticmethod
    def delivery_dlq_url(consumer: str) -> str:
        """Where SNS puts what it could not deliver to the consumer's queue."""
        return f"{pascal_case(consumer)}DeliveryDlqUrl"

    @staticmethod
    def sms_events_dlq_url(role: str) -> str:
        return f"SmsEvents{pascal_case(role)}DlqUrl"

    @classmethod
    def every(cls) -> list[str]:
        """Every output a stack of this version may have (for any registry consumer), in the order
        `python -m ops outputs` shows them."""
        tables = sorted({table for consumer in CONSUMERS for table in consumer.tables})
        secrets = sorted({secret for consumer in CONSUMERS for secret in consumer.secrets})
        return [
            cls.WEBHOOK_URL,
            cls.CRM_URL,
            cls.EVENTS_TOPIC_ARN,
            cls.TELEGRAM_SECRET_ID,
            cls.CRM_SECRET_ID,
            *(cls.secret_id(secret) for secret in secrets),
            *(cls.table_name(table) for table in tables),
            *(
                key
                for consumer in CONSUMERS
                for key in (
                    cls.queue_url(consumer.name),
                    cls.dlq_url(consumer.name),
                    cls.delivery_dlq_url(consumer.name),
                )
            ),
            cls.ALARM_TOPIC_ARN,
            cls.DASHBOARD_NAME,
            cls.SMS_RECONCILER_NAME,
            cls.SMS_EVENTS_TOPIC_ARN,
            cls.SMS_CONFIGURATION_SET,
            *(cls.sms_events_dlq_url(role) for role in cls.SMS_EVENTS_DLQ_ROLES),
        ]


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
    return StackOutputs(
        origin=str(path), values=_local_outputs(data), telegram_api_base=fakes.get("telegram")
    )


def _local_outputs(data: Mapping[str, Any]) -> dict[str, str]:
    """The stack outputs the local runtime's file stands for (see `local/runtime.py` stack_info)."""
    secrets, tables = data.get("secrets") or {}, data.get("tables") or {}
    outputs = {
        OutputKey.WEBHOOK_URL: data.get("webhook_url"),
        OutputKey.CRM_URL: data.get("crm_url"),
        OutputKey.EVENTS_TOPIC_ARN: data.get("topic_arn"),
        OutputKey.TELEGRAM_SECRET_ID: secrets.get("telegram"),
        OutputKey.CRM_SECRET_ID: secrets.get("crm"),
        OutputKey.BOT_TOKEN_SECRET_ID: secrets.get("telegram_bot_token"),
        OutputKey.JOURNAL_TABLE: tables.get("journal"),
    }
    for name, queue in (data.get("queues") or {}).items():
        outputs[OutputKey.queue_url(name)] = queue.get("url")
        outputs[OutputKey.dlq_url(name)] = queue.get("dlq_url")
    return {key: str(value) for key, value in outputs.items() if value}


def _point_boto3_at(endpoint: str, region: str | None) -> None:
    """boto3 honours AWS_ENDPOINT_URL; moto accepts any credentials, so fake ones are fine here."""
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    if region:
        os.environ["AWS_DEFAULT_REGION"] = region
    os.environ.setdefault("AWS_DEFAULT_REGION", "eu-central-1")
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    aws.reset_clients()
