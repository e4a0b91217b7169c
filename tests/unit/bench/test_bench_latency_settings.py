"""`bench latency` times the replies on the stack `cdk.json` deploys: the consumers its deployment
has, plus `crm`, whose lead the inline bot makes too; none of what `make local` adds besides on
its stand-ins (`ai`, the CRM sources), which would work on the same /start beside autoreply."""

from __future__ import annotations

from bench.common import deployed_default_settings
from bench.latency import reply_settings
from infra.config import PipelineSettings
from local.overlay import local_deployment
from pipeline.registry import enabled

FAKES = {"end_user_messaging": "http://127.0.0.1:1", "sms": "http://127.0.0.1:2"}


def running(deployment: PipelineSettings) -> set[str]:
    return {consumer.name for consumer in enabled(deployment.registry_settings())}


def test_the_replies_run_the_deployed_consumers_and_the_inline_bots_lead_only() -> None:
    settings = reply_settings()
    deployed = running(settings.deployment)
    local = running(local_deployment(settings, FAKES))

    assert local == deployed | {"crm"}
    assert "autoreply" in local


def test_make_locals_defaults_would_add_ai_and_the_crm_sources() -> None:
    # What the fix took out: without it the replies ran these beside autoreply.
    added = running(local_deployment(deployed_default_settings(), FAKES)) - running(
        reply_settings().deployment
    )
    assert {"ai", "crm", "bitrix24", "amocrm"} <= added
