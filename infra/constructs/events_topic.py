"""SNS topics encrypted with the stack's one customer-managed KMS key: the events topic (which
creates the key) and the operational ones (alarms, SMS delivery events), which share it.

One key, not one per topic: the topics belong to one stack and one operator, no principal is
allowed to decrypt anything through the key outside SNS (publishers get `kms:GenerateDataKey`
and `kms:Decrypt` to publish, and reading a topic needs an SNS subscription, granted per topic),
and each AWS service that publishes is named in the key policy with the same conditions it had
on a key of its own. A key costs $1 a month, more after each rotation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import ArnFormat, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct


class EncryptedTopic(Construct):
    """KMS-encrypted (customer-managed key, yearly rotation: `key`, else its own), TLS-only topic.

    A customer-managed key, not alias/aws/sns: AWS services that publish (CloudWatch alarms, End
    User Messaging) must be named in the key policy, which an AWS-managed key cannot be given.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        display_name: str,
        key_description: str,
        removal_policy: RemovalPolicy,
        key: kms.Key | None = None,
        tracing: bool = False,
        fifo: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        # The stack's key when given (every topic but the events one), else a key of its own.
        self.key = key or kms.Key(
            self,
            "Key",
            description=key_description,
            enable_key_rotation=True,
            removal_policy=removal_policy,
        )
        self.topic = sns.Topic(
            self,
            "Topic",
            display_name=display_name,
            master_key=self.key,
            enforce_ssl=True,
            tracing_config=sns.TracingConfig.ACTIVE if tracing else None,
            # FIFO (the events topic): every publish names its deduplication id
            # (pipeline.envelope.fifo_keys); high throughput, SNS's FIFO limits per message group.
            fifo=fifo or None,
            topic_name=f"{Stack.of(self).stack_name}-events.fifo" if fifo else None,
            content_based_deduplication=False if fifo else None,
            fifo_throughput_scope=sns.FifoThroughputScope.MESSAGE_GROUP if fifo else None,
        )

    def grant_publish(self, grantee: iam.IGrantable) -> None:
        """sns:Publish on the topic and exactly the two KMS actions publishing to it needs.

        (`Topic.grant_publish` would grant `kms:GenerateDataKey*`, a wildcard action.)
        """
        iam.Grant.add_to_principal(
            grantee=grantee, actions=["sns:Publish"], resource_arns=[self.topic.topic_arn]
        )
        self.key.grant(grantee, "kms:Decrypt", "kms:GenerateDataKey")

    def allow_service_publish(
        self,
        *,
        sid: str,
        service: str,
        source_arn: str,
        key_conditions: Mapping[str, Any] | None = None,
    ) -> None:
        """Let an AWS service publish here for this account's `source_arn` only (confused-deputy
        safe), and use the key for it under `key_conditions`."""
        principal = iam.ServicePrincipal(service)
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid=sid,
                principals=[principal],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions={
                    "StringEquals": {"aws:SourceAccount": Stack.of(self).account},
                    "ArnLike": {"aws:SourceArn": source_arn},
                },
            )
        )
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid=sid,
                principals=[principal],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],
                conditions=dict(key_conditions) if key_conditions else None,
            )
        )


class EventsTopic(EncryptedTopic):
    """The topic every event is published to; X-Ray-traced with the `tracing` setting; SNS may use
    the key to deliver. Its key is the stack's: the alarm and SMS delivery-event topics are
    encrypted with it too.

    A FIFO topic (`<stack>-events.fifo`), always: it keeps each chat's (message group's) order
    for the ordered consumers' FIFO queues, drops a resend of the same event within five minutes
    for every subscriber, and feeds the other consumers' standard queues alike. One code path:
    the ordered consumers need it, and it costs the unordered path little (bench/cost.py)."""

    def __init__(
        self, scope: Construct, construct_id: str, *, removal_policy: RemovalPolicy, tracing: bool = False
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            display_name="Telegram and CRM events",
            key_description="Encrypts the pipeline's SNS topics at rest: events, alarms, SMS delivery events",
            removal_policy=removal_policy,
            tracing=tracing,
            fifo=True,
        )
        # SNS itself uses the key when delivering to subscriptions (of every topic it encrypts) and
        # when AWS services publish on a principal's behalf; scoped to this account so no other
        # account's topic can use it.
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowSnsDeliveryFromThisAccount",
                principals=[iam.ServicePrincipal("sns.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],
                conditions={"StringEquals": {"aws:SourceAccount": Stack.of(self).account}},
            )
        )


class AlarmTopic(EncryptedTopic):
    """Where every alarm notifies (on ALARM and on OK), and where ordered consumers' workers
    publish a notice per dead letter naming its chat (which no alarm can). E-mail when
    `alarm_email` is set. Made before the consumers, which publish to it, and watched by
    `infra.constructs.monitoring`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        key: kms.Key,
        removal_policy: RemovalPolicy,
        alarm_email: str | None = None,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            display_name="Telegram/CRM pipeline alarms",
            key_description="Encrypts the pipeline's alarm notifications at rest",
            removal_policy=removal_policy,
            key=key,
        )
        # This account's alarms only. The key statement has no condition, as AWS documents
        # CloudWatch's use of a topic's key: by principal alone. The stack's key encrypts only
        # its own topics, and CloudWatch only publishes alarm notifications with it.
        self.allow_service_publish(
            sid="AllowCloudWatchAlarms",
            service="cloudwatch.amazonaws.com",
            source_arn=Stack.of(self).format_arn(
                service="cloudwatch",
                resource="alarm",
                resource_name="*",
                arn_format=ArnFormat.COLON_RESOURCE_NAME,
            ),
        )
        if alarm_email:
            self.topic.add_subscription(subscriptions.EmailSubscription(alarm_email))
