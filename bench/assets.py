"""Our code as Lambda loads it, for `bench.imports`: the directories a function's PYTHONPATH holds.

- the functions' asset (/var/task) and the shared layer (/opt/python), staged and compiled as
  the synth does it (`infra.bytecode.staged`: the same files, the same bytecode);
- a function's other layers of ours, as the stack attaches them: `phonenumbers` where it validates CRM
  events, a consumer's own requirements (the bot's python-telegram-bot): the synth pip-installs
  their pins for aarch64 from an index, which is out of reach here, so they are rebuilt from the
  distributions the .venv holds at those very pins (and their dependencies), then compiled the
  same way.

Powertools, pydantic and boto3 stay the .venv's, bytecode cached: in Lambda they are AWS's (the
managed Powertools layer, the runtime's boto3), not ours to build. `without_bytecode` is the same
code without any `__pycache__`: what 0.5.0 shipped, which Lambda compiled at each cold start.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

from bench.common import BenchError, require
from infra.bytecode import staged
from infra.constructs.layers import (
    LAYER_PYTHON_PATH,
    LAYER_ROOT,
    PIP_PYTHON_VERSION,
    TASK_ROOT,
    consumer_requirements,
    functions_derived,
    functions_generated,
    phonenumbers_pin,
    validates_crm_events,
)
from infra.environment import WEBHOOK
from infra.paths import ASSET_EXCLUDES, FUNCTIONS_DIR, PROJECT_ROOT, SHARED_LAYER_DIR
from pipeline import dataclass_code
from pipeline.registry import CONSUMERS

# Staged copies, kept between runs (each named by its source's hash, as the synth's cache).
ASSETS_DIR = PROJECT_ROOT / ".local" / "bench" / "assets"
SHARED = "shared"
PHONENUMBERS = "phonenumbers"
_STAGING: dict[str, Any] = {"cache_dir": ASSETS_DIR, "version": PIP_PYTHON_VERSION}


@dataclass(frozen=True)
class LambdaCode:
    """The functions' asset and each layer's `python/` folder, by layer name."""

    task: Path
    layers: dict[str, Path]

    def python_path(self, function: str) -> list[Path]:
        """A function's import path as Lambda builds it: /var/task, then /opt/python, which holds
        its layers merged (here one folder each; none holds a file of another)."""
        return [self.task, *(self.layers[name] for name in function_layers(function))]


def function_layers(function: str) -> list[str]:
    """The layers of ours a function runs with, as `infra.stack` attaches them."""
    consumer = next((c for c in CONSUMERS if c.name == function), None)
    names = [SHARED]
    if function == WEBHOOK.service_name or (consumer is not None and validates_crm_events(consumer)):
        names.append(PHONENUMBERS)
    if consumer is not None and consumer_requirements(FUNCTIONS_DIR / consumer.name):
        names.append(consumer.name)
    return names


def _distributions(pins: tuple[str, ...]) -> list[metadata.Distribution]:
    """The installed distributions of `pins` (at exactly their versions) and of what they require."""
    found: dict[str, metadata.Distribution] = {}
    pending = [Requirement(pin) for pin in pins]
    pinned = {Requirement(pin).name for pin in pins}
    while pending:
        requirement = pending.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = requirement.name.lower().replace("_", "-")
        if name in found:
            continue
        try:
            distribution = metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            raise BenchError(f"{requirement} is not installed in the .venv: run `make install`") from None
        require(
            requirement.name not in pinned or distribution.version in requirement.specifier,
            f"the .venv has {requirement.name} {distribution.version}, the layer pins {requirement}",
        )
        found[name] = distribution
        pending += [Requirement(text) for text in distribution.requires or ()]
    return list(found.values())


def _layer_source(pins: tuple[str, ...], folder: Path) -> Path:
    """`folder` filled with the files of these distributions, as `pip install --target` lays them."""
    for distribution in _distributions(pins):
        for file in distribution.files or ():
            if file.parts[0] == ".." or "__pycache__" in file.parts or file.suffix == ".pyc":
                continue  # console scripts live outside site-packages; bytecode is rebuilt
            (folder / file).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(str(distribution.locate_file(file))), folder / file)
    return folder


def build(functions: list[str]) -> LambdaCode:
    """The code these functions load, with its bytecode, staged in ASSETS_DIR."""
    generated = functions_generated(FUNCTIONS_DIR)
    task, _ = staged(
        FUNCTIONS_DIR,
        ASSET_EXCLUDES,
        runtime_path=TASK_ROOT,
        generated=generated,
        derived=functions_derived(),
        **_STAGING,
    )
    shared, _ = staged(SHARED_LAYER_DIR, ASSET_EXCLUDES, runtime_path=LAYER_ROOT, **_STAGING)
    layers = {SHARED: shared / "python"}
    pins: dict[str, tuple[str, ...]] = {PHONENUMBERS: (phonenumbers_pin(),)}
    pins |= {c.name: consumer_requirements(FUNCTIONS_DIR / c.name) for c in CONSUMERS}
    for name in sorted({layer for function in functions for layer in function_layers(function)} - {SHARED}):
        with tempfile.TemporaryDirectory() as scratch:
            source = _layer_source(pins[name], Path(scratch) / f"layer-{name}")
            layers[name], _ = staged(source, (), runtime_path=LAYER_PYTHON_PATH, **_STAGING)
    return LambdaCode(task=task, layers=layers)


def without_bytecode(code: LambdaCode, folder: Path, functions: Sequence[str]) -> LambdaCode:
    """A copy in `folder` of what `functions` load of `code`, without any bytecode (nor the
    precompiled dataclass methods): what 0.5.0 shipped."""
    bare = shutil.ignore_patterns("__pycache__", dataclass_code.CODE_FILE)
    shutil.copytree(code.task, folder / "task", ignore=bare)
    layers = {}
    for name in sorted({layer for function in functions for layer in function_layers(function)}):
        layers[name] = shutil.copytree(code.layers[name], folder / "layers" / name, ignore=bare)
    return LambdaCode(task=folder / "task", layers=layers)
