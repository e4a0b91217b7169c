"""Builds the CDK app the same way for `python app.py`, `cdk synth` and the tests.

`cdk synth` hands cdk.json's context to the app, but `python app.py` and tests do not; loading
cdk.json here keeps the feature flags (and so the template) identical in all three.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from aws_cdk import App, Environment, Token, Validations
from cdk_nag import AwsSolutionsChecks
from pydantic import ValidationError

from infra.config import (
    SHOWN_VALUE_CHARS,
    PipelineSettings,
    Problem,
    SettingsError,
    assignment,
    settings_error_lines,
    shown_value,
)
from infra.environment import SMS_CONSUMER, FunctionEnvironments
from infra.paths import CDK_JSON
from infra.region import inference_profile_problem, synth_region_summary
from infra.settings import settings_from_node
from infra.stack import PipelineStack
from pipeline.registry import CONSUMERS, Consumer


def project_context() -> dict[str, Any]:
    """The "context" block of cdk.json (feature flags and any settings pinned there)."""
    context: dict[str, Any] = json.loads(CDK_JSON.read_text(encoding="utf-8")).get("context", {})
    return context


BUNDLING_STACKS = "aws:cdk:bundling-stacks"
CONTEXT_USAGE = "usage: python app.py [-c KEY=VALUE]... (the CDK CLI's -c/--context)"


def context_arguments(argv: list[str]) -> dict[str, str]:
    """`-c KEY=VALUE` / `--context KEY=VALUE` (repeatable), as the CDK CLI takes them; anything
    else is refused (ValueError), never ignored: a setting that silently does not apply would
    synthesize a template without it."""
    context: dict[str, str] = {}
    words = list(argv)
    while words:
        word = words.pop(0)
        if word in ("-c", "--context") and words:
            pair = words.pop(0)
        elif word.startswith("--context="):
            pair = word.removeprefix("--context=")
        else:
            raise ValueError(f"unexpected argument {word!r}; {CONTEXT_USAGE}")
        try:
            key, value = assignment(pair)
        except ValueError as error:
            raise ValueError(f"{error}; {CONTEXT_USAGE}") from None
        context[key] = value
    return context


def _bundling_stacks_as_a_list(app: App) -> None:
    """`-c aws:cdk:bundling-stacks=[]` arrives from the CDK CLI as the text "[]", on which the CDK
    fails; read it as the JSON list it spells (or a comma-separated list of stack patterns)."""
    value = app.node.try_get_context(BUNDLING_STACKS)
    if not isinstance(value, str):
        return
    text = value.strip()
    stacks = json.loads(text) if text.startswith("[") else [p.strip() for p in text.split(",") if p.strip()]
    app.node.set_context(BUNDLING_STACKS, stacks)


def build_app(
    context: Mapping[str, Any] | None = None, *, outdir: str | None = None, nag: bool = True
) -> tuple[App, PipelineStack]:
    """An App holding the pipeline stack; with `nag`, cdk-nag's AWS Solutions checks run at synth.

    Context given here overrides cdk.json; `cdk -c key=value` (CDK_CONTEXT_JSON) overrides both.
    """
    app = App(context={**project_context(), **(context or {})}, outdir=outdir)
    _bundling_stacks_as_a_list(app)
    settings = settings_from_node(app.node)
    region = os.getenv("CDK_DEFAULT_REGION")
    problem = inference_profile_problem(settings.bedrock_model_id, region)
    if problem is not None:
        raise SettingsError([Problem("bedrock_model_id", problem, settings.bedrock_model_id)])
    stack = PipelineStack(
        app,
        settings.stage_stack_name,
        settings=settings,
        # Unset offline: the stack stays environment-agnostic and synthesizes without an account.
        env=Environment(account=os.getenv("CDK_DEFAULT_ACCOUNT"), region=region),
    )
    if nag:
        Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, stack


def settings_error_message(error: ValidationError | SettingsError) -> str:
    """What `python app.py` prints instead of a traceback: `infra.config.settings_error_lines`."""
    return "\n".join(settings_error_lines(error))


def synth_summary(stack: PipelineStack) -> list[str]:
    """What a synthesized stack will deploy, in a few lines (`python app.py` prints them to
    stderr; the stack itself prints nothing, so in-process synths in tests stay quiet)."""
    settings = stack.settings
    on = [consumer.name for consumer in stack.consumers]
    registry = settings.registry_settings()

    def why_off(consumer: Consumer) -> str:
        if consumer.unless_setting and registry.get(consumer.unless_setting):
            return f"{consumer.name} ({consumer.unless_setting} is set)"
        if consumer.requires_setting:
            if registry.get(consumer.requires_setting) is False:  # a switch (`crm_leads`)
                return f"{consumer.name} ({consumer.requires_setting}=false)"
            return f"{consumer.name} (no {consumer.requires_setting})"
        return consumer.name

    off = [why_off(consumer) for consumer in CONSUMERS if consumer.name not in on]
    lines = [
        f"stack {stack.stack_name} (stage {settings.stage})",
        f"  consumers on: {', '.join(on) or 'none'}; off: {', '.join(off) or 'none'}",
        f"  SMS gateway: {_sms_summary(stack)}",
        f"  alarm e-mail: {settings.alarm_email or 'none: alarms notify the topic only'}",
        f"  account: {_account_summary(stack)}",
        f"  region: {synth_region_summary(_resolved(stack.region))}",
        f"  tracing: {'on (X-Ray, every function and the events topic)' if settings.tracing else 'off'}",
        f"  settings not at their default: {_non_default_summary(settings)}",
        f"  removal policy: {settings.removal_policy} "
        + (
            "(cdk destroy keeps the retained resources; see Teardown in docs/deploy.md)"
            if settings.removal_policy == "retain"
            else "(cdk destroy deletes tables, keys and log groups: development only)"
        ),
    ]
    return lines


# Shown by host only: a URL may carry a credential in its user part or query.
_URL_SETTINGS = ("sms_http_base_url",)


def _non_default_summary(settings: PipelineSettings) -> str:
    changed = settings.non_default_settings()
    if not changed:
        return "none"
    shown = [
        f"{key}={urlsplit(str(value)).hostname if key in _URL_SETTINGS else _shown(value)}"
        for key, value in sorted(changed.items())
    ]
    return ", ".join(shown)


def _shown(value: object) -> str:
    """A setting as a person typed it: plain text, `true`/`false`, long values cut."""
    if isinstance(value, bool):
        return str(value).lower()
    text = str(value)
    return text if len(text) <= SHOWN_VALUE_CHARS and text.isprintable() else shown_value(value)


def _sms_summary(stack: PipelineStack) -> str:
    settings = stack.settings
    if SMS_CONSUMER not in {consumer.name for consumer in stack.consumers}:
        return "none (no sms consumer)"
    if settings.sms_gateway == "http":
        # The host only: a URL may carry a credential in its user part or query.
        return f"http, host {urlsplit(settings.sms_http_base_url or '').hostname}"
    sender = settings.sms_origination_identity or "any origination identity of the account"
    configuration_set = FunctionEnvironments(settings, stack_name=stack.stack_name).sms_configuration_set
    made = "given" if settings.sms_configuration_set else "created by the stack"
    return f"end_user_messaging, sender {sender}, configuration set {configuration_set} ({made})"


def _resolved(value: str) -> str | None:
    """A stack attribute's literal value; None for a token (an environment-agnostic stack)."""
    return None if Token.is_unresolved(value) else value


def _account_summary(stack: PipelineStack) -> str:
    return (
        _resolved(stack.account) or "any account (environment-agnostic: the deploy's credentials choose it)"
    )
