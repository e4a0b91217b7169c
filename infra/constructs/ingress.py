"""HTTP API -> webhook function: the only public entry point of the pipeline."""

from __future__ import annotations

import json

import jsii
from aws_cdk import Acknowledgment as Ack
from aws_cdk import Duration, Stack, Validations
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk.aws_apigatewayv2_integrations import HttpLambdaIntegration
from constructs import Construct

from infra.constructs.events_topic import EventsTopic
from infra.constructs.lambda_function import FunctionDefaults, PipelineFunction
from infra.constructs.secrets import grant_secret_value
from infra.environment import (
    AMOCRM_PATH,
    BITRIX24_PATH,
    CRM_PATH,
    CRM_TOKEN_PATH,
    SMS_INBOUND_PATH,
    TELEGRAM_PATH,
    WEBHOOK,
    FunctionEnvironments,
    webhook_paths,
)
from infra.settings import PipelineSettings, cdk_log_retention, cdk_removal_policy

# The webhook's rejection metric: EventsRejected{service=webhook, source, reason} (webhook.ingest).
REJECTED_METRIC = "EventsRejected"
UNAUTHORIZED_REASON = "unauthorized"
# A CRM event refused only for its customer's phone (webhook.ingest.INVALID_PHONE_REASON).
INVALID_PHONE_REASON = "invalid_phone"
# The metric `source` of each authenticated route's refusals (webhook.app.route_source).
PATH_SOURCES = {
    TELEGRAM_PATH: "telegram",
    CRM_PATH: "crm",
    CRM_TOKEN_PATH: "crm",
    BITRIX24_PATH: "bitrix24",
    AMOCRM_PATH: "amocrm",
    SMS_INBOUND_PATH: "sms",
}

# HTTP API access log fields ($context variables of HTTP APIs). No headers, no body and no path:
# the Telegram secret and the CRM token travel in headers, the CRM token also in the path of
# `POST /crm/events/{token}` (the route key shows the `{token}` placeholder, never the value),
# and updates carry personal data; amoCRM's `POST /crm/amocrm/{token}` carries the token too.
ACCESS_LOG_FIELDS = {
    "requestId": "$context.requestId",
    "requestTime": "$context.requestTime",
    "ip": "$context.identity.sourceIp",
    "userAgent": "$context.identity.userAgent",
    "httpMethod": "$context.httpMethod",
    "routeKey": "$context.routeKey",
    "status": "$context.status",
    "protocol": "$context.protocol",
    "responseLength": "$context.responseLength",
    "responseLatency": "$context.responseLatency",
    "integrationStatus": "$context.integrationStatus",
    "integrationLatency": "$context.integrationLatency",
    "integrationError": "$context.integrationErrorMessage",
    "error": "$context.error.message",
}


@jsii.implements(apigwv2.IAccessLogSettings)
class _AccessLogSettings:
    """IAccessLogSettings is a jsii interface (not a struct), so Python implements it as a class."""

    def __init__(self, destination: apigwv2.IAccessLogDestination, log_format: apigw.AccessLogFormat) -> None:
        self._destination = destination
        self._format = log_format

    @property
    def destination(self) -> apigwv2.IAccessLogDestination:
        return self._destination

    @property
    def format(self) -> apigw.AccessLogFormat:
        return self._format


class Ingress(Construct):
    """`POST /telegram/webhook`, `POST /crm/events` and `POST /crm/events/{token}` (and, where
    connected, `POST /crm/bitrix24` and `POST /crm/amocrm/{token}`) on a throttled,
    access-logged HTTP API."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: PipelineSettings,
        defaults: FunctionDefaults,
        environments: FunctionEnvironments,
        events: EventsTopic,
        telegram_secret: secretsmanager.ISecret,
        crm_secret: secretsmanager.ISecret,
        crm_token_secret: secretsmanager.ISecret | None = None,
        bitrix24_app_token_secret: secretsmanager.ISecret | None = None,
        sms_inbound_token_secret: secretsmanager.ISecret | None = None,
        journal: dynamodb.ITable | None = None,
    ) -> None:
        """`sms_inbound_token_secret` and `journal` where the API has the inbound SMS route."""
        super().__init__(scope, construct_id)
        self.paths = webhook_paths(settings)
        self.webhook = PipelineFunction(
            self,
            "Webhook",
            defaults=defaults,
            handler=WEBHOOK.handler,
            service_name=WEBHOOK.service_name,
            description="Verifies Telegram/CRM webhook calls and publishes them to the events topic",
            timeout_seconds=WEBHOOK.timeout_seconds,
            memory_mb=WEBHOOK.memory_mb,
            snapstart=WEBHOOK.service_name in settings.snapstart,
            environment=environments.webhook(
                topic_arn=events.topic.topic_arn,
                telegram_secret_id=telegram_secret.secret_arn,
                crm_secret_id=crm_secret.secret_arn,
                crm_token_secret_id=crm_token_secret.secret_arn if crm_token_secret else None,
                bitrix24_app_token_secret_id=(
                    bitrix24_app_token_secret.secret_arn if bitrix24_app_token_secret else None
                ),
                sms_inbound_token_secret_id=(
                    sms_inbound_token_secret.secret_arn if sms_inbound_token_secret else None
                ),
                journal_table=journal.table_name if journal and sms_inbound_token_secret else None,
            ),
        )
        webhook_fn = self.webhook.function
        events.grant_publish(webhook_fn)
        grant_secret_value(telegram_secret, webhook_fn)
        grant_secret_value(crm_secret, webhook_fn)
        if crm_token_secret is not None:
            grant_secret_value(crm_token_secret, webhook_fn)
        if bitrix24_app_token_secret is not None:
            grant_secret_value(bitrix24_app_token_secret, webhook_fn)
        if sms_inbound_token_secret is not None and journal is not None:
            grant_secret_value(sms_inbound_token_secret, webhook_fn)
            # The suppression list (`pipeline.sms.endstates`): a STOP puts a number's item, a
            # START deletes it; nothing else of the journal is read or written.
            iam.Grant.add_to_principal(
                grantee=webhook_fn,
                actions=["dynamodb:PutItem", "dynamodb:DeleteItem"],
                resource_arns=[journal.table_arn],
            )

        self.api = apigwv2.HttpApi(
            self,
            "Api",
            # The stage's stack name (CDK would name every stage's API "Api"); renaming keeps the API.
            api_name=Stack.of(self).stack_name,
            description="Telegram webhook and CRM notifications",
            create_default_stage=False,
        )
        self.access_logs = logs.LogGroup(
            self,
            "AccessLogs",
            retention=cdk_log_retention(settings),
            removal_policy=cdk_removal_policy(settings),
        )
        self.stage = self.api.add_stage(
            "DefaultStage",
            stage_name="$default",
            auto_deploy=True,
            throttle=apigwv2.ThrottleSettings(
                rate_limit=settings.api_rate_limit, burst_limit=settings.api_burst_limit
            ),
            access_log_settings=_AccessLogSettings(
                apigwv2.LogGroupLogDestination(self.access_logs),
                apigw.AccessLogFormat.custom(json.dumps(ACCESS_LOG_FIELDS)),
            ),
        )
        integration = HttpLambdaIntegration(
            "Webhook", self.webhook.invoked, payload_format_version=apigwv2.PayloadFormatVersion.VERSION_2_0
        )
        for path in self.paths:
            self.api.add_routes(path=path, methods=[apigwv2.HttpMethod.POST], integration=integration)
        Validations.of(self.api).acknowledge(
            Ack(
                id="AwsSolutions-APIG4",
                reason="Telegram and the CRM cannot sign requests for an API Gateway authorizer; "
                "the webhook authenticates each call itself (Telegram secret_token header, CRM "
                "HMAC signature or static token, constant-time comparison) before anything is published.",
            )
        )

    @property
    def authenticated_sources(self) -> list[str]:
        """The metric sources of the routes this API has, in route order."""
        return list(dict.fromkeys(PATH_SOURCES[path] for path in self.paths))

    def rejected_metric(self, source: str, reason: str) -> cloudwatch.Metric:
        return self.webhook.emitted_metric(REJECTED_METRIC, dimensions={"source": source, "reason": reason})

    def unauthorized_requests(self) -> cloudwatch.MathExpression:
        """Requests refused for a missing or wrong secret/signature/token, on every route together.

        HTTP APIs publish no per-status metric, so this is the webhook's own count."""
        metrics = {
            source: self.rejected_metric(source, UNAUTHORIZED_REASON) for source in self.authenticated_sources
        }
        return cloudwatch.MathExpression(
            expression=" + ".join(f"FILL({name}, 0)" for name in metrics),
            using_metrics=dict(metrics),
            label="Unauthorized requests",
            period=Duration.minutes(5),
        )

    def invalid_phone_events(self) -> cloudwatch.Metric:
        """CRM events refused (422) because `customer.phone` is not a valid number."""
        return self.rejected_metric("crm", INVALID_PHONE_REASON)

    @property
    def webhook_url(self) -> str:
        return f"{self.api.api_endpoint}{TELEGRAM_PATH}"

    @property
    def crm_url(self) -> str:
        return f"{self.api.api_endpoint}{CRM_PATH}"

    @property
    def bitrix24_url(self) -> str | None:
        """The handler URL of the portal's outgoing webhook, where Bitrix24 is connected."""
        return f"{self.api.api_endpoint}{BITRIX24_PATH}" if BITRIX24_PATH in self.paths else None

    @property
    def sms_inbound_url(self) -> str | None:
        """The HTTP SMS gateway's inbound-message callback, `{token}` to be replaced with the
        SmsInboundTokenSecretId value."""
        return f"{self.api.api_endpoint}{SMS_INBOUND_PATH}" if SMS_INBOUND_PATH in self.paths else None

    @property
    def amocrm_url(self) -> str | None:
        """amoCRM's webhook URL, `{token}` to be replaced with the crm_token secret's value."""
        return f"{self.api.api_endpoint}{AMOCRM_PATH}" if AMOCRM_PATH in self.paths else None
