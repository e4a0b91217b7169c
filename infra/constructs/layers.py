"""The layers: our shared `pipeline` package and AWS's Powertools, which every function runs
with; `phonenumbers`, which only the functions that validate CRM events get; and one layer per
consumer whose folder has a `requirements.txt` (`functions/<name>/requirements.txt`, any number
of pins), which only that consumer gets. Pinned requirements are pip-installed for the Lambda
runtime on this machine (no Docker), once per set of pins: the result is cached by their hash
(`layer_cache_dir`), so a synth re-bundles only requirements that changed. Every layer and the
functions' asset carry bytecode compiled for the runtime (`infra.bytecode`): Lambda's /opt and
/var/task are read-only, so a module without it is compiled anew at each cold start."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from infra.bytecode import (
    NOT_COMPILED,
    Derived,
    bytecode_python,
    cache_entry,
    compile_command,
    compile_tree,
    staged,
)
from infra.config import powertools_parameter_name
from infra.dataclass_code import PrecompiledDataclasses
from infra.naming import pascal_case
from infra.paths import ASSET_EXCLUDES, PHONENUMBERS_LAYER_DIR, SHARED_LAYER_DIR
from pipeline import declarations
from pipeline.registry import REQUIREMENTS, Consumer, functions_dir

RUNTIME = lambda_.Runtime.PYTHON_3_13
ARCHITECTURE = lambda_.Architecture.ARM_64
# What `pip install --platform/--python-version` targets for RUNTIME on ARCHITECTURE.
PIP_PLATFORM = "manylinux2014_aarch64"
PIP_PYTHON_VERSION = "3.13"
PHONENUMBERS_REQUIREMENTS = PHONENUMBERS_LAYER_DIR / "requirements.txt"
CRM_SOURCE = "crm"
# Sources whose consumers validate `CrmEvent`: the order events, and the CRM webhooks whose
# consumers build one (Bitrix24, amoCRM).
CRM_EVENT_SOURCES = frozenset({CRM_SOURCE, "bitrix24", "amocrm"})
# Where bundled requirements are kept between synths, one folder per hash of the pins:
# this variable, else $XDG_CACHE_HOME (or ~/.cache)/telegram-crm-pipeline/layers.
LAYER_CACHE_ENV = "PIPELINE_LAYER_CACHE"
# Where Lambda mounts the code: the functions' asset, a layer and its `python/` folder (on sys.path).
TASK_ROOT = "/var/task"
LAYER_ROOT = "/opt"
LAYER_PYTHON_PATH = f"{LAYER_ROOT}/python"
# A pinned requirement: `package==version`, extras allowed (what a layer is built from).
PIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?==[0-9][0-9A-Za-z.+!_-]*")


def requirement_pins(requirements: Path) -> tuple[str, ...]:
    """The pins of a requirements file (comments and blank lines aside); anything that is not
    `package==version` is refused, naming the line: a layer must be the same at every synth."""
    pins = []
    for number, raw in enumerate(requirements.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if not PIN.fullmatch(line):
            raise ValueError(f"{requirements}:{number}: {line!r} is not a pin (`package==version`)")
        pins.append(line)
    return tuple(pins)


def layer_pin(requirements: Path, package: str) -> str:
    """`<package>==<version>`: a layer's one requirement, read from its requirements file."""
    pins = requirement_pins(requirements)
    if len(pins) != 1 or not pins[0].startswith(f"{package}=="):
        raise ValueError(f"{requirements} must hold exactly one `{package}==<version>` line")
    return pins[0]


def phonenumbers_pin(requirements: Path = PHONENUMBERS_REQUIREMENTS) -> str:
    return layer_pin(requirements, "phonenumbers")


def consumer_requirements(folder: Path) -> tuple[str, ...]:
    """A consumer folder's own pins (its `requirements.txt`; none without one)."""
    requirements = folder / REQUIREMENTS
    return requirement_pins(requirements) if requirements.is_file() else ()


def requirements_key(requirements: Sequence[str]) -> str:
    """What a bundle of these pins is cached under: their hash, with the target runtime's and
    whether it carries bytecode (none without a Python of the runtime's version here)."""
    compiled = f"pyc-{PIP_PYTHON_VERSION}-{NOT_COMPILED}" if bytecode_python(PIP_PYTHON_VERSION) else "no-pyc"
    text = "\n".join([PIP_PLATFORM, PIP_PYTHON_VERSION, compiled, *sorted(requirements)])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def layer_cache_dir() -> Path:
    configured = os.environ.get(LAYER_CACHE_ENV)
    if configured:
        return Path(configured)
    return (
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "telegram-crm-pipeline" / "layers"
    )


def pip_install_command(target: str, *requirements: str) -> list[str]:
    """pip installing `requirements` for the Lambda runtime (not this machine) into `target`.

    Binary wheels only, for python3.13 on aarch64, so what runs here never decides what Lambda
    gets; pip compiles nothing (it would with this interpreter, and timestamp-based): `bundled`
    does, for the runtime (`infra.bytecode`)."""
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
        *requirements,
    ]


def bundled(requirements: Sequence[str], name: str) -> Path:
    """The folder holding these pins installed and compiled for the Lambda runtime: from the
    cache, or pip-installed into it first (into a temporary folder, renamed when complete, so a
    failed or interrupted install never leaves a cache entry)."""

    def install(partial: Path) -> None:
        command = pip_install_command(str(partial), *requirements)
        result = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
        if result.returncode != 0:
            raise RuntimeError(f"bundling the {name} layer failed:\n{result.stderr[-2000:]}")
        python = bytecode_python(PIP_PYTHON_VERSION)
        if python:
            compile_tree(partial, python, runtime_path=LAYER_PYTHON_PATH, strict=False)

    return cache_entry(layer_cache_dir() / requirements_key(requirements), install)


@jsii.implements(ILocalBundling)
class PipLocalBundling:
    """Builds the layer with this machine's pip: no Docker needed (CDK falls back to Docker only
    if this returns False, which it never does; a failing pip fails the synth instead)."""

    def __init__(self, requirements: Sequence[str], name: str) -> None:
        self.requirements = tuple(requirements)
        self.name = name

    def try_bundle(self, output_dir: str, *, image: DockerImage, **_: Any) -> bool:
        shutil.copytree(
            bundled(self.requirements, self.name), Path(output_dir) / "python", dirs_exist_ok=True
        )
        return True


# What the Docker bundling (never used: PipLocalBundling never declines) would run, in the runtime's image.
DOCKER_PIP = "pip install --no-compile -r requirements.txt -t /asset-output/python"
DOCKER_COMPILE = compile_command("python", "/asset-output/python", LAYER_PYTHON_PATH)


def pinned_layer_code(source_dir: Path, requirements: Sequence[str], name: str) -> lambda_.Code:
    """A pinned layer's asset, named by its pins' hash: bundled locally by pip; with bundling
    skipped (tests: the context `aws:cdk:bundling-stacks=[]`) the CDK never runs pip."""
    return lambda_.Code.from_asset(
        str(source_dir),
        asset_hash_type=AssetHashType.CUSTOM,
        asset_hash=requirements_key(requirements),
        exclude=["*", f"!{REQUIREMENTS}"],
        bundling=BundlingOptions(
            local=PipLocalBundling(requirements, name),
            # Required by the CDK, and equivalent should anyone bundle with Docker instead.
            image=RUNTIME.bundling_image,
            platform="linux/arm64",
            command=["bash", "-c", f"{DOCKER_PIP} && {shlex.join(DOCKER_COMPILE)}"],
        ),
    )


def compiled_code(
    source_dir: Path,
    runtime_path: str,
    generated: Mapping[str, bytes] | None = None,
    derived: Derived | None = None,
) -> lambda_.Code:
    """The asset of our own code (the functions' asset, the shared layer): `source_dir` without
    ASSET_EXCLUDES, with `generated` and `derived` files and bytecode for the runtime, staged in
    the layer cache and hashed by its source (`infra.bytecode.staged`)."""
    folder, key = staged(
        source_dir,
        ASSET_EXCLUDES,
        cache_dir=layer_cache_dir() / "staged",
        version=PIP_PYTHON_VERSION,
        runtime_path=runtime_path,
        generated=generated,
        derived=derived,
    )
    return lambda_.Code.from_asset(str(folder), asset_hash_type=AssetHashType.CUSTOM, asset_hash=key)


def functions_generated(source_dir: Path) -> dict[str, bytes]:
    """What the functions' asset carries besides `source_dir`'s files: the consumers'
    declarations, parsed (`pipeline.declarations.SNAPSHOT`: no init parses TOML)."""
    return {declarations.SNAPSHOT: declarations.snapshot(source_dir)}


def functions_derived() -> Derived:
    """What the functions' asset carries built from its own code by the runtime's Python: the
    init's `@dataclass` methods, precompiled (`pipeline.dataclass_code`)."""
    return PrecompiledDataclasses()


def validates_crm_events(consumer: Consumer) -> bool:
    """A consumer that receives CRM events validates them with `pipeline.crm.event_model.CrmEvent`, whose
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
            code=compiled_code(SHARED_LAYER_DIR, LAYER_ROOT),
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
            code=pinned_layer_code(PHONENUMBERS_LAYER_DIR, (phonenumbers_pin(),), "phonenumbers"),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description=f"{phonenumbers_pin()} (CRM phone normalisation, pipeline.phones)",
        )
        # One per consumer with its own requirements, created on first use: a stack without
        # that consumer has no such layer to bundle.
        self._requirements: dict[str, lambda_.LayerVersion] = {}

    def requirements_of(self, consumer: Consumer) -> lambda_.LayerVersion | None:
        """The layer of a consumer's own requirements (`functions/<name>/requirements.txt`),
        which only that consumer gets; None if it has none."""
        if consumer.name not in self._requirements:
            requirements = consumer_requirements(functions_dir() / consumer.name)
            if not requirements:
                return None
            self._requirements[consumer.name] = lambda_.LayerVersion(
                self,
                f"{pascal_case(consumer.name)}Requirements",
                code=pinned_layer_code(functions_dir() / consumer.name, requirements, consumer.name),
                compatible_runtimes=[RUNTIME],
                compatible_architectures=[ARCHITECTURE],
                description=f"{', '.join(requirements)} (functions/{consumer.name}/{REQUIREMENTS})"[:256],
            )
        return self._requirements[consumer.name]

    @property
    def all(self) -> list[lambda_.ILayerVersion]:
        """The layers every function runs with."""
        return [self.powertools, self.shared]
