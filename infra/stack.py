"""The pipeline stack: composes the per-concern constructs and exports what operators need."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from infra.constructs.consumers import ConsumerPipeline
from infra.constructs.crm_sweep import CrmSweep
from infra.constructs.events_topic import AlarmTopic, EventsTopic
from infra.constructs.ingress import Ingress
from infra.constructs.journal import DataTables
from infra.constructs.lambda_function import FunctionDefaults
from infra.constructs.layers import PipelineLayers, validates_crm_events
from infra.constructs.monitoring import Monitoring
from infra.constructs.secrets import ConsumerSecrets, WebhookSecrets
from infra.constructs.sms import SmsSupport
from infra.environment import SMS_CONSUMER, FunctionEnvironments, sms_inbound_route
from infra.naming import pascal_case
from infra.outputs import OutputKey
from infra.settings import PipelineSettings, cdk_removal_policy
from infra.version import release_version
from pipeline.registry import Consumer, enabled


class PipelineStack(Stack):
    """API -> webhook -> SNS -> one queue + worker per enabled consumer of `pipeline.registry`."""

    def __init__(
        self, scope: Construct, construct_id: str, *, settings: PipelineSettings, **kwargs: Any
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            description=f"Telegram bot and CRM event pipeline (API Gateway, SNS, SQS, Lambda), stage "
            f"{settings.stage}",
            **kwargs,
        )
        self.settings = settings
        self.consumers: tuple[Consumer, ...] = enabled(settings.registry_settings())

        layers = PipelineLayers(self, "Layers", powertools_version=settings.powertools_version)
        defaults = FunctionDefaults.create(settings, layers.all)
        # Every function's environment (`infra.environment`, shared with the local runtime).
        environments = FunctionEnvironments(settings, stack_name=self.stack_name)
        self.events = EventsTopic(
            self, "Events", removal_policy=cdk_removal_policy(settings), tracing=settings.tracing
        )
        # Before the consumers: the ordered ones publish a notice per dead letter to it.
        self.alarm_topic = AlarmTopic(
            self,
            "Alarms",
            key=self.events.key,
            removal_policy=cdk_removal_policy(settings),
            alarm_email=settings.alarm_email,
        )
        self.tables = DataTables(
            self,
            "Tables",
            names=[table for consumer in self.consumers for table in consumer.tables],
            removal_policy=cdk_removal_policy(settings),
        )
        self.webhook_secrets = WebhookSecrets(
            self,
            "WebhookSecrets",
            removal_policy=cdk_removal_policy(settings),
            crm_token=settings.crm_token_needed,
            bitrix24=bool(settings.bitrix24_stages),
            sms_inbound=sms_inbound_route(settings),
        )
        self.ingress = Ingress(
            self,
            "Ingress",
            settings=settings,
            defaults=defaults,
            environments=environments,
            events=self.events,
            telegram_secret=self.webhook_secrets.telegram,
            crm_secret=self.webhook_secrets.crm,
            crm_token_secret=self.webhook_secrets.crm_token,
            bitrix24_app_token_secret=self.webhook_secrets.bitrix24_app_token,
            sms_inbound_token_secret=self.webhook_secrets.sms_inbound_token,
            journal=self.tables.journal,
        )
        self.consumer_secrets = ConsumerSecrets(
            self,
            "ConsumerSecrets",
            names=[
                secret
                for consumer in self.consumers
                for secret in consumer.used_secrets(settings.registry_settings())
            ],
            removal_policy=cdk_removal_policy(settings),
        )
        self.pipelines: dict[str, ConsumerPipeline] = {
            consumer.name: ConsumerPipeline(
                self,
                f"Consumer{pascal_case(consumer.name)}",
                consumer=consumer,
                settings=settings,
                defaults=defaults,
                environments=environments,
                events=self.events,
                alarm_topic=self.alarm_topic,
                tables=self.tables.by_name,
                secrets=self.consumer_secrets.by_name,
            )
            for consumer in self.consumers
        }
        self.sms: SmsSupport | None = None
        if SMS_CONSUMER in self.pipelines:
            self.sms = SmsSupport(
                self,
                "Sms",
                settings=settings,
                defaults=defaults,
                environments=environments,
                pipeline=self.pipelines[SMS_CONSUMER],
                journal=self.tables.journal,
                secrets=self.consumer_secrets.by_name,
                key=self.events.key,
            )
        # The catch-up sweep of the connected CRMs' histories (none connected: no sweep).
        self.crm_sweep: CrmSweep | None = None
        if environments.swept_crms():
            self.crm_sweep = CrmSweep(
                self,
                "CrmSweep",
                settings=settings,
                defaults=defaults,
                environments=environments,
                events_topic=self.events,
                journal=self.tables.journal,
                secrets=self.consumer_secrets.by_name,
            )
        # The webhook and the consumers of CRM events validate `CrmEvent`, whose phone check needs
        # `phonenumbers` (in no other layer); no other function gets it.
        self.phonenumbers_functions = [
            self.ingress.webhook,
            *(p.worker for p in self.pipelines.values() if validates_crm_events(p.consumer)),
        ]
        for function in self.phonenumbers_functions:
            function.function.add_layers(layers.phonenumbers)
        # A consumer's own requirements (the bot's python-telegram-bot): its layer, its alone.
        for pipeline in self.pipelines.values():
            own = layers.requirements_of(pipeline.consumer)
            if own is not None:
                pipeline.worker.function.add_layers(own)
        self.monitoring = Monitoring(
            self,
            "Monitoring",
            settings=settings,
            ingress=self.ingress,
            pipelines=self.pipelines,
            sms=self.sms,
            crm_sweep=self.crm_sweep,
            alarm_topic=self.alarm_topic,
        )
        self._outputs()

    def _outputs(self) -> None:
        def output(name: str, value: str, description: str) -> None:
            CfnOutput(self, name, value=value, description=description)

        output(OutputKey.WEBHOOK_URL, self.ingress.webhook_url, "Pass to Telegram setWebhook as `url`")
        output(OutputKey.CRM_URL, self.ingress.crm_url, "Where the CRM posts signed notifications")
        output(
            OutputKey.EVENTS_TOPIC_ARN, self.events.topic.topic_arn, "SNS topic every event is published to"
        )
        output(
            OutputKey.TELEGRAM_SECRET_ID,
            self.webhook_secrets.telegram.secret_arn,
            "Secret holding the setWebhook `secret_token`",
        )
        output(
            OutputKey.CRM_SECRET_ID,
            self.webhook_secrets.crm.secret_arn,
            "Secret holding the CRM HMAC signing key",
        )
        if self.webhook_secrets.crm_token is not None:
            output(
                OutputKey.CRM_TOKEN_SECRET_ID,
                self.webhook_secrets.crm_token.secret_arn,
                "Secret holding the CRM static token (crm_auth token or signature_or_token, amoCRM)",
            )
        if self.ingress.bitrix24_url and self.webhook_secrets.bitrix24_app_token:
            output(
                OutputKey.BITRIX24_URL,
                self.ingress.bitrix24_url,
                "Bitrix24 outgoing webhook: paste as the handler URL (events ONCRMDEALADD, ONCRMDEALUPDATE)",
            )
            output(
                OutputKey.BITRIX24_APP_TOKEN_SECRET_ID,
                self.webhook_secrets.bitrix24_app_token.secret_arn,
                "Fill in: the application token Bitrix24 shows for the outgoing webhook",
            )
        if self.ingress.sms_inbound_url and self.webhook_secrets.sms_inbound_token:
            output(
                OutputKey.SMS_INBOUND_URL,
                self.ingress.sms_inbound_url,
                "HTTP SMS gateway's inbound-message callback: replace {token} with the "
                "SmsInboundTokenSecretId value",
            )
            output(
                OutputKey.SMS_INBOUND_TOKEN_SECRET_ID,
                self.webhook_secrets.sms_inbound_token.secret_arn,
                "Secret holding the token of the inbound SMS callback URL",
            )
        if self.ingress.amocrm_url:
            output(
                OutputKey.AMOCRM_URL,
                self.ingress.amocrm_url,
                "amoCRM webhook URL: replace {token} with the CrmTokenSecretId value",
            )
        for name, table in self.tables.by_name.items():
            output(OutputKey.table_name(name), table.table_name, f"DynamoDB table '{name}'")
        for name, secret in self.consumer_secrets.by_name.items():
            output(OutputKey.secret_id(name), secret.secret_arn, f"Fill in: {name} (see its description)")
        for name, pipeline in self.pipelines.items():
            output(OutputKey.queue_url(name), pipeline.queue.queue_url, f"Queue of the {name} consumer")
            output(
                OutputKey.dlq_url(name), pipeline.dlq.queue_url, f"Dead-letter queue of the {name} consumer"
            )
            output(
                OutputKey.delivery_dlq_url(name),
                pipeline.delivery_dlq.queue_url,
                f"Messages SNS failed to deliver to the {name} queue",
            )
        output(
            OutputKey.ALARM_TOPIC_ARN,
            self.monitoring.alarm_topic.topic.topic_arn,
            "Alarm notifications (subscribe here)",
        )
        output(
            OutputKey.DASHBOARD_NAME,
            self.monitoring.dashboard.dashboard_name,
            "CloudWatch dashboard of the pipeline",
        )
        output(OutputKey.VERSION, release_version(), "The release deployed (CHANGELOG.md; bin/ops doctor)")
        if self.sms:
            output(
                OutputKey.SMS_RECONCILER_NAME,
                self.sms.reconciler.function.function_name,
                "Scheduled SMS reconciler",
            )
        if self.sms and self.sms.delivery_events:
            output(
                OutputKey.SMS_EVENTS_TOPIC_ARN,
                self.sms.delivery_events.topic.topic_arn,
                "SNS destination for End User Messaging SMS delivery events (of the configuration set)",
            )
            output(
                OutputKey.SMS_CONFIGURATION_SET,
                self.sms.environment["SMS_CONFIGURATION_SET"],
                "Configuration set every SMS is sent with; its event destination must be SmsEventsTopicArn",
            )
            for role, queue in self.sms.delivery_events_dlqs.items():
                output(
                    OutputKey.sms_events_dlq_url(role),
                    queue.queue_url,
                    f"SMS delivery events {role}: inspect and redrive",
                )
