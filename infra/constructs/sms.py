"""What the `sms` consumer needs beyond its queue and worker (see `pipeline.sms`):

- its gateway: `sms-voice:SendTextMessage` for AWS End User Messaging (the default), or the
  `sms_gateway` secret for an HTTP gateway;
- the reconciler, on an EventBridge schedule, which settles `unknown` outcomes from the journal's
  `by_state` index and sends what only it can send (with the same gateway access as the worker);
- with End User Messaging, delivery events: a configuration set (created here unless one is
  given) whose event destination is an encrypted SNS topic, drained by `sms_events` into the
  journal, with DLQs for what SNS or the function could not handle.

All three functions read the same SMS settings (`pipeline.sms.settings`), built by
`infra.environment` from the registry entry and the deployment settings, validated at synth time.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Acknowledgment as Ack
from aws_cdk import ArnFormat, Duration, Stack, Token, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_smsvoice as smsvoice
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.config import Problem, SettingsError
from infra.constructs.consumers import ConsumerPipeline, dead_letter_queue
from infra.constructs.events_topic import EncryptedTopic
from infra.constructs.journal import grant_index_query, grant_items
from infra.constructs.lambda_function import METRIC_PERIOD, FunctionDefaults, PipelineFunction, nag_arn
from infra.constructs.secrets import grant_secret_value
from infra.environment import RECONCILER, SMS_CONFIGURATION_SET_NAME_MAX, SMS_EVENTS, FunctionEnvironments
from infra.naming import stack_scoped_name
from infra.settings import PipelineSettings
from pipeline.sms.gateways import HTTP_SECRET
from pipeline.sms.journal import BY_STATE_INDEX

# Every SMS event type; `pipeline.sms.delivery` keeps what it understands.
DELIVERY_EVENT_TYPES = ["TEXT_ALL"]
# The journal calls both make (pipeline.sms.journal: get, conditional updates), and nothing else;
# the reconciler also queries the `by_state` index.
JOURNAL_ITEM_ACTIONS = ("dynamodb:GetItem", "dynamodb:UpdateItem")


def _sms_voice_arn(scope: Construct, resource: str, name: str) -> str:
    return Stack.of(scope).format_arn(service="sms-voice", resource=resource, resource_name=name)


def configuration_set_arn(scope: Construct, name_or_arn: str) -> str:
    if name_or_arn.startswith("arn:"):
        return name_or_arn
    return _sms_voice_arn(scope, "configuration-set", name_or_arn)


def origination_identity_arns(scope: Construct, identity: str | None) -> list[str]:
    """What SendTextMessage may send from: exactly the configured identity, or, when none is
    configured (End User Messaging then picks one), the account's identities in this region."""
    if identity is None:
        return [_sms_voice_arn(scope, kind, "*") for kind in ("phone-number", "pool", "sender-id")]
    if identity.startswith("arn:"):
        return [identity]
    for kind in ("phone-number", "pool"):
        if identity.startswith(f"{kind}-"):
            return [_sms_voice_arn(scope, kind, identity)]
    # A sender id's ARN ends in the destination's ISO country code, which varies per message.
    return [_sms_voice_arn(scope, "sender-id", f"{identity}/*")]


# The resource types `sms-voice:SendTextMessage` is authorized against, per the Service
# Authorization Reference, "Actions, resources, and condition keys for AWS End User Messaging SMS
# and Voice V2" (https://docs.aws.amazon.com/service-authorization/latest/reference/
# list_awsendusermessagingsmsandvoicev2.html), checked 2026-12-01: configuration-set, opt-out-list,
# phone-number, pool, protect-configuration, sender-id. A grant names nothing else.
SEND_TEXT_MESSAGE_RESOURCE_TYPES = (
    "configuration-set",
    "opt-out-list",
    "phone-number",
    "pool",
    "protect-configuration",
    "sender-id",
)


def send_text_message_resources(
    scope: Construct, identity: str | None, configuration_set_arn: str
) -> list[str]:
    """Resources SendTextMessage is authorized against: the origination identity, the
    configuration set, the identity's opt-out list and the protect configuration that applies
    (the configuration set's or the account default, once the account uses protect
    configurations). Which opt-out list and protect configuration apply is configured outside this
    stack, so those two are any of this account's in this region."""
    return [
        *origination_identity_arns(scope, identity),
        configuration_set_arn,
        _sms_voice_arn(scope, "opt-out-list", "*"),
        _sms_voice_arn(scope, "protect-configuration", "*"),
    ]


# Regions with End User Messaging SMS: both the `sms-voice` API and the AWS::SMSVOICE::*
# CloudFormation resources. Checked 2026-12-01 against botocore 1.44.8 data/endpoints.json
# (service "sms-voice") and cfn-lint 1.58.0's per-region schemas (AWS::SMSVOICE::ConfigurationSet),
# listing the regions in both (me-south-1 has the API but not the resources, so it is not here;
# tests/infra/test_infra_sms.py keeps this list within both).
# fmt: off
END_USER_MESSAGING_REGIONS = frozenset({
    "af-south-1", "ap-east-2", "ap-northeast-1", "ap-northeast-2", "ap-northeast-3", "ap-south-1",
    "ap-south-2", "ap-southeast-1", "ap-southeast-2", "ap-southeast-3", "ap-southeast-4",
    "ap-southeast-6", "ca-central-1", "ca-west-1", "eu-central-1", "eu-central-2", "eu-north-1",
    "eu-south-1", "eu-south-2", "eu-west-1", "eu-west-2", "eu-west-3", "il-central-1",
    "me-central-1", "mx-central-1", "sa-east-1", "us-east-1", "us-east-2",
    "us-west-1", "us-west-2", "us-gov-east-1", "us-gov-west-1", "eusc-de-east-1",
})
# fmt: on


def check_end_user_messaging_region(scope: Construct) -> None:
    """Refuse, at synth, a stack in a region without End User Messaging SMS (CloudFormation would
    otherwise fail the deploy halfway). The region is the stack's env (CDK_DEFAULT_REGION, which
    the CDK CLI sets from the AWS profile); an environment-agnostic synth (no region known) is not
    checked: its template deploys anywhere and CloudFormation refuses AWS::SMSVOICE::* there."""
    region = Stack.of(scope).region
    if not Token.is_unresolved(region) and region not in END_USER_MESSAGING_REGIONS:
        why = (
            f"end_user_messaging is not available in region {region}; deploy with -c sms_gateway=http"
            " -c sms_http_base_url=<your gateway>, or to a region with AWS End User Messaging SMS"
        )
        raise SettingsError([Problem("sms_gateway", why)])


class SmsSupport(Construct):
    """Gateway access, reconciler and (End User Messaging) delivery events of the sms consumer."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: PipelineSettings,
        defaults: FunctionDefaults,
        environments: FunctionEnvironments,
        pipeline: ConsumerPipeline,
        journal: dynamodb.Table,
        secrets: Mapping[str, secretsmanager.ISecret],
        key: kms.Key,
    ) -> None:
        super().__init__(scope, construct_id)
        self.settings = settings
        self.key = key
        self.pipeline = pipeline
        self.uses_end_user_messaging = settings.sms_gateway == "end_user_messaging"
        if self.uses_end_user_messaging:
            check_end_user_messaging_region(self)
        self.configuration_set: smsvoice.CfnConfigurationSet | None = None
        self.opt_out_list: smsvoice.CfnOptOutList | None = None
        self.delivery_events: EncryptedTopic | None = None
        self.delivery_events_handler: PipelineFunction | None = None
        self.delivery_events_dlqs: dict[str, sqs.Queue] = {}

        self.environments = environments
        # What the worker (its environment is built with these), the reconciler and `sms_events` read.
        self.environment = environments.sms(pipeline.consumer)
        # Named, not generated, so its ARN is known without a reference: the topic's policy names
        # it, and the configuration set is created only after that policy exists.
        configuration_set_name = environments.sms_configuration_set

        self.reconciler = self._reconciler(defaults, journal, secrets)
        if configuration_set_name is not None:
            set_arn = configuration_set_arn(self, configuration_set_name)
            # The reconciler sends too (operator resends, orphans, proven-not-received resends).
            for sender in (pipeline.worker, self.reconciler):
                self._grant_send_text_message(sender, set_arn)
            self._delivery_events(defaults, journal, configuration_set_name, set_arn)

    # -- gateway -----------------------------------------------------------------------------------
    def _grant_send_text_message(self, function: PipelineFunction, set_arn: str) -> None:
        resources = send_text_message_resources(self, self.settings.sms_origination_identity, set_arn)
        function.function.add_to_role_policy(
            iam.PolicyStatement(actions=["sms-voice:SendTextMessage"], resources=resources)
        )
        for resource in resources:
            if resource.endswith("*"):
                Validations.of(function.role).acknowledge(
                    Ack(
                        id=f"AwsSolutions-IAM5[Resource::{nag_arn(self, resource)}]",
                        reason="SendTextMessage is authorized against every resource a send "
                        "involves; this one is chosen by End User Messaging or configured outside "
                        "the stack (no origination identity configured, a sender id's country, "
                        "the identity's opt-out list, the protect configuration), so it is "
                        "limited to this account and region, not named.",
                    )
                )

    # -- reconciler -------------------------------------------------------------------------------
    def _reconciler(
        self,
        defaults: FunctionDefaults,
        journal: dynamodb.Table,
        secrets: Mapping[str, secretsmanager.ISecret],
    ) -> PipelineFunction:
        reconciler = PipelineFunction(
            self,
            "Reconciler",
            defaults=defaults,
            handler=RECONCILER.handler,
            service_name=RECONCILER.service_name,
            description="Settles unknown SMS outcomes from the journal: asks the gateway, never guesses",
            environment=self.environments.reconciler(
                self.pipeline.consumer,
                journal_table=journal.table_name,
                secrets={name: secret.secret_arn for name, secret in secrets.items()},
            ),
            timeout_seconds=RECONCILER.timeout_seconds,
            memory_mb=RECONCILER.memory_mb,
        )
        grant_items(journal, reconciler.function, *JOURNAL_ITEM_ACTIONS)
        grant_index_query(journal, reconciler.function, BY_STATE_INDEX)
        if not self.uses_end_user_messaging:
            # The HTTP gateway can look a send up and take a resend, with its bearer token.
            grant_secret_value(secrets[HTTP_SECRET], reconciler.function)
        # A failed run is not retried: the next scheduled run does the same work (Errors alarm).
        reconciler.function.configure_async_invoke(retry_attempts=0)
        self.schedule = events.Rule(
            self,
            "Schedule",
            description="Runs the SMS reconciler",
            schedule=events.Schedule.rate(Duration.minutes(self.settings.sms_reconcile_minutes)),
            targets=[targets.LambdaFunction(reconciler.function, retry_attempts=0)],
        )
        return reconciler

    # -- delivery events --------------------------------------------------------------------------
    def _delivery_events(
        self,
        defaults: FunctionDefaults,
        journal: dynamodb.Table,
        configuration_set_name: str,
        set_arn: str,
    ) -> None:
        stack = Stack.of(self)
        topic = EncryptedTopic(
            self,
            "DeliveryEvents",
            display_name="SMS delivery events",
            key_description="Encrypts End User Messaging SMS delivery events at rest",
            removal_policy=defaults.removal_policy,
            key=self.key,
        )
        # The topic only for this configuration set; the key as AWS documents it for sms-voice.
        topic.allow_service_publish(
            sid="AllowEndUserMessagingEvents",
            service="sms-voice.amazonaws.com",
            source_arn=set_arn,
            key_conditions={
                "StringEquals": {"aws:SourceAccount": stack.account},
                "ArnLike": {
                    "aws:SourceArn": stack.format_arn(
                        service="sms-voice", resource="*", arn_format=ArnFormat.NO_RESOURCE_NAME
                    )
                },
            },
        )
        self.delivery_events = topic

        handler = PipelineFunction(
            self,
            "DeliveryEventsHandler",
            defaults=defaults,
            handler=SMS_EVENTS.handler,
            service_name=SMS_EVENTS.service_name,
            description="Records End User Messaging SMS delivery events in the journal; closes unknowns",
            environment=self.environments.sms_events(
                self.pipeline.consumer, journal_table=journal.table_name
            ),
            timeout_seconds=SMS_EVENTS.timeout_seconds,
            memory_mb=SMS_EVENTS.memory_mb,
        )
        grant_items(journal, handler.function, *JOURNAL_ITEM_ACTIONS)
        self.delivery_events_handler = handler
        # Invocations that failed after Lambda's two retries (e.g. an unreadable event)...
        failed = dead_letter_queue(self, "FailedEventsDlq", removal_policy=defaults.removal_policy)
        handler.function.configure_async_invoke(
            on_failure=destinations.SqsDestination(failed), retry_attempts=2
        )
        # ...and events SNS could not hand to the function at all.
        undelivered = dead_letter_queue(self, "UndeliveredEventsDlq", removal_policy=defaults.removal_policy)
        topic.topic.add_subscription(
            subscriptions.LambdaSubscription(handler.function, dead_letter_queue=undelivered)
        )
        self.delivery_events_dlqs = {"failed": failed, "undelivered": undelivered}
        for queue, role in (
            (failed, "the function's on-failure destination"),
            (undelivered, "the SNS subscription's RedrivePolicy"),
        ):
            Validations.of(queue).acknowledge(
                Ack(
                    id="AwsSolutions-SQS3",
                    reason=f"This queue is itself a dead-letter queue: {role}, which cdk-nag does "
                    "not recognise as DLQ use.",
                )
            )

        if self.settings.sms_configuration_set is None:
            self.configuration_set = smsvoice.CfnConfigurationSet(
                self,
                "ConfigurationSet",
                configuration_set_name=configuration_set_name,
                event_destinations=[
                    smsvoice.CfnConfigurationSet.EventDestinationProperty(
                        enabled=True,
                        event_destination_name="pipeline-delivery-events",
                        matching_event_types=DELIVERY_EVENT_TYPES,
                        sns_destination=smsvoice.CfnConfigurationSet.SnsDestinationProperty(
                            topic_arn=topic.topic.topic_arn
                        ),
                    )
                ],
            )
            # The stack's own opt-out list (`pipeline.sms.endstates`): AWS handles STOP/START
            # replies to an identity using it and refuses later sends to a listed number
            # (ConflictException DESTINATION_PHONE_NUMBER_OPTED_OUT: the SMS ends `suppressed`).
            # The origination identity is the account's, not the stack's: associate the list with
            # it (docs/sms-endstates.md); until then the account's `Default` list does the same.
            self.opt_out_list = smsvoice.CfnOptOutList(
                self,
                "OptOutList",
                opt_out_list_name=stack_scoped_name(
                    Stack.of(self).stack_name, "-sms-opt-outs", SMS_CONFIGURATION_SET_NAME_MAX
                ),
            )
            # The topic's policy and key policy must admit End User Messaging before it is wired,
            # and the worker must not send with the set before it exists.
            self.configuration_set.node.add_dependency(topic.key, topic.topic.node.find_child("Policy"))
            self.pipeline.worker.function.node.add_dependency(self.configuration_set)

    # -- metrics ----------------------------------------------------------------------------------
    def send_outcome_metric(self, name: str, period: Duration = METRIC_PERIOD) -> cloudwatch.IMetric:
        """SmsAccepted / SmsRefused / SmsFailed / SmsUnknown (`pipeline.sms.service.send_once`)
        of every function that sends: the worker and the reconciler (operator resends, orphans,
        proven-not-received resends), each period filled with 0 where one sent nothing."""
        # Ids unique per metric, as several of these may sit in one expression.
        worker, reconciler = f"{name.lower()}_worker", f"{name.lower()}_reconciler"
        return cloudwatch.MathExpression(
            expression=f"FILL({worker}, 0) + FILL({reconciler}, 0)",
            using_metrics={
                worker: self.pipeline.emitted_metric(name, period=period),
                reconciler: self.reconciler.emitted_metric(name, period=period),
            },
            label=name,
            period=period,
        )

    def reconciler_metric(self, name: str, statistic: str = "Maximum") -> cloudwatch.Metric:
        """The reconciler's per-run gauges and counts (`pipeline.sms.reconcile`)."""
        return self.reconciler.emitted_metric(name, statistic=statistic)

    @property
    def functions(self) -> list[PipelineFunction]:
        return [self.reconciler, *([self.delivery_events_handler] if self.delivery_events_handler else [])]
