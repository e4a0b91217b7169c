"""The catch-up sweep of the connected CRMs' histories (`pipeline.crm.sweep`): one function on an
EventBridge schedule (`crm_sweep_minutes`), absent when no CRM is connected.

Its role: read the connected CRMs' API secrets, get and put its cursor items in the journal, and
publish to the events topic; nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from infra.config import PipelineSettings
from infra.constructs.events_topic import EventsTopic
from infra.constructs.journal import grant_items
from infra.constructs.lambda_function import FunctionDefaults, PipelineFunction
from infra.constructs.secrets import grant_secret_value
from infra.environment import CRM_SWEEP, FunctionEnvironments

# The cursor items: read at the start of a run, written at its end.
CURSOR_ITEM_ACTIONS = ("dynamodb:GetItem", "dynamodb:PutItem")


class CrmSweep(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: PipelineSettings,
        defaults: FunctionDefaults,
        environments: FunctionEnvironments,
        events_topic: EventsTopic,
        journal: dynamodb.ITable,
        secrets: Mapping[str, secretsmanager.ISecret],
    ) -> None:
        super().__init__(scope, construct_id)
        crms = environments.swept_crms()
        api_secrets = {f"{crm}_api": secrets[f"{crm}_api"] for crm in crms}
        self.function = PipelineFunction(
            self,
            "Sweep",
            defaults=defaults,
            handler=CRM_SWEEP.handler,
            service_name=CRM_SWEEP.service_name,
            description="Reads the connected CRMs' stage histories: a transition whose webhook "
            "never came still gets its SMS",
            environment=environments.crm_sweep(
                topic_arn=events_topic.topic.topic_arn,
                journal_table=journal.table_name,
                secrets={name: secret.secret_arn for name, secret in api_secrets.items()},
            ),
            timeout_seconds=CRM_SWEEP.timeout_seconds,
            memory_mb=CRM_SWEEP.memory_mb,
        )
        grant_items(journal, self.function.function, *CURSOR_ITEM_ACTIONS)
        events_topic.grant_publish(self.function.function)
        for secret in api_secrets.values():
            grant_secret_value(secret, self.function.function)
        # A failed run is not retried: the next scheduled run starts from the same cursor.
        self.function.function.configure_async_invoke(retry_attempts=0)
        self.schedule = events.Rule(
            self,
            "Schedule",
            description="Runs the CRM history sweep",
            schedule=events.Schedule.rate(Duration.minutes(settings.crm_sweep_minutes)),
            targets=[targets.LambdaFunction(self.function.function, retry_attempts=0)],
        )
