"""The local runtime's settings: the deployment settings the stack reads, plus local-only values.

The deployment knobs (bot id, grace period, idempotency TTL, log level, Bedrock model) come from
the same place as for `cdk deploy`: cdk.json's "context". Their defaults mirror
`infra.settings.PipelineSettings`, which is not imported because it loads the CDK (and Node).
One difference on purpose: without a configured `bedrock_model_id` the local runtime still
enables the `ai` consumer with a placeholder model id, because the Bedrock fake answers it.

The local secrets are fixed, documented values (everything listens on loopback only), so the
curl examples in local/README.md work without reading any file.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from local.fakes.sms import DEFAULT_TOKEN as SMS_GATEWAY_TOKEN
from local.fakes.telegram import DEFAULT_BOT_TOKEN

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CDK_JSON = PROJECT_ROOT / "cdk.json"
LOCAL_BEDROCK_MODEL_ID = "anthropic.claude-3-haiku-20240307-v1:0"
# Context keys of the stack that change how functions behave (see infra/settings.py).
DEPLOYMENT_KEYS = (
    "stack_name",
    "telegram_bot_id",
    "secret_rotation_grace_seconds",
    "idempotency_ttl_seconds",
    "log_level",
    "bedrock_model_id",
)


@dataclass(frozen=True)
class LocalSettings:
    # -- as in the stack (cdk.json context) ---------------------------------------------------------
    stack_name: str = "TelegramCrmPipeline"
    telegram_bot_id: str = "default"
    secret_rotation_grace_seconds: int = 3600
    idempotency_ttl_seconds: int = 259_200
    log_level: str = "INFO"
    bedrock_model_id: str | None = LOCAL_BEDROCK_MODEL_ID
    metrics_namespace: str = "TelegramCrmPipeline"
    # -- local only ---------------------------------------------------------------------------------
    region: str = "eu-central-1"
    telegram_secret: str = "local-telegram-secret-token"  # noqa: S105 - a documented local value
    crm_signing_key: str = "local-crm-signing-key"
    telegram_bot_token: str = DEFAULT_BOT_TOKEN
    crm_auth_header: str = "Bearer local"
    sms_gateway_token: str = SMS_GATEWAY_TOKEN
    # How often the reconciler's schedule fires locally (in AWS: its EventBridge rule's rate).
    reconcile_every_seconds: float = 30.0

    def registry_settings(self) -> dict[str, Any]:
        """What `pipeline.registry.enabled()` reads `requires_setting` keys from."""
        return asdict(self)

    @classmethod
    def from_cdk_json(cls, path: Path = CDK_JSON, **overrides: Any) -> LocalSettings:
        """Defaults, overlaid with the deployment keys set in cdk.json's context, then `overrides`."""
        context: dict[str, Any] = {}
        if path.is_file():
            document = json.loads(path.read_text())
            context = document.get("context", {}) if isinstance(document, dict) else {}
        defaults = cls()
        given: dict[str, Any] = {}
        for key in DEPLOYMENT_KEYS:
            value = context.get(key)
            if value in (None, ""):
                continue
            # `-c key=value` style strings, as the CDK passes them, become the field's type.
            given[key] = int(value) if isinstance(getattr(defaults, key), int) else str(value)
        return replace(defaults, **{**given, **overrides})
