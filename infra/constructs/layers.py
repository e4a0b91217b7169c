"""The two layers every function runs with: our shared `pipeline` package and AWS's Powertools."""

from __future__ import annotations

from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from infra.paths import ASSET_EXCLUDES, SHARED_LAYER_DIR

RUNTIME = lambda_.Runtime.PYTHON_3_13
ARCHITECTURE = lambda_.Architecture.ARM_64


def powertools_parameter_name(version: str) -> str:
    """Public SSM parameter whose value is the Powertools layer ARN for our runtime and architecture."""
    return f"/aws/service/powertools/python/arm64/python3.13/{version}"


class PipelineLayers(Construct):
    """Builds the shared layer from `layers/shared` and resolves Powertools at deploy time.

    Powertools comes from the AWS-managed layer (it also brings pydantic and the X-Ray SDK), so
    the shared layer holds only our own code and stays small.
    """

    def __init__(self, scope: Construct, construct_id: str, *, powertools_version: str) -> None:
        super().__init__(scope, construct_id)
        self.shared = lambda_.LayerVersion(
            self,
            "Shared",
            code=lambda_.Code.from_asset(str(SHARED_LAYER_DIR), exclude=ASSET_EXCLUDES),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description="Shared `pipeline` package (envelope, registry, worker helpers)",
        )
        # Resolved by CloudFormation from the region's public parameter, so no account lookup
        # (and no network) is needed at synth time.
        powertools_arn = ssm.StringParameter.value_for_string_parameter(
            self, powertools_parameter_name(powertools_version)
        )
        self.powertools = lambda_.LayerVersion.from_layer_version_arn(self, "Powertools", powertools_arn)

    @property
    def all(self) -> list[lambda_.ILayerVersion]:
        return [self.powertools, self.shared]
