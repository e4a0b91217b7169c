"""The one way this app builds a Lambda function: the webhook and every consumer worker use it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aws_cdk import Acknowledgment as Ack
from aws_cdk import Annotations, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.config import PipelineSettings
from infra.constructs.layers import (
    ARCHITECTURE,
    RUNTIME,
    TASK_ROOT,
    compiled_code,
    functions_derived,
    functions_generated,
)
from infra.limits import LIMITS
from infra.paths import FUNCTIONS_DIR
from infra.settings import cdk_log_level, cdk_log_retention, cdk_removal_policy

# The alias a SnapStart function's trigger invokes (the `snapstart` setting).
SNAPSTART_ALIAS = "live"
# The period alarms and the dashboard look at metrics over, unless they say otherwise.
METRIC_PERIOD = Duration.minutes(5)


@dataclass(frozen=True)
class FunctionDefaults:
    """What every function shares: code asset, layers, logging, retention and tracing."""

    code: lambda_.Code
    layers: Sequence[lambda_.ILayerVersion]
    log_retention: logs.RetentionDays
    removal_policy: RemovalPolicy
    lambda_log_level: lambda_.ApplicationLogLevel
    # X-Ray active tracing (the `tracing` setting); off, no tracing config and no X-Ray grant.
    tracing: bool = False

    @classmethod
    def create(cls, settings: PipelineSettings, layers: Sequence[lambda_.ILayerVersion]) -> FunctionDefaults:
        return cls(
            # One asset for all functions: the handler string picks the package inside it.
            # With bytecode, as Lambda's read-only /var/task could never cache it.
            code=compiled_code(
                FUNCTIONS_DIR, TASK_ROOT, functions_generated(FUNCTIONS_DIR), functions_derived()
            ),
            layers=tuple(layers),
            log_retention=cdk_log_retention(settings),
            removal_policy=cdk_removal_policy(settings),
            lambda_log_level=cdk_log_level(settings),
            tracing=settings.tracing,
        )


class PipelineFunction(Construct):
    """A python3.13/arm64 function with JSON logs in its own log group and a dedicated role that
    starts with nothing but writing to that log group (and, with the `tracing` setting, X-Ray
    active tracing and the two X-Ray write actions it needs).

    Callers add only the grants the function needs, so every role stays least-privilege. The
    environment is the whole of it, as `infra.environment` builds it (Powertools' too).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        defaults: FunctionDefaults,
        handler: str,
        service_name: str,
        description: str,
        environment: Mapping[str, str],
        timeout_seconds: int,
        memory_mb: int,
        snapstart: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        if environment.get("POWERTOOLS_SERVICE_NAME") != service_name:
            raise ValueError(
                f"{construct_id}: the environment must name the Powertools service {service_name!r}"
            )
        size = sum(len(name.encode()) + len(value.encode()) for name, value in environment.items())
        if size > LIMITS.lambda_environment_bytes.value:
            largest = max(environment, key=lambda name: len(environment[name].encode()))
            raise ValueError(
                f"{construct_id}: its environment would be {size} bytes, above Lambda's "
                f"{LIMITS.lambda_environment_bytes.value:g} (the largest: {largest}, "
                f"{len(environment[largest].encode())} bytes)"
            )
        self.service_name = service_name
        # Where the code writes its metrics: its environment's, the one source alarms read too.
        self.metrics_namespace = environment["POWERTOOLS_METRICS_NAMESPACE"]
        self.log_group = logs.LogGroup(
            self, "Logs", retention=defaults.log_retention, removal_policy=defaults.removal_policy
        )
        # Our own role instead of the default one: the default attaches the AWS-managed
        # AWSLambdaBasicExecutionRole, which may write to every log group in the account.
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Execution role of the {service_name} function",
        )
        self.log_group.grant_write(self.role)
        self.function = lambda_.Function(
            self,
            "Function",
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            code=defaults.code,
            handler=handler,
            layers=list(defaults.layers),
            role=self.role,
            description=description[:256],
            timeout=Duration.seconds(timeout_seconds),
            memory_size=memory_mb,
            log_group=self.log_group,
            logging_format=lambda_.LoggingFormat.JSON,
            # Never above INFO, the level Lambda gives the metric (EMF) lines, which carry none;
            # Powertools filters the function's logs at `log_level` (infra.settings.cdk_log_level).
            application_log_level_v2=defaults.lambda_log_level,
            system_log_level_v2=lambda_.SystemLogLevel.WARN,
            # Without a tracing config (Lambda's default, PassThrough) the CDK grants no X-Ray
            # action; with ACTIVE it adds xray:PutTraceSegments/PutTelemetryRecords on '*'.
            tracing=lambda_.Tracing.ACTIVE if defaults.tracing else None,
            environment=dict(environment),
            # SnapStart on published versions. A deploy that changes the function publishes a new
            # version (with its snapshot) and moves the alias to it; the version it replaces is
            # deleted, so no old snapshot stays cached and billed (CDK keeps replaced versions).
            snap_start=lambda_.SnapStartConf.ON_PUBLISHED_VERSIONS if snapstart else None,
            current_version_options=(
                lambda_.VersionOptions(removal_policy=RemovalPolicy.DESTROY) if snapstart else None
            ),
        )
        # What the function's trigger (its API route, its queue's event source mapping) invokes:
        # with SnapStart, the alias of the version published with its snapshot ($LATEST has none).
        self.invoked: lambda_.IFunction = self.function
        if snapstart:
            self.invoked = lambda_.Alias(
                self, "Live", alias_name=SNAPSTART_ALIAS, version=self.function.current_version
            )
            Annotations.of(self.function).acknowledge_warning(
                "@aws-cdk/aws-lambda:snapStartRequirePublish",
                "Its trigger calls the alias of the version published with it (`invoked`).",
            )
        if defaults.tracing:
            Validations.of(self.role).acknowledge(
                Ack(
                    id="AwsSolutions-IAM5[Resource::*]",
                    reason="Only xray:PutTraceSegments/PutTelemetryRecords use '*': X-Ray has no "
                    "resource-level permissions (asserted in tests/infra).",
                )
            )
        Validations.of(self.function).acknowledge(
            Ack(
                id="AwsSolutions-L1",
                reason="python3.13 is the runtime the code, the tests and the pinned Powertools "
                "layer parameter target; moving on is a deliberate, tested upgrade.",
            )
        )

    def emitted_metric(
        self,
        name: str,
        *,
        statistic: str = "Sum",
        period: Duration = METRIC_PERIOD,
        dimensions: Mapping[str, str] | None = None,
    ) -> cloudwatch.Metric:
        """A metric this function's code emits with Powertools Metrics.

        Powertools adds the `service` dimension (POWERTOOLS_SERVICE_NAME) to every metric; CloudWatch
        matches a metric only on its exact dimension set, so `dimensions` must name every other one
        the code adds (e.g. the worker's `consumer`).
        """
        return cloudwatch.Metric(
            namespace=self.metrics_namespace,
            metric_name=name,
            dimensions_map={**(dimensions or {}), "service": self.service_name},
            statistic=statistic,
            period=period,
        )


def nag_arn(scope: Construct, arn: str) -> str:
    """An ARN as cdk-nag names it in a finding id: references to pseudo parameters as <AWS::Name>."""
    resolved = Stack.of(scope).resolve(arn)
    if isinstance(resolved, str):
        return resolved
    _, parts = resolved["Fn::Join"]
    return "".join(part if isinstance(part, str) else f"<{part['Ref']}>" for part in parts)
