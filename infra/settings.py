"""The CDK's view of the deployment settings: context read from a construct tree, and the CDK
enums (log retention, Lambda log level, removal policy) the plain values stand for.

The settings themselves (keys, defaults, validation) are `infra.config.PipelineSettings`, which
imports no CDK so the local runtime can read them too; it is re-exported here.
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Node

from infra.config import LOG_RETENTION_DAYS, TELEGRAM_CIDRS, LogLevel, PipelineSettings

__all__ = [
    "LAMBDA_LOG_LEVELS",
    "RETENTION_DAYS",
    "TELEGRAM_CIDRS",
    "UNLEVELLED_LINE_LEVEL",
    "PipelineSettings",
    "cdk_log_level",
    "cdk_log_retention",
    "cdk_removal_policy",
    "settings_from_node",
]

# CloudWatch Logs retention periods (days -> CDK enum); the keys are exactly LOG_RETENTION_DAYS.
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
if set(RETENTION_DAYS) != set(LOG_RETENTION_DAYS):
    raise RuntimeError("RETENTION_DAYS must map exactly infra.config.LOG_RETENTION_DAYS")

# Powertools (Python logging) level -> Lambda's application log level of the same name.
LAMBDA_LOG_LEVELS: dict[LogLevel, lambda_.ApplicationLogLevel] = {
    "DEBUG": lambda_.ApplicationLogLevel.DEBUG,
    "INFO": lambda_.ApplicationLogLevel.INFO,
    "WARNING": lambda_.ApplicationLogLevel.WARN,
    "ERROR": lambda_.ApplicationLogLevel.ERROR,
    "CRITICAL": lambda_.ApplicationLogLevel.FATAL,
}


def settings_from_node(node: Node) -> PipelineSettings:
    """Read the construct tree's whole context (cdk.json's and `-c` values): absent keys keep
    defaults, the CDK's own keys are ignored, an unknown key like this app's is refused."""
    return PipelineSettings.from_context(node.get_all_context())


def cdk_log_retention(settings: PipelineSettings) -> logs.RetentionDays:
    return RETENTION_DAYS[settings.log_retention_days]


# The level Lambda's JSON-log filter gives a stdout line without a valid "level" key: "If the
# level value field is invalid or missing, Lambda assigns the log output the level INFO"
# (https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-log-level.html).
# Powertools' metric (EMF) lines carry no level, so an application log level above this one
# would drop every custom metric: no alarm on them could fire, the dashboard would be empty.
UNLEVELLED_LINE_LEVEL: LogLevel = "INFO"


def cdk_log_level(settings: PipelineSettings) -> lambda_.ApplicationLogLevel:
    """Lambda's application log level: `log_level` when it is at least as verbose as INFO, else
    INFO, so Lambda never drops EMF lines. Powertools filters the function's own logs at
    `log_level` (POWERTOOLS_LOG_LEVEL, applied by `pipeline.observability.service_logger`)."""
    levels = list(LAMBDA_LOG_LEVELS)  # most verbose first
    verbose = min(levels.index(settings.log_level), levels.index(UNLEVELLED_LINE_LEVEL))
    return LAMBDA_LOG_LEVELS[levels[verbose]]


def cdk_removal_policy(settings: PipelineSettings) -> RemovalPolicy:
    return RemovalPolicy.RETAIN if settings.removal_policy == "retain" else RemovalPolicy.DESTROY
