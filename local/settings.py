"""The local runtime's settings: the deployment settings the stack reads, plus local-only values.

The deployment settings are `infra.config.PipelineSettings` (the CDK stack's own model, which
imports no CDK), read from the same place as for `cdk deploy`: cdk.json's "context". What the
local runtime then changes, and why, is in `local.overlay`.

The local secrets are fixed, documented values (everything listens on loopback only), so the
curl examples in local/README.md work without reading any file.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from infra import config
from infra.config import PipelineSettings
from local.fakes.sms import DEFAULT_TOKEN as SMS_GATEWAY_TOKEN
from local.fakes.telegram import DEFAULT_BOT_TOKEN
from pipeline.telegram_bot.reference import ApplicationReference

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CDK_JSON = PROJECT_ROOT / "cdk.json"


@dataclass(frozen=True)
class LocalSettings:
    # -- the deployment the local runtime stands for (cdk.json's context) -------------------------
    deployment: PipelineSettings = field(default_factory=PipelineSettings)
    # Run the `ai` consumer on the Bedrock fake, with a placeholder model unless one is configured
    # (`local.overlay`); False leaves it off (`python -m local --no-ai`).
    ai_consumer: bool = True
    # Run the `bot` consumer with the example bot unless one is configured (`local.overlay`),
    # which turns the canned `autoreply` off; False leaves the bot off (`python -m local --no-bot`).
    bot_consumer: bool = True
    # The SMS gateway locally: None runs the deployment's (End User Messaging by default, on its
    # stand-in, as the stack does); "http" the generic HTTP gateway on the SMS fake
    # (`python -m local --sms-gateway http`).
    sms_gateway: Literal["end_user_messaging", "http"] | None = None
    # Run the `crm` consumer on the CRM stand-in (`crm_leads`, off in a deployment by default), as
    # `make local` shows every consumer that has a stand-in; False leaves it as the deployment
    # says (`python -m local --no-crm-leads`: off unless cdk.json turns it on).
    crm_leads: bool = True
    # Connect the Bitrix24 portal and amoCRM account stand-ins, with the demo status maps of
    # `local.overlay` where the deployment maps none (`python -m local --no-crm-sources`: off).
    crm_sources: bool = True
    # -- local only ---------------------------------------------------------------------------------
    region: str = "eu-central-1"
    telegram_secret: str = "local-telegram-secret-token"  # noqa: S105 - a documented local value
    crm_signing_key: str = "local-crm-signing-key"
    # The static token (`crm_auth` token or signature_or_token); A-Za-z0-9 like the generated one.
    crm_token: str = "localCrmToken0123456789abcdefghijklmnopqrstuv"  # noqa: S105 - a documented local value
    telegram_bot_token: str = DEFAULT_BOT_TOKEN
    # The Bitrix24 portal stand-in's outgoing-webhook token and inbound-webhook code, and the
    # amoCRM stand-in's long-lived token (what the operator would copy from each CRM).
    bitrix24_application_token: str = "localBitrixAppToken0123456789"  # noqa: S105 - a documented local value
    bitrix24_webhook_code: str = "localbitrixcode"
    amocrm_token: str = "localAmoLongLivedToken0123456789"  # noqa: S105 - a documented local value
    crm_auth_header: str = "Bearer local"
    sms_gateway_token: str = SMS_GATEWAY_TOKEN
    # The token of the HTTP SMS gateway's inbound callback URL (`POST /sms/inbound/<token>`).
    sms_inbound_token: str = "localSmsInboundToken0123456789"  # noqa: S105 - a documented local value
    # How often the reconciler's schedule fires locally (in AWS: its EventBridge rule's rate).
    reconcile_every_seconds: float = 30.0
    # How often the CRM history sweep runs locally (in AWS: every `crm_sweep_minutes`).
    crm_sweep_every_seconds: float = 30.0
    # Worker processes (Lambda execution environments) per queue consumer, at most: None is each
    # consumer's deployed `max_concurrency` (its event source's MaximumConcurrency); a number is
    # every consumer's (`python -m local --workers N`).
    consumer_workers: int | None = None
    # Start one worker per consumer and add one while all are busy and messages wait, as Lambda
    # scales up (`local.worker_pool`); False starts every consumer's maximum at once.
    scale_workers_on_demand: bool = True
    # Gather each consumer's batching window before invoking it, as Lambda's SQS event source does
    # (`batching_window_seconds`: store, crm, analytics); False invokes with what one receive
    # returns, for tests and benchmarks that wait for every consumer between steps
    # (`python -m local --no-batching-windows`).
    batching_windows: bool = True

    @property
    def stack_name(self) -> str:
        return self.deployment.stage_stack_name

    @property
    def telegram_bot_id(self) -> str:
        """The bot identity in Telegram event ids (`telegram:<bot id>:<update id>`)."""
        return self.deployment.telegram_bot_id

    @classmethod
    def from_cdk_json(
        cls, path: Path = CDK_JSON, *, context: Mapping[str, Any] | None = None, **local: Any
    ) -> LocalSettings:
        """The deployment settings from cdk.json's context overlaid with `context` (as `cdk -c`
        would), and the local-only values in `local` (others keep their defaults)."""
        given: dict[str, Any] = {}
        if path.is_file():
            document = json.loads(path.read_text(encoding="utf-8"))
            given = document.get("context", {}) if isinstance(document, dict) else {}
        deployment = PipelineSettings.from_context({**given, **(context or {})})
        return cls(deployment=deployment, **local)

    def with_bot(self, value: str) -> LocalSettings:
        """These settings running the bot `value` ("package.module:callable", `python -m local --bot`)
        instead of cdk.json's: refused as the synth refuses it (infra.config), with a message that
        says where the module file was looked for, since a typo would otherwise fail every update."""
        reference = ApplicationReference.parse(value)
        if reference.module_file(config.FUNCTIONS_DIR) is None:
            base = "functions/" + "/".join(reference.module.split("."))
            raise ValueError(
                f"no module {reference.module!r} under functions/ (no {base}.py nor {base}/__init__.py)"
            )
        deployment = PipelineSettings.model_validate(
            {**self.deployment.model_dump(), "bot_application": str(reference)}
        )
        return dataclasses.replace(self, deployment=deployment, bot_consumer=True)
