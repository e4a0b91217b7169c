"""Builds the CDK app the same way for `python app.py`, `cdk synth` and the tests.

`cdk synth` hands cdk.json's context to the app, but `python app.py` and tests do not; loading
cdk.json here keeps the feature flags (and so the template) identical in all three.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from aws_cdk import App, Environment, Validations
from cdk_nag import AwsSolutionsChecks
from pydantic import ValidationError

from infra.environment import SettingsError
from infra.paths import CDK_JSON
from infra.settings import settings_from_node
from infra.stack import PipelineStack


def project_context() -> dict[str, Any]:
    """The "context" block of cdk.json (feature flags and any settings pinned there)."""
    context: dict[str, Any] = json.loads(CDK_JSON.read_text(encoding="utf-8")).get("context", {})
    return context


def build_app(
    context: Mapping[str, Any] | None = None, *, outdir: str | None = None, nag: bool = True
) -> tuple[App, PipelineStack]:
    """An App holding the pipeline stack; with `nag`, cdk-nag's AWS Solutions checks run at synth.

    Context given here overrides cdk.json; `cdk -c key=value` (CDK_CONTEXT_JSON) overrides both.
    """
    app = App(context={**project_context(), **(context or {})}, outdir=outdir)
    settings = settings_from_node(app.node)
    stack = PipelineStack(
        app,
        settings.stack_name,
        settings=settings,
        # Unset offline: the stack stays environment-agnostic and synthesizes without an account.
        env=Environment(account=os.getenv("CDK_DEFAULT_ACCOUNT"), region=os.getenv("CDK_DEFAULT_REGION")),
    )
    if nag:
        Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, stack


def settings_error_message(error: ValidationError | SettingsError) -> str:
    """One line per refused setting, `key: why`, for `python app.py` to print instead of a traceback."""
    if isinstance(error, SettingsError):
        return str(error)
    lines = []
    for detail in error.errors():
        why = str(detail["msg"]).removeprefix("Value error, ")
        key = ".".join(str(part) for part in detail["loc"])
        lines.append(why if why.startswith(key) else f"{key}: {why}")
    return "\n".join(lines)
