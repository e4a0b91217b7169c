"""What a consumer's worker reads from its environment, and how long it waits before a retry.

Apart from the worker runtime (`pipeline.worker`) so that the stack (`infra.environment` checks
every worker's environment with `WorkerSettings.from_environment` at synth) and the SMS journal's
own retries (`pipeline.sms.service`, which the reconciler runs too) read them without loading
Powertools' batch and idempotency utilities.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.registry import RetryPolicy
from pipeline.retention import IDEMPOTENCY_TTL_SECONDS, check_idempotency_ttl
from pipeline.validation import Fields

# An ordered consumer's alarm topic (`infra.constructs.events_topic.AlarmTopic`).
ALARM_TOPIC_ENV = "ALARM_TOPIC_ARN"
# Field of WorkerSettings -> the environment variable it is read from.
ENVIRONMENT_VARIABLES = {
    "consumer_name": "CONSUMER_NAME",
    "queue_url": "QUEUE_URL",
    "dlq_url": "DLQ_URL",
    "journal_table": "JOURNAL_TABLE",
    "idempotency_ttl_seconds": "IDEMPOTENCY_TTL_SECONDS",
    "alarm_topic_arn": ALARM_TOPIC_ENV,
}


@dataclass
class WorkerSettings:
    """What a worker reads from its environment (set by the CDK stack or the local runtime).

    `infra.environment` checks every worker's environment with `from_environment` at synth (and at
    the local start), so a constraint added here is enforced before anything is deployed.
    """

    consumer_name: str
    queue_url: str
    dlq_url: str
    journal_table: str
    # Records must outlive every redelivery of their event (pipeline.retention).
    idempotency_ttl_seconds: int = IDEMPOTENCY_TTL_SECONDS
    # Ordered consumers: where each dead letter's notice (naming its chat) is published.
    alarm_topic_arn: str | None = None

    def __post_init__(self) -> None:
        fields = Fields("WorkerSettings", vars(self))
        for name in REQUIRED:
            fields.text(name, min_length=1)
        ttl = fields.integer("idempotency_ttl_seconds")
        self.idempotency_ttl_seconds = fields.checked("idempotency_ttl_seconds", ttl, check_idempotency_ttl)
        fields.text("alarm_topic_arn", default=None)
        fields.done()

    @classmethod
    def from_environment(cls, environment: Mapping[str, str]) -> WorkerSettings:
        """Unset required variables read as empty (and are refused naming their field); an unset
        or empty TTL keeps the default."""
        values: dict[str, Any] = {
            field: environment.get(name, "")
            for field, name in ENVIRONMENT_VARIABLES.items()
            if field in REQUIRED or environment.get(name)
        }
        return cls(**values)

    @classmethod
    def from_env(cls) -> WorkerSettings:
        return cls.from_environment(os.environ)


REQUIRED = ("consumer_name", "queue_url", "dlq_url", "journal_table")


def backoff_seconds(policy: RetryPolicy, receive_count: int, rng: random.Random | None = None) -> int:
    """Exponential backoff with equal jitter: half the capped delay fixed, half random.

    Attempt n waits between cap/2 and cap, cap = min(max, base * 2**(n-1)), so retries of many
    records spread out instead of hammering a recovering service together.
    """
    rng = rng or random.Random()
    exponent = max(receive_count - 1, 0)
    cap = min(policy.max_delay_seconds, policy.base_delay_seconds * (2 ** min(exponent, 20)))
    return math.ceil(cap / 2 + rng.uniform(0, cap / 2))
