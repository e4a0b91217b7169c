"""Fan-out: for each enabled registry consumer, a filtered SNS subscription into its own queue
(with DLQs) drained by its own worker function. Nothing here names a consumer."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from aws_cdk import Acknowledgment as Ack
from aws_cdk import Duration, Stack, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from aws_cdk.aws_lambda_event_sources import SqsEventSource
from constructs import Construct

from infra.constructs.journal import ITEM_READ_WRITE_ACTIONS, JOURNAL, grant_items
from infra.constructs.lambda_function import METRIC_PERIOD, FunctionDefaults, PipelineFunction
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


def _grant_bedrock_model(function: lambda_.Function, model_id: str) -> None:
    model_arn = Stack.of(function).format_arn(
        service="bedrock", account="", resource="foundation-model", resource_name=model_id
    )
    function.add_to_role_policy(iam.PolicyStatement(actions=["bedrock:InvokeModel"], resources=[model_arn]))


# A consumer's `requires_setting` reaches its function as the env var SETTING.upper(); a
# setting listed here also names the AWS resource the function may use, granted by this hook.
SETTING_GRANTS: dict[str, Callable[[lambda_.Function, str], None]] = {
    "bedrock_model_id": _grant_bedrock_model,
}


def secure_queue(
    scope: Construct, construct_id: str, *, dead_letter: bool = False, **props: Any
) -> sqs.Queue:
    """An SSE (SQS-managed), TLS-only queue; a dead-letter one keeps messages for DLQ_RETENTION
    (the maximum; `pipeline.retention` counts it in the redelivery bound)."""
    if dead_letter:
        props["retention_period"] = duration(DLQ_RETENTION)
    return sqs.Queue(
        scope, construct_id, encryption=sqs.QueueEncryption.SQS_MANAGED, enforce_ssl=True, **props
    )


class ConsumerPipeline(Construct):
    """Queue + redrive DLQ + SNS delivery DLQ + subscription + worker for one consumer."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        consumer: Consumer,
        settings: PipelineSettings,
        defaults: FunctionDefaults,
        environments: FunctionEnvironments,
        topic: sns.ITopic,
        tables: Mapping[str, dynamodb.ITable],
        secrets: Mapping[str, secretsmanager.ISecret],
    ) -> None:
        super().__init__(scope, construct_id)
        self.consumer = consumer
        # Messages the worker gave up on: after max_receive_count deliveries, or at once for a
        # permanent error (the worker sends those here itself).
        self.dlq = secure_queue(self, "Dlq", dead_letter=True)
        self.queue = secure_queue(
            self,
            "Queue",
            # Explicit, not SQS's default: the redelivery bound (pipeline.retention) counts it.
            retention_period=duration(CONSUMER_QUEUE_RETENTION),
            visibility_timeout=Duration.seconds(consumer.visibility_timeout_seconds),
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=self.dlq, max_receive_count=consumer.retry.max_receive_count
            ),
        )
        # Messages SNS could not deliver into the queue at all (e.g. a broken queue policy).
        self.delivery_dlq = secure_queue(self, "DeliveryDlq", dead_letter=True)
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
            environment=environments.worker(
                consumer,
                queue_url=self.queue.queue_url,
                dlq_url=self.dlq.queue_url,
                tables={name: table.table_name for name, table in tables.items()},
                secrets={name: secret.secret_arn for name, secret in secrets.items()},
            ),
        )
        self._grant(settings, tables, secrets)
        self.worker.function.add_event_source(
            SqsEventSource(
                self.queue,
                batch_size=consumer.batch_size,
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
        """Its own queue (consume, via the event source, and change visibility to back off), its
        own DLQ (send), its tables and secrets; nothing else."""
        function = self.worker.function
        self.queue.grant(function, "sqs:ChangeMessageVisibility")
        self.dlq.grant_send_messages(function)
        for name in sorted({JOURNAL, *self.consumer.tables}):
            grant_items(tables[name], function, *ITEM_READ_WRITE_ACTIONS)
        for name in self.consumer.secrets:
            secrets[name].grant_read(function)
        setting = self.consumer.requires_setting
        if setting in SETTING_GRANTS:
            SETTING_GRANTS[setting](function, str(settings.registry_settings()[setting]))
