"""What the sms worker, the reconciler and the delivery-event handler read from the environment."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pipeline.retention import SMS_RETENTION_DAYS, SMS_RETENTION_MIN_DAYS

GatewayKind = Literal["end_user_messaging", "http", "fake"]

# Field name -> environment variable. Unset or empty variables keep the field's default.
ENVIRONMENT_VARIABLES = {
    "gateway": "SMS_GATEWAY",
    "journal_table": "JOURNAL_TABLE",
    "max_attempts": "SMS_MAX_ATTEMPTS",
    "retry_base_seconds": "SMS_RETRY_BASE_SECONDS",
    "retry_max_seconds": "SMS_RETRY_MAX_SECONDS",
    "lease_seconds": "SMS_LEASE_SECONDS",
    "retention_days": "SMS_RETENTION_DAYS",
    "reconcile_deadline_hours": "SMS_RECONCILE_DEADLINE_HOURS",
    "reconcile_batch_size": "SMS_RECONCILE_BATCH_SIZE",
    "lookup_settle_seconds": "SMS_LOOKUP_SETTLE_SECONDS",
    "origination_identity": "SMS_ORIGINATION_IDENTITY",
    "configuration_set": "SMS_CONFIGURATION_SET",
    "message_type": "SMS_MESSAGE_TYPE",
    "http_base_url": "SMS_HTTP_BASE_URL",
    "http_timeout_seconds": "SMS_HTTP_TIMEOUT_SECONDS",
}


class SmsSettings(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    gateway: GatewayKind = "end_user_messaging"
    journal_table: str = Field(min_length=1)
    # Definite refusals (throttling, quota) tolerated before the notification is `failed`.
    # Keep it below the consumer's max_receive_count so the journal, not SQS, decides.
    max_attempts: int = Field(default=5, ge=1, le=20)
    retry_base_seconds: int = Field(default=10, ge=0, le=43_200)
    retry_max_seconds: int = Field(default=600, ge=0, le=43_200)
    # How long a claim protects a `sending` record; longer than the Lambda timeout, so only a
    # dead worker's claim expires (and then the outcome is `unknown`, never a blind resend).
    lease_seconds: int = Field(default=120, ge=10, le=3_600)
    # A notification key must outlive every redelivery of its event (at least the redelivery
    # bound) and the CRM's resends (the default adds their window), or an old event would count
    # as new again: see pipeline.retention.
    retention_days: int = Field(default=SMS_RETENTION_DAYS, ge=SMS_RETENTION_MIN_DAYS, le=365)
    # An `unknown` older than this is left for a person (metric SmsUnknownPastDeadline).
    reconcile_deadline_hours: float = Field(default=24, gt=0, le=24 * 14)
    reconcile_batch_size: int = Field(default=100, ge=1, le=1_000)
    # A gateway may still take a request its client gave up on: a lookup that does not find the
    # message is proof it never arrived only once the record has been unknown this long.
    lookup_settle_seconds: int = Field(default=120, ge=0, le=3_600)
    # End User Messaging: phone number / sender id / pool (id or ARN) and configuration set.
    origination_identity: str | None = None
    configuration_set: str | None = None
    message_type: Literal["TRANSACTIONAL", "PROMOTIONAL"] = "TRANSACTIONAL"
    # HTTP gateway: base URL (a local fake in development); its token is the `sms_gateway` secret.
    http_base_url: str | None = Field(default=None, pattern=r"^https?://")
    http_timeout_seconds: float = Field(default=5, gt=0, le=30)

    @model_validator(mode="after")
    def _consistent(self) -> SmsSettings:
        if self.retry_base_seconds > self.retry_max_seconds:
            raise ValueError("SMS_RETRY_BASE_SECONDS must not exceed SMS_RETRY_MAX_SECONDS")
        if self.gateway == "http" and not self.http_base_url:
            raise ValueError("SMS_GATEWAY=http needs SMS_HTTP_BASE_URL")
        return self

    @property
    def lease(self) -> timedelta:
        return timedelta(seconds=self.lease_seconds)

    @property
    def retention(self) -> timedelta:
        return timedelta(days=self.retention_days)

    @property
    def reconcile_deadline(self) -> timedelta:
        return timedelta(hours=self.reconcile_deadline_hours)

    @classmethod
    def from_env(cls) -> SmsSettings:
        return cls.model_validate(
            {field: os.environ[name] for field, name in ENVIRONMENT_VARIABLES.items() if os.environ.get(name)}
        )
