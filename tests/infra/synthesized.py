"""Build and synthesize the app the way `python app.py` does, for the infra tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from aws_cdk import Stack
from aws_cdk.assertions import Template
from aws_cdk.cx_api import CloudAssembly

from infra.application import build_app
from infra.paths import PROJECT_ROOT
from infra.stack import PipelineStack
from pipeline.registry import CONSUMERS
from pipeline.retention import IDEMPOTENCY_TTL_SECONDS

# Never build Docker/bundled assets in tests (there is no Docker here, and none is needed).
BASE_CONTEXT: dict[str, Any] = {"aws:cdk:bundling-stacks": []}
# An inference profile (the grant with the most to it: the profile and its model in any region).
BEDROCK_FOUNDATION_MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
BEDROCK_MODEL_ID = f"eu.{BEDROCK_FOUNDATION_MODEL}"
SMS_POOL_ID = "pool-0123456789abcdef0123456789abcdef"
SMS_CONFIGURATION_SET = "shop-notifications"
ALARM_EMAIL = "ops@example.org"
# The optional features `full` switches on besides every consumer: a given SMS sender and
# configuration set, alarm e-mails, the Telegram IP allow-list and X-Ray tracing.
FULL_FEATURES: dict[str, Any] = {
    "sms_origination_identity": SMS_POOL_ID,
    "sms_configuration_set": SMS_CONFIGURATION_SET,
    "alarm_email": ALARM_EMAIL,
    "telegram_ip_allowlist": "true",
    "tracing": "true",
}
SMS_HTTP_BASE_URL = "https://sms.example.org/api"
# As `cdk deploy -c key=value` passes them: strings. Every value differs from its default.
CUSTOM_CONTEXT: dict[str, Any] = {
    "log_retention_days": "90",
    "log_level": "DEBUG",
    "api_rate_limit": "10",
    "api_burst_limit": "20",
    "powertools_version": "3.38.0",
    "removal_policy": "destroy",
    "telegram_bot_id": "shopbot",
    "secret_rotation_grace_seconds": "600",
    "idempotency_ttl_seconds": str(2 * IDEMPOTENCY_TTL_SECONDS),
    "bedrock_model_id": "   ",
    "sms_gateway": "http",
    "sms_http_base_url": SMS_HTTP_BASE_URL,
    "sms_message_type": "PROMOTIONAL",
    "sms_reconcile_minutes": "10",
    "sms_reconcile_deadline_hours": "6",
    "sms_unknown_alarm_minutes": "30",
    "phone_default_region": "by",
    # Token authentication: the stack makes the crm_token secret for it (not made by default).
    "crm_auth": "token",
    # SnapStart on the reply path: the webhook's API and autoreply's queue call aliases.
    "snapstart": "webhook,autoreply",
}


# The CRM sources' status maps (`pipeline.crm.status_map`), as `-c` passes them: JSON text.
BITRIX24_STAGES = '{"0": {"NEW": "new", "EXECUTING": "ready_for_pickup"}, "2": {"C2:NEW": "new"}}'
AMOCRM_STATUSES = '{"7001": {"70011": "new", "70013": "ready_for_pickup", "142": "completed"}}'
# Settings that must be valid values, not any text, to switch their consumer on.
REQUIRED_SETTING_VALUES = {
    "bedrock_model_id": BEDROCK_MODEL_ID,
    "bitrix24_stages": BITRIX24_STAGES,
    "amocrm_statuses": AMOCRM_STATUSES,
    "bot_application": "bot.examples.lead_bot:build",
    "crm_leads": "true",
}


def full_context() -> dict[str, Any]:
    """Context that switches on every consumer of the registry, whatever setting it requires,
    and every optional feature (FULL_FEATURES); `autoreply` stands down for the `bot` then
    (its `unless_setting`)."""
    settings = {
        c.requires_setting: REQUIRED_SETTING_VALUES.get(c.requires_setting, f"test-{c.requires_setting}")
        for c in CONSUMERS
        if c.requires_setting
    }
    return {**BASE_CONTEXT, **settings, **FULL_FEATURES}


@dataclass
class Synthesized:
    stack: PipelineStack
    assembly: CloudAssembly
    outdir: Path

    @cached_property
    def template(self) -> Template:
        return Template.from_stack(self.stack)

    @cached_property
    def resources(self) -> dict[str, dict[str, Any]]:
        resources: dict[str, dict[str, Any]] = self.template.to_json()["Resources"]
        return resources

    def logical_id(self, construct: Any) -> str:
        """Logical id of an L2 construct's CloudFormation resource (or of an L1 itself)."""
        element = getattr(construct.node, "default_child", None) or construct
        return str(Stack.of(construct).resolve(element.logical_id))


def synthesize(outdir: Path, context: dict[str, Any]) -> Synthesized:
    app, stack = build_app(context, outdir=str(outdir))
    assembly = app.synth()
    return Synthesized(stack=stack, assembly=assembly, outdir=outdir)


def run_app(
    outdir: Path, context: dict[str, Any], timeout: float = 300, args: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """`python app.py [args]` in a fresh interpreter, run from `outdir` (it must find the project by
    itself), with `context` as the CDK CLI passes `-c` values."""
    env = {
        **os.environ,
        "CDK_OUTDIR": str(outdir),
        "CDK_CONTEXT_JSON": json.dumps(context),
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }
    return subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "app.py"), *args],
        cwd=outdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
