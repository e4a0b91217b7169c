"""Every AWS and Telegram limit the scale model meets, in one dated table with the page each comes from.

The scale model (`python -m bench scale`, bench/scale.py) reads them from here, and docs/at-scale.md
quotes them. The Telegram rows' values are `pipeline.pacing`'s, which paces the sending
consumers by them (the Lambda layer cannot import `infra`): one source. Like `infra.prices`, each
row says when it was recorded and how:
`checked` rows were read on their page (a stored copy of it, through the docs search available
here) on that date; `memory` rows are from memory of the page and must be re-checked there
before anyone relies on them. Quotas are per account and region unless the row says otherwise,
and many can be raised (`adjustable`): docs/at-scale.md lists which to ask for before a
campaign.

No CDK import: plain data.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from pipeline import pacing

LIMITS_RECORDED = "2026-12-02"

APIGW_QUOTAS = "https://docs.aws.amazon.com/apigateway/latest/developerguide/limits.html"
LAMBDA_QUOTAS = "https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html"
LAMBDA_SQS_SCALING = "https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html"
SNS_FIFO_THROUGHPUT = "https://docs.aws.amazon.com/sns/latest/dg/fifo-topic-throughput.html"
SNS_QUOTAS = "https://docs.aws.amazon.com/general/latest/gr/sns.html"
SQS_FIFO_QUOTAS = (
    "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html"
)
DYNAMODB_PARTITIONS = (
    "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/warm-throughput-scenarios.html"
)
DYNAMODB_ON_DEMAND = (
    "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/on-demand-capacity-mode.html"
)
TELEGRAM_SET_WEBHOOK = "https://core.telegram.org/bots/api#setwebhook"
TELEGRAM_BOT_FAQ = "https://core.telegram.org/bots/faq#my-bot-is-hitting-limits-how-do-i-avoid-this"
SMS_MPS = "https://docs.aws.amazon.com/sms-voice/latest/userguide/sms-limitations-mps.html"


@dataclass(frozen=True)
class Limit:
    """One documented limit: its value in `unit`, where it is written, and how it was recorded."""

    value: float
    unit: str
    source: str
    how: Literal["checked", "memory"]
    note: str = ""
    adjustable: bool = False  # a quota AWS raises on request (Service Quotas / Support)
    recorded: str = LIMITS_RECORDED


@dataclass(frozen=True)
class Limits:
    # -- ingress -------------------------------------------------------------------------------
    apigw_account_rps: Limit = Limit(
        10_000,
        "requests/s",
        APIGW_QUOTAS,
        "checked",
        "per account and region across HTTP, REST and WebSocket APIs (2,500 in the newer regions);"
        " burst by token bucket, 5,000 requests",
        adjustable=True,
    )
    # -- Lambda --------------------------------------------------------------------------------
    lambda_account_concurrency: Limit = Limit(
        1_000,
        "concurrent executions",
        LAMBDA_QUOTAS,
        "checked",
        "account default per region (a new account may start lower); shared by every function",
        adjustable=True,
    )
    lambda_environment_bytes: Limit = Limit(
        4_096,
        "bytes",
        LAMBDA_QUOTAS,
        "memory",
        "a function's environment variables together, names and values; a larger one is refused at"
        " deploy (infra.constructs.lambda_function refuses it at synth)",
    )
    lambda_sqs_scale_up_per_minute: Limit = Limit(
        300,
        "more concurrent batches/min",
        LAMBDA_SQS_SCALING,
        "checked",
        "standard queue: starts at 5 concurrent batches, adds up to 300 a minute",
    )
    lambda_sqs_max_concurrency: Limit = Limit(
        1_000,
        "concurrent batches",
        LAMBDA_SQS_SCALING,
        "checked",
        "one event source mapping at most (MaximumConcurrency 2..1000); a FIFO queue's is also"
        " capped by its active message groups",
    )
    # -- SNS / SQS -----------------------------------------------------------------------------
    sns_fifo_topic_scope_mps: Limit = Limit(
        3_000,
        "messages/s",
        SNS_FIFO_THROUGHPUT,
        "checked",
        "a FIFO topic in Topic throughput scope (and 20 MB/s); this stack sets MessageGroup scope",
    )
    sns_fifo_group_scope_account_mps: Limit = Limit(
        30_000,
        "messages/s",
        SNS_FIFO_THROUGHPUT,
        "memory",
        "MessageGroup scope: the regional publish quota (30,000 in us-east-1, lower elsewhere,"
        " e.g. 9,000 in some regions; re-check eu-central-1's)",
        adjustable=True,
    )
    sns_fifo_per_group_mps: Limit = Limit(
        300,
        "messages/s",
        SNS_FIFO_THROUGHPUT,
        "memory",
        "MessageGroup scope: each message group (here: each chat, each CRM order)",
    )
    sqs_fifo_high_throughput_per_group_mps: Limit = Limit(
        300,
        "messages/s",
        SQS_FIFO_QUOTAS,
        "memory",
        "high-throughput FIFO queue (PER_MESSAGE_GROUP_ID): per message group; the queue's own"
        " quota is in the tens of thousands a second",
    )
    # -- DynamoDB ------------------------------------------------------------------------------
    dynamodb_partition_wcu: Limit = Limit(
        1_000,
        "write units/s",
        DYNAMODB_PARTITIONS,
        "checked",
        "per partition, on demand too: one item key can never take more (adaptive capacity isolates"
        " a hot item on its own partition, no further)",
    )
    dynamodb_partition_rcu: Limit = Limit(
        3_000, "read units/s", DYNAMODB_PARTITIONS, "checked", "per partition"
    )
    dynamodb_on_demand_warm_wcu: Limit = Limit(
        4_000,
        "write units/s",
        DYNAMODB_PARTITIONS,
        "checked",
        "a new on-demand table's warm throughput; then up to double the previous peak (memory:"
        " more within 30 minutes may throttle), or pre-warm it",
        adjustable=True,
    )
    # -- Telegram ------------------------------------------------------------------------------
    telegram_messages_per_second: Limit = Limit(
        pacing.TELEGRAM_MESSAGES_PER_SECOND,
        "messages/s",
        TELEGRAM_BOT_FAQ,
        "checked",
        "one bot, all chats: 'not more than 30 messages per second or so'; above it 429 retry_after",
    )
    telegram_per_chat_interval: Limit = Limit(
        pacing.TELEGRAM_CHAT_INTERVAL_SECONDS,
        "s between messages",
        TELEGRAM_BOT_FAQ,
        "checked",
        "one chat: 'avoid sending more than one message per second' (short bursts tolerated)",
    )
    telegram_group_per_minute: Limit = Limit(
        pacing.TELEGRAM_GROUP_MESSAGES_PER_MINUTE,
        "messages/min",
        TELEGRAM_BOT_FAQ,
        "checked",
        "one group: 'not more than 20 messages per minute'",
    )
    telegram_webhook_connections: Limit = Limit(
        100,
        "connections",
        TELEGRAM_SET_WEBHOOK,
        "memory",
        "setWebhook max_connections, 1-100 (Telegram's default 40; `python -m ops webhook` sets 40"
        " unless told): Telegram delivers one update per request over at most this many at once",
        adjustable=True,
    )
    # -- SMS -----------------------------------------------------------------------------------
    sms_mps_long_code: Limit = Limit(
        1,
        "message parts/s",
        SMS_MPS,
        "memory",
        "per origination identity, most countries' long codes and sender IDs (US toll-free 3,"
        " US short code 100: checked); an SMS of over 160 GSM characters is several parts",
        adjustable=True,
    )

    def all(self) -> dict[str, Limit]:
        return {field.name: getattr(self, field.name) for field in fields(self)}


LIMITS = Limits()
