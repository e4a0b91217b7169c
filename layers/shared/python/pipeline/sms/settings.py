"""What the sms worker, the reconciler and the delivery-event handler read from the environment.

Checked by hand (`pipeline.validation`), not by pydantic: the three functions read these settings
at their cold start, where importing pydantic and building a model costs about 0.4x of
`import boto3` (docs/perf.md). `SmsSettings.parse` accepts and refuses what the pydantic model it
replaced did, with pydantic's locations and messages (tests/unit/sms/test_sms_settings_oracle.py).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Literal, get_args

from pipeline.retention import SMS_RETENTION_DAYS, SMS_RETENTION_MIN_DAYS
from pipeline.validation import Fields

GatewayKind = Literal["end_user_messaging", "http", "fake"]
MessageType = Literal["TRANSACTIONAL", "PROMOTIONAL"]

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
    "quiet_hours": "SMS_QUIET_HOURS",
    "quiet_statuses": "SMS_QUIET_STATUSES",
}
# `SMS_QUIET_HOURS`: the recipient's local hours in which listed statuses wait, "HH:MM-HH:MM".
_QUIET_HOURS = r"^([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)$"
_HTTP_URL = r"^https?://"
_TITLE = "SmsSettings"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SmsSettings:
    """Checked when made (`parse`, `from_env`, or the constructor): an invalid one raises `Invalid`."""

    gateway: GatewayKind = "end_user_messaging"
    journal_table: str
    # Definite refusals (throttling, quota) tolerated before the notification is `failed`.
    # Keep it below the consumer's max_receive_count so the journal, not SQS, decides.
    max_attempts: int = 5  # 1..20
    retry_base_seconds: int = 10  # 0..43_200
    retry_max_seconds: int = 600  # 0..43_200
    # How long a claim protects a `sending` record; longer than the Lambda timeout, so only a
    # dead worker's claim expires (and then the outcome is `unknown`, never a blind resend).
    lease_seconds: int = 120  # 10..3_600
    # A notification key must outlive every redelivery of its event (at least the redelivery
    # bound) and the CRM's resends (the default adds their window), or an old event would count
    # as new again: see pipeline.retention.
    retention_days: int = SMS_RETENTION_DAYS  # SMS_RETENTION_MIN_DAYS..365
    # An `unknown` older than this is left for a person (metric SmsUnknownPastDeadline).
    reconcile_deadline_hours: float = 24  # above 0, at most 24 * 14
    reconcile_batch_size: int = 100  # 1..1_000
    # A gateway may still take a request its client gave up on: a lookup that does not find the
    # message is proof it never arrived only once the record has been unknown this long.
    lookup_settle_seconds: int = 120  # 0..3_600
    # End User Messaging: phone number / sender id / pool (id or ARN) and configuration set.
    origination_identity: str | None = None
    configuration_set: str | None = None
    message_type: MessageType = "TRANSACTIONAL"
    # HTTP gateway: base URL (a local fake in development); its token is the `sms_gateway` secret.
    http_base_url: str | None = None  # http:// or https://
    http_timeout_seconds: float = 5  # above 0, at most 30
    # Quiet hours (off by default, `pipeline.sms.endstates`): "22:00-08:00", and the statuses
    # (comma-separated) whose SMS wait for the window's end; both or neither.
    quiet_hours: str | None = None
    quiet_statuses: str | None = None

    def __post_init__(self) -> None:
        for name, value in _checked(vars(self)).items():
            object.__setattr__(self, name, value)

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> SmsSettings:
        """The settings from their fields' values (strings as the environment gives them, or
        values); `Invalid` names every field refused, or the rule two fields break (loc `()`)."""
        return cls(**_checked(data))

    @classmethod
    def from_environment(cls, environment: Mapping[str, str]) -> SmsSettings:
        """Unset or empty variables keep the field's default (an unset JOURNAL_TABLE is refused)."""
        return cls.parse(
            {
                field: environment[name]
                for field, name in ENVIRONMENT_VARIABLES.items()
                if environment.get(name)
            }
        )

    @classmethod
    def from_env(cls) -> SmsSettings:
        return cls.from_environment(os.environ)

    @property
    def quiet_window(self) -> tuple[int, int] | None:
        """(start, end) minutes of the local day, or None when quiet hours are off."""
        return _window(self.quiet_hours)

    @property
    def quiet_status_set(self) -> frozenset[str]:
        return _status_set(self.quiet_statuses)

    @property
    def lease(self) -> timedelta:
        return timedelta(seconds=self.lease_seconds)

    @property
    def retention(self) -> timedelta:
        return timedelta(days=self.retention_days)

    @property
    def reconcile_deadline(self) -> timedelta:
        return timedelta(hours=self.reconcile_deadline_hours)


FIELDS: tuple[str, ...] = tuple(field.name for field in dataclasses.fields(SmsSettings))
DEFAULTS: dict[str, Any] = {
    field.name: field.default
    for field in dataclasses.fields(SmsSettings)
    if field.default is not dataclasses.MISSING
}


def _window(quiet_hours: str | None) -> tuple[int, int] | None:
    match = re.match(_QUIET_HOURS, quiet_hours or "")
    if match is None:
        return None
    hours, minutes, end_hours, end_minutes = (int(part) for part in match.groups())
    return hours * 60 + minutes, end_hours * 60 + end_minutes


def _status_set(statuses: str | None) -> frozenset[str]:
    return frozenset(part.strip() for part in (statuses or "").split(",") if part.strip())


def _checked(data: Any) -> dict[str, Any]:
    """Every field checked (all refusals at once, unknown keys too), then the rules across fields,
    which pydantic's model validator applied only once every field was valid."""
    fields = Fields(_TITLE, {**DEFAULTS, **data} if isinstance(data, Mapping) else data, known=FIELDS)
    values = {
        "gateway": fields.choice("gateway", get_args(GatewayKind)),
        "journal_table": fields.text("journal_table", min_length=1),
        "max_attempts": fields.number("max_attempts", ge=1, le=20),
        "retry_base_seconds": fields.number("retry_base_seconds", ge=0, le=43_200),
        "retry_max_seconds": fields.number("retry_max_seconds", ge=0, le=43_200),
        "lease_seconds": fields.number("lease_seconds", ge=10, le=3_600),
        "retention_days": fields.number("retention_days", ge=SMS_RETENTION_MIN_DAYS, le=365),
        "reconcile_deadline_hours": fields.number("reconcile_deadline_hours", float, gt=0, le=24 * 14),
        "reconcile_batch_size": fields.number("reconcile_batch_size", ge=1, le=1_000),
        "lookup_settle_seconds": fields.number("lookup_settle_seconds", ge=0, le=3_600),
        "origination_identity": fields.text("origination_identity", default=None),
        "configuration_set": fields.text("configuration_set", default=None),
        "message_type": fields.choice("message_type", get_args(MessageType)),
        "http_base_url": fields.text("http_base_url", pattern=_HTTP_URL, default=None),
        "http_timeout_seconds": fields.number("http_timeout_seconds", float, gt=0, le=30),
        "quiet_hours": fields.text("quiet_hours", pattern=_QUIET_HOURS, default=None),
        "quiet_statuses": fields.text("quiet_statuses", default=None),
    }
    fields.whole(lambda: _consistent(values))
    fields.done()
    return values


def _consistent(values: Mapping[str, Any]) -> None:
    """ValueError for the first rule across fields the (valid) values break, in the order pydantic
    checked them."""
    if values["retry_base_seconds"] > values["retry_max_seconds"]:
        raise ValueError("SMS_RETRY_BASE_SECONDS must not exceed SMS_RETRY_MAX_SECONDS")
    if values["gateway"] == "http" and not values["http_base_url"]:
        raise ValueError("SMS_GATEWAY=http needs SMS_HTTP_BASE_URL")
    if bool(values["quiet_hours"]) != bool(_status_set(values["quiet_statuses"])):
        raise ValueError("SMS_QUIET_HOURS and SMS_QUIET_STATUSES go together")
    window = _window(values["quiet_hours"])
    if window is not None and window[0] == window[1]:
        raise ValueError("SMS_QUIET_HOURS must not start when it ends")
