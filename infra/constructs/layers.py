"""The layers: our shared `pipeline` package and AWS's Powertools, which every function runs
with; `phonenumbers`, which only the functions that validate CRM events get; and
`python-telegram-bot`, which only the bot consumer gets. The last two are one pinned
requirement each, pip-installed for the Lambda runtime on this machine (no Docker)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from infra.config import powertools_parameter_name
from infra.paths import ASSET_EXCLUDES, PHONENUMBERS_LAYER_DIR, SHARED_LAYER_DIR, TELEGRAM_BOT_LAYER_DIR
from pipeline.registry import Consumer

RUNTIME = lambda_.Runtime.PYTHON_3_13
ARCHITECTURE = lambda_.Architecture.ARM_64
# What `pip install --platform/--python-version` targets for RUNTIME on ARCHITECTURE.
PIP_PLATFORM = "manylinux2014_aarch64"
PIP_PYTHON_VERSION = "3.13"
PHONENUMBERS_REQUIREMENTS = PHONENUMBERS_LAYER_DIR / "requirements.txt"
TELEGRAM_BOT_REQUIREMENTS = TELEGRAM_BOT_LAYER_DIR / "requirements.txt"
# The consumer running the user's python-telegram-bot Application: the only one with its layer.
BOT_CONSUMER = "bot"
CRM_SOURCE = "crm"
# Sources whose consumers validate `CrmEvent`: the order events, and the CRM webhooks whose
# consumers build one (Bitrix24, amoCRM).
CRM_EVENT_SOURCES = frozenset({CRM_SOURCE, "bitrix24", "amocrm"})


def layer_pin(requirements: Path, package: str) -> str:
    """`<package>==<version>`: a layer's one requirement, read from its requirements file."""
    lines = [line.strip() for line in requirements.read_text(encoding="utf-8").splitlines()]
    pins = [line for line in lines if line and not line.startswith("#")]
    if len(pins) != 1 or not re.fullmatch(rf"{re.escape(package)}==[0-9][0-9A-Za-z.]*", pins[0]):
        raise ValueError(f"{requirements} must hold exactly one `{package}==<version>` line")
    return pins[0]


def phonenumbers_pin(requirements: Path = PHONENUMBERS_REQUIREMENTS) -> str:
    return layer_pin(requirements, "phonenumbers")


def telegram_bot_pin(requirements: Path = TELEGRAM_BOT_REQUIREMENTS) -> str:
    """python-telegram-bot's pin; pip resolves its dependencies (httpx) within PTB's own bounds."""
    return layer_pin(requirements, "python-telegram-bot")


def pip_install_command(target: str, requirement: str) -> list[str]:
    """pip installing `requirement` for the Lambda runtime (not this machine) into `target`.

    Binary wheels only, for python3.13 on aarch64, so what runs here never decides what Lambda
    gets; no .pyc (they would be this interpreter's, not 3.13's)."""
    return [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--platform",
        PIP_PLATFORM,
        "--only-binary=:all:",
        "--python-version",
        PIP_PYTHON_VERSION,
        "--no-compile",
        "--target",
        target,
        requirement,
    ]


@jsii.implements(ILocalBundling)
class PipLocalBundling:
    """Builds the layer with this machine's pip: no Docker needed (CDK falls back to Docker only
    if this returns False, which it never does; a failing pip fails the synth instead)."""

    def __init__(self, requirement: str) -> None:
        self.requirement = requirement
        self.name = requirement.split("==")[0]

    def try_bundle(self, output_dir: str, *, image: DockerImage, **_: Any) -> bool:
        # Lambda mounts a layer's `python/` folder at /opt/python, which is on sys.path.
        command = pip_install_command(str(Path(output_dir) / "python"), self.requirement)
        result = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
        if result.returncode != 0:
            raise RuntimeError(f"bundling the {self.name} layer failed:\n{result.stderr[-2000:]}")
        return True


def pinned_layer_code(layer_dir: Path, requirement: str) -> lambda_.Code:
    """A pinned layer's asset: bundled locally by pip; with bundling skipped (tests: the context
    `aws:cdk:bundling-stacks=[]`) the CDK stages the requirements folder and never runs pip."""
    return lambda_.Code.from_asset(
        str(layer_dir),
        bundling=BundlingOptions(
            local=PipLocalBundling(requirement),
            # Required by the CDK, and equivalent should anyone bundle with Docker instead.
            image=RUNTIME.bundling_image,
            platform="linux/arm64",
            command=["bash", "-c", "pip install --no-compile -r requirements.txt -t /asset-output/python"],
        ),
    )


def validates_crm_events(consumer: Consumer) -> bool:
    """A consumer that receives CRM events validates them with `pipeline.crm.contract.CrmEvent`, whose
    phone check imports `phonenumbers`: it needs the phonenumbers layer."""
    sources = consumer.filter_policy.get("source")
    return sources is None or any(source in CRM_EVENT_SOURCES for source in sources)


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
        # Not in the Powertools layer; only the functions validating CRM events get it.
        self.phonenumbers = lambda_.LayerVersion(
            self,
            "Phonenumbers",
            code=pinned_layer_code(PHONENUMBERS_LAYER_DIR, phonenumbers_pin()),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description=f"{phonenumbers_pin()} (CRM phone normalisation, pipeline.phones)",
        )
        # Only the bot consumer gets it (`telegram_bot`); created on first use, so a stack
        # without the bot has no such layer to bundle.
        self._telegram_bot: lambda_.LayerVersion | None = None

    @property
    def telegram_bot(self) -> lambda_.LayerVersion:
        if self._telegram_bot is None:
            self._telegram_bot = lambda_.LayerVersion(
                self,
                "TelegramBot",
                code=pinned_layer_code(TELEGRAM_BOT_LAYER_DIR, telegram_bot_pin()),
                compatible_runtimes=[RUNTIME],
                compatible_architectures=[ARCHITECTURE],
                description=f"{telegram_bot_pin()} (the bot consumer's Application, pipeline.telegram_bot)",
            )
        return self._telegram_bot

    @property
    def all(self) -> list[lambda_.ILayerVersion]:
        """The layers every function runs with."""
        return [self.powertools, self.shared]
