"""The stack's AWS resources, created in a moto server from the same registry the CDK stack reads.

`create_resources()` makes the events topic (FIFO, as in the stack), the alarm topic (ordered
consumers publish a notice per dead letter there; locally no alarm does), one queue + DLQ (redrive
with the consumer's `redrive_max_receive_count`; FIFO, high-throughput, for an ordered consumer)
+ raw-delivery, filtered subscription per enabled consumer, the tables and
the secrets with local values; with End User Messaging also the SMS delivery-events topic and,
standing for `sms_events`' Lambda subscription, a queue subscribed to it (`local.sns_subscription`);
and returns their names, URLs and ARNs. `LocalResources` then
gives each function the environment the stack gives it in AWS, from the same builder
(`infra.environment`) and the local deployment settings (`local.overlay.local_deployment`).
The end-to-end tests call `create_resources()` too, against their own moto server.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from infra.config import PipelineSettings
from infra.environment import (
    BITRIX24_APP_TOKEN_SECRET,
    CRM_SECRET,
    CRM_SWEEP,
    CRM_TOKEN_SECRET,
    JOURNAL,
    RECONCILER,
    SMS_CONSUMER,
    SMS_EVENTS,
    SMS_INBOUND_SECRET,
    TELEGRAM_SECRET,
    WEBHOOK,
    FunctionEnvironments,
    webhook_secret_names,
)
from infra.tables import TABLE_KEYS, TTL_ATTRIBUTE, TableKeys
from local.overlay import local_deployment, local_overlay
from local.settings import LocalSettings
from local.sns_subscription import ASYNC_ATTEMPTS
from local.worker_process import LOCAL_CONSUMER_ENV, consumer_json
from pipeline.registry import CONSUMERS, Consumer, enabled
from pipeline.retention import CONSUMER_QUEUE_RETENTION, DLQ_RETENTION

# The events topic as `infra.constructs.events_topic.EventsTopic` makes it: FIFO, every publish
# naming its deduplication id, throughput per message group. (moto keeps no topic-level
# deduplication: the SNS fault proxy in front of it, `local.fakes.sns`, does.)
EVENTS_TOPIC = "events.fifo"
# The alarm topic (`infra.constructs.events_topic.AlarmTopic`; CloudFormation names it there).
ALARM_TOPIC = "alarms"
EVENTS_TOPIC_ATTRIBUTES = {
    "FifoTopic": "true",
    "ContentBasedDeduplication": "false",
    "FifoThroughputScope": "MessageGroup",
}
# An ordered consumer's queue and DLQ, as `infra.constructs.consumers.FIFO_QUEUE_PROPS`.
FIFO_QUEUE_ATTRIBUTES = {
    "FifoQueue": "true",
    "ContentBasedDeduplication": "false",
    "DeduplicationScope": "messageGroup",
    "FifoThroughputLimit": "perMessageGroupId",
}


@dataclass(frozen=True)
class QueuePair:
    url: str
    arn: str
    dlq_url: str
    dlq_arn: str


@dataclass(frozen=True)
class DeliveryEvents:
    """End User Messaging's SMS events: the configuration set's SNS event destination, and the
    queue subscribed to it in place of `sms_events`' Lambda subscription (failed invocations end
    in `queue.dlq_url`, as the function's on-failure destination)."""

    configuration_set: str
    topic_arn: str
    subscription_arn: str
    queue: QueuePair


@dataclass(frozen=True)
class LocalResources:
    settings: LocalSettings
    # The deployment the local runtime runs: `local.overlay.local_deployment(settings, fakes)`.
    deployment: PipelineSettings
    consumers: tuple[Consumer, ...]
    topic_arn: str
    alarm_topic_arn: str
    queues: dict[str, QueuePair]
    tables: dict[str, str]  # logical name -> table name
    secrets: dict[str, str]  # logical name -> secret ARN
    fakes: dict[str, str] = field(default_factory=dict)  # fake name -> base URL
    # With End User Messaging (and the `sms` consumer): where its delivery events go.
    delivery_events: DeliveryEvents | None = None

    @property
    def environments(self) -> FunctionEnvironments:
        return FunctionEnvironments(self.deployment, stack_name=self.deployment.stage_stack_name)

    def webhook_environment(self) -> dict[str, str]:
        """The webhook's environment variables, as the stack sets them (`infra.environment`)."""
        return self.environments.webhook(
            topic_arn=self.topic_arn,
            telegram_secret_id=self.secrets[TELEGRAM_SECRET],
            crm_secret_id=self.secrets[CRM_SECRET],
            crm_token_secret_id=self.secrets.get(CRM_TOKEN_SECRET),
            bitrix24_app_token_secret_id=self.secrets.get(BITRIX24_APP_TOKEN_SECRET),
            sms_inbound_token_secret_id=self.secrets.get(SMS_INBOUND_SECRET),
            journal_table=self.tables[JOURNAL],
        )

    def consumer_environment(self, consumer: Consumer) -> dict[str, str]:
        """A worker's environment variables, as the stack sets them (`infra.environment`)."""
        queue = self.queues[consumer.name]
        return self.environments.worker(
            consumer,
            queue_url=queue.url,
            dlq_url=queue.dlq_url,
            tables=self.tables,
            secrets=self.secrets,
            topic_arn=self.topic_arn,
            alarm_topic_arn=self.alarm_topic_arn,
        )

    @property
    def sms_consumer(self) -> Consumer | None:
        """The `sms` consumer when it runs: the SMS reconciler exists with it, as in the stack."""
        return next((c for c in self.consumers if c.name == SMS_CONSUMER), None)

    def stack_environments(self) -> dict[str, dict[str, str]]:
        """Every function the local runtime runs, by name, with the environment the stack gives it
        (`sms_events` exists only with End User Messaging, as in the stack)."""
        environments = {WEBHOOK.service_name: self.webhook_environment()}
        environments.update({c.name: self.consumer_environment(c) for c in self.consumers})
        if self.sms_consumer is not None:
            environments[RECONCILER.service_name] = self.environments.reconciler(
                self.sms_consumer, journal_table=self.tables[JOURNAL], secrets=self.secrets
            )
            if self.delivery_events is not None:
                environments[SMS_EVENTS.service_name] = self.environments.sms_events(
                    self.sms_consumer, journal_table=self.tables[JOURNAL]
                )
        # The sweep reads the CRMs whose consumer runs (a runtime started with fewer consumers has
        # neither their secrets nor anyone to look at what the sweep would publish).
        running = {consumer.name for consumer in self.consumers}
        swept = [crm for crm in self.environments.swept_crms() if crm in running]
        if swept:
            environments[CRM_SWEEP.service_name] = self.environments.crm_sweep(
                topic_arn=self.topic_arn, journal_table=self.tables[JOURNAL], secrets=self.secrets, crms=swept
            )
        return environments

    def local_environments(self, aws_endpoint: str) -> dict[str, dict[str, str]]:
        """What the local runtime gives each function besides Lambda's own variables: the stack's
        environment plus the local overlay (`local.overlay`), by function name; for a consumer
        other than the registry's entry of its name, its declaration (`LOCAL_CONSUMER_ENV`)."""
        environments = {
            name: {
                **environment,
                **local_overlay(name, environment, aws_endpoint=aws_endpoint, fakes=self.fakes),
            }
            for name, environment in self.stack_environments().items()
        }
        for consumer in self.consumers:
            if consumer not in CONSUMERS:
                environments[consumer.name][LOCAL_CONSUMER_ENV] = consumer_json(consumer)
        return environments

    def describe(self) -> dict[str, Any]:
        """Names, URLs and ARNs for `.local/stack.json`."""
        described: dict[str, Any] = {
            "topic_arn": self.topic_arn,
            "alarm_topic_arn": self.alarm_topic_arn,
            "queues": {
                name: {"url": queue.url, "dlq_url": queue.dlq_url}
                for name, queue in sorted(self.queues.items())
            },
            "tables": dict(sorted(self.tables.items())),
            "secrets": dict(sorted(self.secrets.items())),
        }
        if self.delivery_events is not None:
            described["sms_delivery_events"] = {
                "configuration_set": self.delivery_events.configuration_set,
                "topic_arn": self.delivery_events.topic_arn,
                "queue_url": self.delivery_events.queue.url,
                "failed_events_queue_url": self.delivery_events.queue.dlq_url,
            }
        return described


SecretValue = Callable[[LocalSettings, Mapping[str, str]], str]

# Local value per logical secret name; `fakes` maps a fake's name to its base URL.
LOCAL_SECRET_VALUES: dict[str, SecretValue] = {
    "telegram": lambda settings, fakes: settings.telegram_secret,
    "crm": lambda settings, fakes: settings.crm_signing_key,
    "crm_token": lambda settings, fakes: settings.crm_token,
    "crm_api": lambda settings, fakes: json.dumps(
        {"kind": "webhook", "url": f"{fakes['crm']}/leads", "auth_header": settings.crm_auth_header}
    ),
    "bitrix24_app_token": lambda settings, fakes: settings.bitrix24_application_token,
    "bitrix24_api": lambda settings, fakes: json.dumps(
        {"url": f"{fakes['bitrix24']}/rest/1/{settings.bitrix24_webhook_code}/"}
    ),
    "amocrm_api": lambda settings, fakes: json.dumps(
        {"base_url": fakes["amocrm"], "token": settings.amocrm_token}
    ),
    "telegram_bot_token": lambda settings, fakes: settings.telegram_bot_token,
    "sms_gateway": lambda settings, fakes: settings.sms_gateway_token,
    "sms_inbound_token": lambda settings, fakes: settings.sms_inbound_token,
}


def secret_names(consumers: tuple[Consumer, ...], deployment: PipelineSettings) -> list[str]:
    """The webhook's secrets (the CRM token and Bitrix24's only where used, as in the stack) and the
    consumers'."""
    webhook = webhook_secret_names(deployment)
    used = (name for consumer in consumers for name in consumer.used_secrets(deployment.registry_settings()))
    return sorted({*webhook, *used})


def table_names(consumers: tuple[Consumer, ...]) -> list[str]:
    return sorted({JOURNAL, *(name for consumer in consumers for name in consumer.tables)})


def create_resources(
    client: Callable[[str], Any],
    settings: LocalSettings,
    fakes: Mapping[str, str],
    consumers: tuple[Consumer, ...] | None = None,
) -> LocalResources:
    """Create everything through `client(service)` (boto3 clients on a moto server).

    `fakes` maps fake names to base URLs (secrets and the SMS gateway point at them); `consumers`
    defaults to the registry's consumers enabled under the local deployment settings.
    """
    deployment = local_deployment(settings, fakes)
    chosen = enabled(deployment.registry_settings(), CONSUMERS) if consumers is None else consumers
    unknown_secrets = [name for name in secret_names(chosen, deployment) if name not in LOCAL_SECRET_VALUES]
    if unknown_secrets:
        raise ValueError(
            f"the registry names secrets without a local value: {unknown_secrets} (see LOCAL_SECRET_VALUES)"
        )
    unknown_tables = [name for name in table_names(chosen) if name not in TABLE_KEYS]
    if unknown_tables:
        raise ValueError(
            f"the registry names tables with no key schema: {unknown_tables}; declare them in infra/tables.py"
        )

    prefix = deployment.stage_stack_name
    sns = client("sns")
    sqs = client("sqs")
    topic_arn = sns.create_topic(Name=f"{prefix}-{EVENTS_TOPIC}", Attributes=EVENTS_TOPIC_ATTRIBUTES)[
        "TopicArn"
    ]
    alarm_topic_arn = sns.create_topic(Name=f"{prefix}-{ALARM_TOPIC}")["TopicArn"]
    queues = {consumer.name: _consumer_queues(sqs, sns, topic_arn, prefix, consumer) for consumer in chosen}
    dynamodb = client("dynamodb")
    tables = {name: _table(dynamodb, f"{prefix}-{name}", TABLE_KEYS[name]) for name in table_names(chosen)}
    secretsmanager = client("secretsmanager")
    secrets = {
        name: secretsmanager.create_secret(
            Name=f"{prefix}/{name}", SecretString=LOCAL_SECRET_VALUES[name](settings, fakes)
        )["ARN"]
        for name in secret_names(chosen, deployment)
    }
    environments = FunctionEnvironments(deployment, stack_name=prefix)
    configuration_set = environments.sms_configuration_set
    delivery_events = None
    if configuration_set is not None and any(c.name == SMS_CONSUMER for c in chosen):
        delivery_events = _delivery_events(sqs, sns, prefix, configuration_set)
    return LocalResources(
        settings=settings,
        deployment=deployment,
        consumers=chosen,
        topic_arn=topic_arn,
        alarm_topic_arn=alarm_topic_arn,
        queues=queues,
        tables=tables,
        secrets=secrets,
        fakes=dict(fakes),
        delivery_events=delivery_events,
    )


def _queue(sqs: Any, name: str, attributes: dict[str, str]) -> tuple[str, str]:
    url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return url, arn


def _seconds(period: timedelta) -> str:
    return str(int(period.total_seconds()))


def queue_name(prefix: str, consumer: Consumer, suffix: str = "") -> str:
    """`<stack>-<consumer><suffix>`, with `.fifo` for an ordered consumer's (FIFO) queues."""
    return f"{prefix}-{consumer.name}{suffix}{'.fifo' if consumer.ordered else ''}"


def _consumer_queues(sqs: Any, sns: Any, topic_arn: str, prefix: str, consumer: Consumer) -> QueuePair:
    """Retention periods as the stack sets them (`pipeline.retention`)."""
    fifo = FIFO_QUEUE_ATTRIBUTES if consumer.ordered else {}
    dlq_url, dlq_arn = _queue(
        sqs, queue_name(prefix, consumer, "-dlq"), {**fifo, "MessageRetentionPeriod": _seconds(DLQ_RETENTION)}
    )
    redrive = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": consumer.redrive_max_receive_count}
    url, arn = _queue(
        sqs,
        queue_name(prefix, consumer),
        {
            **fifo,
            "MessageRetentionPeriod": _seconds(CONSUMER_QUEUE_RETENTION),
            "VisibilityTimeout": str(consumer.visibility_timeout_seconds),
            "RedrivePolicy": json.dumps(redrive),
        },
    )
    sns.subscribe(
        TopicArn=topic_arn,
        Protocol="sqs",
        Endpoint=arn,
        Attributes={
            "RawMessageDelivery": "true",
            "FilterPolicyScope": "MessageAttributes",
            "FilterPolicy": json.dumps(consumer.filter_policy),
        },
    )
    return QueuePair(url=url, arn=arn, dlq_url=dlq_url, dlq_arn=dlq_arn)


def _delivery_events(sqs: Any, sns: Any, prefix: str, configuration_set: str) -> DeliveryEvents:
    """The configuration set's event destination topic (`infra.constructs.sms`), and the queue
    that stands for `sms_events`' subscription: not raw, so each body is the SNS envelope the
    Lambda record is made of; a visibility timeout of the function's timeout; after Lambda's
    asynchronous attempts, the failed-events queue."""
    topic_arn = sns.create_topic(Name=f"{prefix}-sms-delivery-events")["TopicArn"]
    dlq_url, dlq_arn = _queue(
        sqs, f"{prefix}-{SMS_EVENTS.service_name}-failed", {"MessageRetentionPeriod": _seconds(DLQ_RETENTION)}
    )
    redrive = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": ASYNC_ATTEMPTS}
    url, arn = _queue(
        sqs,
        f"{prefix}-{SMS_EVENTS.service_name}-subscription",
        {"VisibilityTimeout": str(SMS_EVENTS.timeout_seconds), "RedrivePolicy": json.dumps(redrive)},
    )
    subscription = sns.subscribe(TopicArn=topic_arn, Protocol="sqs", Endpoint=arn, ReturnSubscriptionArn=True)
    return DeliveryEvents(
        configuration_set=configuration_set,
        topic_arn=topic_arn,
        subscription_arn=subscription["SubscriptionArn"],
        queue=QueuePair(url=url, arn=arn, dlq_url=dlq_url, dlq_arn=dlq_arn),
    )


def _table(dynamodb: Any, name: str, schema: TableKeys) -> str:
    keys = [(schema.partition, "HASH")] + ([(schema.sort, "RANGE")] if schema.sort else [])
    request: dict[str, Any] = {
        "TableName": name,
        "BillingMode": "PAY_PER_REQUEST",
        "KeySchema": [{"AttributeName": key, "KeyType": kind} for key, kind in keys],
        "AttributeDefinitions": [
            {"AttributeName": key, "AttributeType": "S"} for key in schema.key_attributes
        ],
    }
    if schema.indexes:
        request["GlobalSecondaryIndexes"] = [
            {
                "IndexName": index.name,
                "KeySchema": [
                    {"AttributeName": index.partition, "KeyType": "HASH"},
                    *([{"AttributeName": index.sort, "KeyType": "RANGE"}] if index.sort else []),
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
            for index in schema.indexes
        ]
    dynamodb.create_table(**request)
    dynamodb.update_time_to_live(
        TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE}
    )
    return name
