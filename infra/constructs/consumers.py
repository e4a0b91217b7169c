"""Fan-out: for each enabled registry consumer, a filtered SNS subscription into its own queue
(with DLQs) drained by its own worker function. Nothing here names a consumer."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from aws_cdk import Acknowledgment as Ack
from aws_cdk import Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from aws_cdk.aws_lambda_event_sources import SqsEventSource
from constructs import Construct

from infra.config import Problem, SettingsError
from infra.constructs.events_topic import AlarmTopic, EventsTopic
from infra.constructs.journal import grant_items
from infra.constructs.lambda_function import METRIC_PERIOD, FunctionDefaults, PipelineFunction, nag_arn
from infra.constructs.secrets import grant_secret_value
from infra.environment import FunctionEnvironments
from infra.settings import PipelineSettings
from pipeline.registry import Consumer
from pipeline.retention import CONSUMER_QUEUE_RETENTION, DLQ_RETENTION


def duration(period: timedelta) -> Duration:
    return Duration.seconds(int(period.total_seconds()))


def subscription_filters(filter_policy: Mapping[str, list[Any]]) -> dict[str, sns.SubscriptionFilter]:
    """The registry's plain SNS filter policy as CDK filters, rule lists passed through unchanged
    (strings and `{"exists": bool}` rules render exactly as SNS expects them)."""
    return {key: sns.SubscriptionFilter(conditions=list(rules)) for key, rules in filter_policy.items()}


# What `bedrock_model_id` may name, as Converse takes it (its `modelId`):
# - a foundation model id, "<provider>.<model>[:<version>]": anthropic.claude-3-haiku-20240307-v1:0;
# - a system-defined (cross-Region) inference profile id, the foundation model id behind a
#   geography prefix: eu.anthropic.claude-3-haiku-20240307-v1:0. Prefixes per the Amazon Bedrock
#   User Guide, "Supported Regions and models for inference profiles"
#   (https://docs.aws.amazon.com/bedrock/latest/userguide/inference-profiles-support.html),
#   checked 2026-12-01: us, us-gov, eu, apac, jp, au, global;
# - an application inference profile ARN (arn:...:application-inference-profile/<id>).
INFERENCE_PROFILE_PREFIXES = ("us", "us-gov", "eu", "apac", "jp", "au", "global")
FOUNDATION_MODEL_ID = re.compile(r"^[a-z0-9-]+\.[A-Za-z0-9][A-Za-z0-9._:-]*$")
APPLICATION_PROFILE_ARN = re.compile(
    r"^arn:aws[a-z-]*:bedrock:[a-z0-9-]+:\d{12}:application-inference-profile/[a-z0-9]+$"
)


@dataclass(frozen=True)
class BedrockModel:
    """`bedrock_model_id`, read: what kind of id it is and the foundation model it runs, if known."""

    kind: Literal["foundation-model", "inference-profile", "application-inference-profile"]
    model_id: str
    foundation_model: str | None

    @classmethod
    def parse(cls, model_id: str) -> BedrockModel:
        if APPLICATION_PROFILE_ARN.match(model_id):
            return cls("application-inference-profile", model_id, None)
        prefix, _, rest = model_id.partition(".")
        if prefix in INFERENCE_PROFILE_PREFIXES and FOUNDATION_MODEL_ID.match(rest):
            return cls("inference-profile", model_id, rest)
        if prefix not in INFERENCE_PROFILE_PREFIXES and FOUNDATION_MODEL_ID.match(model_id):
            return cls("foundation-model", model_id, model_id)
        why = (
            "not a foundation model id (anthropic.claude-3-haiku-20240307-v1:0), an inference profile"
            f" id (one of {', '.join(p + '.' for p in INFERENCE_PROFILE_PREFIXES)} and a model id) or"
            " an application inference profile ARN"
        )
        raise SettingsError([Problem("bedrock_model_id", why, model_id)])


def bedrock_invoke_statements(scope: Construct, model: BedrockModel) -> list[iam.PolicyStatement]:
    """What Converse (`bedrock:InvokeModel`) is authorized against for this model.

    A foundation model: its ARN in this region. An inference profile: the profile, and the
    foundation model in every region the profile may route to, as AWS documents for cross-Region
    inference (inference-profiles-prereq.html: "you must also specify the foundation model in each
    Region associated with it"); the destination regions vary by profile and change, so the model
    is named in any region ("*" also matches the region-less ARN global profiles authorize against),
    but only through this profile (the `bedrock:InferenceProfileArn` condition), never directly.
    An application inference profile: the same, for whichever model it was created from.
    """
    stack = Stack.of(scope)
    invoke = ["bedrock:InvokeModel"]
    if model.kind == "foundation-model":
        arn = stack.format_arn(
            service="bedrock", account="", resource="foundation-model", resource_name=model.model_id
        )
        return [iam.PolicyStatement(actions=invoke, resources=[arn])]
    if model.kind == "inference-profile":
        profile_arn = stack.format_arn(
            service="bedrock", resource="inference-profile", resource_name=model.model_id
        )
    else:
        profile_arn = model.model_id
    foundation_models = stack.format_arn(
        service="bedrock",
        region="*",
        account="",
        resource="foundation-model",
        resource_name=model.foundation_model or "*",
    )
    return [
        iam.PolicyStatement(actions=invoke, resources=[profile_arn]),
        iam.PolicyStatement(
            actions=invoke,
            resources=[foundation_models],
            conditions={"StringEquals": {"bedrock:InferenceProfileArn": profile_arn}},
        ),
    ]


def _grant_bedrock_model(function: PipelineFunction, model_id: str) -> None:
    model = BedrockModel.parse(model_id)
    for statement in bedrock_invoke_statements(function, model):
        function.function.add_to_role_policy(statement)
        for resource in statement.resources:
            if "*" in resource:
                Validations.of(function.role).acknowledge(
                    Ack(
                        id=f"AwsSolutions-IAM5[Resource::{nag_arn(function, resource)}]",
                        reason="An inference profile routes Converse to the foundation model in "
                        "regions it chooses (AWS requires the model granted in each); this grant "
                        "holds only through the configured profile (bedrock:InferenceProfileArn).",
                    )
                )


# A consumer's `requires_setting` reaches its function as the env var SETTING.upper(); a
# setting listed here also names the AWS resource the function may use, granted by this hook.
SETTING_GRANTS: dict[str, Callable[[PipelineFunction, str], None]] = {
    "bedrock_model_id": _grant_bedrock_model,
}


# A FIFO queue in high-throughput mode: deduplication and throughput limits per message group
# (a chat), so chats never queue behind each other's quota.
FIFO_QUEUE_PROPS: dict[str, Any] = {
    "fifo": True,
    "content_based_deduplication": False,
    "deduplication_scope": sqs.DeduplicationScope.MESSAGE_GROUP,
    "fifo_throughput_limit": sqs.FifoThroughputLimit.PER_MESSAGE_GROUP_ID,
}


def secure_queue(scope: Construct, construct_id: str, *, fifo: bool = False, **props: Any) -> sqs.Queue:
    """An SSE (SQS-managed), TLS-only queue; `fifo`: a high-throughput FIFO queue."""
    return sqs.Queue(
        scope,
        construct_id,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        **(FIFO_QUEUE_PROPS if fifo else {}),
        **props,
    )


def dead_letter_queue(
    scope: Construct, construct_id: str, *, removal_policy: RemovalPolicy, fifo: bool = False
) -> sqs.Queue:
    """A `secure_queue` keeping messages for DLQ_RETENTION (the maximum; `pipeline.retention`
    counts it in the redelivery bound), removed with the stack only as the stack's removal_policy
    says: what failed stays inspectable and redrivable after a deletion gone wrong."""
    return secure_queue(
        scope,
        construct_id,
        fifo=fifo,
        retention_period=duration(DLQ_RETENTION),
        removal_policy=removal_policy,
    )


class ConsumerPipeline(Construct):
    """Queue + redrive DLQ + SNS delivery DLQ + subscription + worker for one consumer.

    An ordered consumer's queue and DLQ are FIFO (grouped by chat, in Telegram's order); the
    others' are standard queues, fed by the same FIFO topic. Every SNS delivery DLQ is FIFO:
    a FIFO topic's subscriptions dead-letter into FIFO queues."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        consumer: Consumer,
        settings: PipelineSettings,
        defaults: FunctionDefaults,
        environments: FunctionEnvironments,
        events: EventsTopic,
        alarm_topic: AlarmTopic,
        tables: Mapping[str, dynamodb.ITable],
        secrets: Mapping[str, secretsmanager.ISecret],
    ) -> None:
        """`alarm_topic`: an ordered consumer's worker publishes a notice per dead letter there."""
        super().__init__(scope, construct_id)
        self.consumer = consumer
        topic = events.topic
        # Messages the worker gave up on: after max_receive_count attempts, or at once for a
        # permanent error (the worker sends those here itself).
        self.dlq = dead_letter_queue(
            self, "Dlq", removal_policy=defaults.removal_policy, fifo=consumer.ordered
        )
        self.queue = secure_queue(
            self,
            "Queue",
            fifo=consumer.ordered,
            # Explicit, not SQS's default: the redelivery bound (pipeline.retention) counts it.
            retention_period=duration(CONSUMER_QUEUE_RETENTION),
            visibility_timeout=Duration.seconds(consumer.visibility_timeout_seconds),
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=self.dlq, max_receive_count=consumer.redrive_max_receive_count
            ),
        )
        # Messages SNS could not deliver into the queue at all (e.g. a broken queue policy).
        self.delivery_dlq = dead_letter_queue(
            self, "DeliveryDlq", removal_policy=defaults.removal_policy, fifo=True
        )
        topic.add_subscription(
            subscriptions.SqsSubscription(
                self.queue,
                raw_message_delivery=True,
                dead_letter_queue=self.delivery_dlq,
                filter_policy=subscription_filters(consumer.filter_policy),
            )
        )
        Validations.of(self.delivery_dlq).acknowledge(
            Ack(
                id="AwsSolutions-SQS3",
                reason="This queue is itself a dead-letter queue: the RedrivePolicy of the "
                "consumer's SNS subscription, which cdk-nag does not recognise as DLQ use.",
            )
        )

        self.worker = PipelineFunction(
            self,
            "Worker",
            defaults=defaults,
            handler=consumer.handler,
            service_name=consumer.name,
            description=consumer.description,
            timeout_seconds=consumer.timeout_seconds,
            memory_mb=consumer.memory_mb,
            snapstart=consumer.name in settings.snapstart,
            environment=environments.worker(
                consumer,
                queue_url=self.queue.queue_url,
                dlq_url=self.dlq.queue_url,
                tables={name: table.table_name for name, table in tables.items()},
                secrets={name: secret.secret_arn for name, secret in secrets.items()},
                topic_arn=topic.topic_arn if consumer.topic_publisher else None,
                alarm_topic_arn=alarm_topic.topic.topic_arn if consumer.ordered else None,
            ),
        )
        self._grant(settings, tables, secrets)
        if consumer.topic_publisher:
            events.grant_publish(self.worker.function)
        if consumer.ordered:
            alarm_topic.grant_publish(self.worker.function)
        self.worker.invoked.add_event_source(
            SqsEventSource(
                self.queue,
                batch_size=consumer.batch_size,
                # Never for an ordered consumer: the registry refuses a window on a FIFO queue.
                max_batching_window=(
                    Duration.seconds(consumer.batching_window_seconds)
                    if consumer.batching_window_seconds
                    else None
                ),
                report_batch_item_failures=True,
                max_concurrency=consumer.max_concurrency,
            )
        )

    def emitted_metric(
        self, name: str, *, statistic: str = "Sum", period: Duration = METRIC_PERIOD
    ) -> cloudwatch.Metric:
        """A metric the worker emits (`pipeline.worker` adds the `consumer` dimension to all)."""
        return self.worker.emitted_metric(
            name, statistic=statistic, period=period, dimensions={"consumer": self.consumer.name}
        )

    def _grant(
        self,
        settings: PipelineSettings,
        tables: Mapping[str, dynamodb.ITable],
        secrets: Mapping[str, secretsmanager.ISecret],
    ) -> None:
        """Its own queue (consume, via the event source, and change visibility to back off; send, to
        re-send a paused record, for an unordered consumer with `account_causes`), its own DLQ
        (send), on each of its tables the item actions the registry says it calls, its secrets
        (and, for a consumer that publishes, the events topic; for an ordered one, the alarm
        topic: granted by the caller); nothing else."""
        function = self.worker.function
        self.queue.grant(function, "sqs:ChangeMessageVisibility")
        if self.consumer.account_causes and not self.consumer.ordered:
            # A record paused for an account refusal is re-sent to its own queue, delayed (`pipeline.pause`).
            self.queue.grant(function, "sqs:SendMessage")
        self.dlq.grant(function, "sqs:SendMessage")
        for name, actions in sorted(self.consumer.tables.items()):
            grant_items(tables[name], function, *sorted(actions))
        for name in self.consumer.used_secrets(settings.registry_settings()):
            grant_secret_value(secrets[name], function)
        setting = self.consumer.requires_setting
        if setting in SETTING_GRANTS:
            SETTING_GRANTS[setting](self.worker, str(settings.registry_settings()[setting]))
