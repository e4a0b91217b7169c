"""Deployment settings, read from CDK context (`cdk deploy -c key=value` or cdk.json's "context").

Every knob has a default here and only here, so `python app.py` with no context deploys a
working pipeline. Values given with `-c` arrive as strings; pydantic's lax mode converts them.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from aws_cdk import RemovalPolicy
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Node
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from pipeline.registry import CONSUMERS

# CloudWatch Logs accepts only these retention periods (days -> CDK enum).
RETENTION_DAYS: dict[int, logs.RetentionDays] = {
    1: logs.RetentionDays.ONE_DAY,
    3: logs.RetentionDays.THREE_DAYS,
    5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS,
    90: logs.RetentionDays.THREE_MONTHS,
    120: logs.RetentionDays.FOUR_MONTHS,
    150: logs.RetentionDays.FIVE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
    400: logs.RetentionDays.THIRTEEN_MONTHS,
    545: logs.RetentionDays.EIGHTEEN_MONTHS,
    731: logs.RetentionDays.TWO_YEARS,
    1096: logs.RetentionDays.THREE_YEARS,
    1827: logs.RetentionDays.FIVE_YEARS,
    2192: logs.RetentionDays.SIX_YEARS,
    2557: logs.RetentionDays.SEVEN_YEARS,
    2922: logs.RetentionDays.EIGHT_YEARS,
    3288: logs.RetentionDays.NINE_YEARS,
    3653: logs.RetentionDays.TEN_YEARS,
}

# Powertools (Python logging) level -> Lambda's application log level, kept equal so that
# Lambda's log filter and Powertools' agree.
LAMBDA_LOG_LEVELS: dict[str, lambda_.ApplicationLogLevel] = {
    "DEBUG": lambda_.ApplicationLogLevel.DEBUG,
    "INFO": lambda_.ApplicationLogLevel.INFO,
    "WARNING": lambda_.ApplicationLogLevel.WARN,
    "ERROR": lambda_.ApplicationLogLevel.ERROR,
    "CRITICAL": lambda_.ApplicationLogLevel.FATAL,
}

METRICS_NAMESPACE = "TelegramCrmPipeline"

# Telegram's webhook source ranges (https://core.telegram.org/resources/cidr.txt, IPv4).
TELEGRAM_CIDRS = ("149.154.160.0/20", "91.108.4.0/22")

# What SendTextMessage accepts as OriginationIdentity except a bare phone number (an IAM grant
# can name a number only by its id or ARN): an ARN, a phone number or pool id, or a sender id.
ORIGINATION_IDENTITY = re.compile(
    r"^(arn:aws[a-z-]*:sms-voice:[a-z0-9-]+:\d{12}:(phone-number|pool|sender-id)/\S+"
    r"|phone-number-[0-9a-f]+|pool-[0-9a-f]+|[A-Za-z0-9_-]{1,11})$"
)

# Context keys whose blank value means "not set".
OPTIONAL_TEXT_SETTINGS = (
    "bedrock_model_id",
    "sms_origination_identity",
    "sms_configuration_set",
    "sms_http_base_url",
    "alarm_email",
)


class PipelineSettings(BaseModel):
    """The context keys this app reads; anything else in the context (feature flags) is ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    stack_name: str = Field(default="TelegramCrmPipeline", min_length=1, max_length=128)
    # Version of the AWS-managed Powertools layer (resolved from its public SSM parameter);
    # keep equal to the aws-lambda-powertools pin in requirements.txt. "latest" is accepted.
    powertools_version: str = Field(default="3.37.0", pattern=r"^(latest|\d+\.\d+\.\d+)$")
    log_retention_days: int = 30
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    # HTTP API stage throttling: steady requests per second and burst.
    api_rate_limit: float = Field(default=50, gt=0)
    api_burst_limit: int = Field(default=100, ge=0)
    telegram_bot_id: str = Field(default="default", min_length=1)
    secret_rotation_grace_seconds: int = Field(default=3600, ge=0)
    # Idempotency records outlive Telegram's 24 h redelivery window with a margin.
    idempotency_ttl_seconds: int = Field(default=259_200, ge=60)
    # "retain" keeps tables, log groups and the topic key when the stack is deleted; "destroy"
    # (for development stacks) deletes them with it.
    removal_policy: Literal["retain", "destroy"] = "retain"
    # Enables the `ai` consumer; a Bedrock model id such as "anthropic.claude-3-haiku-20240307-v1:0".
    bedrock_model_id: str | None = None
    # -- SMS (the `sms` consumer, its reconciler and delivery events; see infra.constructs.sms) --
    # "end_user_messaging" (AWS End User Messaging SMS, pipeline.sms.settings' default) or "http"
    # (a generic HTTP gateway at sms_http_base_url, token in the sms_gateway secret).
    sms_gateway: Literal["end_user_messaging", "http"] = "end_user_messaging"
    # End User Messaging sender: an ARN, a phone-number-/pool- id, or a sender id. Unset: the
    # service picks one of the account's identities (and the grant covers all of them).
    sms_origination_identity: str | None = None
    # An existing configuration set (name or ARN) whose event destination the operator points at
    # the stack's SmsEventsTopicArn. Unset: the stack creates one wired to that topic.
    sms_configuration_set: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_:/-]{1,256}$")
    sms_message_type: Literal["TRANSACTIONAL", "PROMOTIONAL"] = "TRANSACTIONAL"
    sms_http_base_url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    sms_reconcile_minutes: int = Field(default=5, ge=1, le=1440)
    sms_reconcile_deadline_hours: float = Field(default=24, gt=0, le=24 * 14)
    # Alarm when an `unknown` SMS outcome has stayed unresolved this long.
    sms_unknown_alarm_minutes: int = Field(default=60, ge=5)
    # -- operations -------------------------------------------------------------------------------
    # Where alarm notifications are e-mailed (SNS asks the address to confirm first).
    alarm_email: str | None = Field(default=None, pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
    # Accept Telegram webhook calls only from Telegram's published ranges (TELEGRAM_CIDRS).
    telegram_ip_allowlist: bool = False
    # Context values for any other registry `requires_setting` key (a consumer added later that
    # is switched on by a key this model does not declare).
    consumer_settings: dict[str, str] = Field(default_factory=dict)

    @field_validator("log_retention_days")
    @classmethod
    def _known_retention(cls, value: int) -> int:
        if value not in RETENTION_DAYS:
            raise ValueError(f"log_retention_days must be one of {sorted(RETENTION_DAYS)}")
        return value

    @field_validator(*OPTIONAL_TEXT_SETTINGS, mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        if isinstance(value, str):
            return value.strip() or None
        return value

    @field_validator("sms_origination_identity")
    @classmethod
    def _nameable_identity(cls, value: str | None) -> str | None:
        if value is not None and not ORIGINATION_IDENTITY.match(value):
            raise ValueError(
                "sms_origination_identity must be an ARN, a phone-number-/pool- id or a sender id "
                "(for a phone number give its id or ARN, so the IAM grant can name it)"
            )
        return value

    @model_validator(mode="after")
    def _sms_gateway_is_complete(self) -> PipelineSettings:
        if self.sms_gateway == "http" and not self.sms_http_base_url:
            raise ValueError("sms_gateway=http needs sms_http_base_url")
        return self

    @classmethod
    def from_node(cls, node: Node) -> PipelineSettings:
        """Read every known key from the construct tree's context; absent keys keep defaults."""
        given = {name: node.try_get_context(name) for name in cls.model_fields if name != "consumer_settings"}
        undeclared = sorted(
            {c.requires_setting for c in CONSUMERS if c.requires_setting} - set(cls.model_fields)
        )
        consumer_settings = {key: str(node.try_get_context(key) or "").strip() for key in undeclared}
        return cls.model_validate(
            {
                **{name: value for name, value in given.items() if value is not None},
                "consumer_settings": {key: value for key, value in consumer_settings.items() if value},
            }
        )

    def registry_settings(self) -> dict[str, Any]:
        """The mapping `pipeline.registry.enabled()` reads `requires_setting` keys from."""
        return {**self.model_dump(exclude={"consumer_settings"}), **self.consumer_settings}

    @property
    def log_retention(self) -> logs.RetentionDays:
        return RETENTION_DAYS[self.log_retention_days]

    @property
    def lambda_log_level(self) -> lambda_.ApplicationLogLevel:
        return LAMBDA_LOG_LEVELS[self.log_level]

    @property
    def cdk_removal_policy(self) -> RemovalPolicy:
        return RemovalPolicy.RETAIN if self.removal_policy == "retain" else RemovalPolicy.DESTROY
