"""What the local runtime changes from the deployment it stands for, and nothing more."""

from __future__ import annotations

import subprocess
import sys

import pytest

from infra.config import PipelineSettings
from local.overlay import (
    LOCAL_AMOCRM_STATUSES,
    LOCAL_BEDROCK_MODEL_ID,
    LOCAL_BITRIX24_STAGES,
    LOCAL_BOT_APPLICATION,
    local_deployment,
    local_overlay,
)
from local.settings import PROJECT_ROOT, LocalSettings
from pipeline.crm.status_map import parse_status_map
from pipeline.retention import IDEMPOTENCY_TTL_SECONDS

FAKES = {
    "telegram": "http://127.0.0.1:1001",
    "bedrock": "http://127.0.0.1:1002",
    "sms": "http://127.0.0.1:1003",
    "sns": "http://127.0.0.1:1004",
    "end_user_messaging": "http://127.0.0.1:1005",
}
MOTO = "http://127.0.0.1:1000"
CRM_SOURCE_SETTINGS = ("bitrix24_stages", "amocrm_statuses")
EVERY_FUNCTION = {
    "AWS_ENDPOINT_URL": MOTO,
    "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": FAKES["bedrock"],
    "TELEGRAM_API_BASE": FAKES["telegram"],
    "POWERTOOLS_TRACE_DISABLED": "1",
}


# A deployment that changes settings the local runtime must keep as they are.
CONFIGURED = PipelineSettings(
    telegram_bot_id="shop",
    idempotency_ttl_seconds=2 * IDEMPOTENCY_TTL_SECONDS,
    log_level="DEBUG",
    sms_origination_identity="MyShop",
    sms_message_type="PROMOTIONAL",
    telegram_ip_allowlist=True,
)


def test_the_deployment_keeps_end_user_messaging_the_stacks_default_and_every_other_setting() -> None:
    configured = CONFIGURED
    assert configured.sms_gateway == PipelineSettings().sms_gateway == "end_user_messaging"

    deployment = local_deployment(LocalSettings(deployment=configured), FAKES)

    assert deployment.telegram_ip_allowlist is False, "local callers are on loopback"
    assert deployment.bedrock_model_id == LOCAL_BEDROCK_MODEL_ID
    assert deployment.bot_application == LOCAL_BOT_APPLICATION
    assert deployment.crm_leads is True
    # The CRM stand-ins are connected with their demo maps (test_the_crm_stand_ins_...).
    changed = {
        "telegram_ip_allowlist",
        "bedrock_model_id",
        "bot_application",
        "crm_leads",
        *CRM_SOURCE_SETTINGS,
    }
    assert deployment.model_dump(exclude=changed) == configured.model_dump(exclude=changed)


def test_the_example_bot_runs_unless_a_bot_is_configured_or_it_is_turned_off() -> None:
    from pipeline.registry import enabled

    names = {c.name for c in enabled(local_deployment(LocalSettings(), FAKES).registry_settings())}
    assert "bot" in names and "autoreply" not in names
    own = LocalSettings.from_cdk_json(context={"bot_application": "bot.examples.lead_bot:conversation"})
    assert local_deployment(own, FAKES).bot_application == "bot.examples.lead_bot:conversation"
    off = local_deployment(LocalSettings(bot_consumer=False), FAKES)
    assert off.bot_application is None
    assert {"autoreply"} <= {c.name for c in enabled(off.registry_settings())} - {"bot"}


def test_only_the_bot_gets_the_crash_hooks() -> None:
    bot = local_overlay("bot", {}, aws_endpoint=MOTO, fakes=FAKES)
    assert bot["LOCAL_CRASH_HOOKS"] == "1"
    assert "LOCAL_CRASH_HOOKS" not in local_overlay("autoreply", {}, aws_endpoint=MOTO, fakes=FAKES)


@pytest.mark.parametrize(
    "settings",
    [
        LocalSettings(sms_gateway="http"),
        LocalSettings.from_cdk_json(
            context={"sms_gateway": "http", "sms_http_base_url": "https://sms.example.com/api"}
        ),
    ],
    ids=["local setting", "deployment setting"],
)
def test_the_http_gateway_is_the_sms_fake(settings: LocalSettings) -> None:
    deployment = local_deployment(settings, FAKES)

    assert (deployment.sms_gateway, deployment.sms_http_base_url) == ("http", FAKES["sms"])


def test_the_http_gateway_keeps_every_other_setting() -> None:
    configured = CONFIGURED

    deployment = local_deployment(LocalSettings(deployment=configured, sms_gateway="http"), FAKES)

    assert (deployment.sms_gateway, deployment.sms_http_base_url) == ("http", FAKES["sms"])
    changed = {
        "sms_gateway",
        "sms_http_base_url",
        "telegram_ip_allowlist",
        "bedrock_model_id",
        "bot_application",
        "crm_leads",
        *CRM_SOURCE_SETTINGS,
    }
    assert deployment.model_dump(exclude=changed) == configured.model_dump(exclude=changed)


def test_the_crm_consumer_runs_on_the_crm_stand_in_unless_turned_off() -> None:
    """Issue 23: `crm_leads` is off in a deployment by default; `make local` runs the crm
    consumer on the CRM stand-in (as every consumer that has one), `--no-crm-leads` keeps the
    deployment's (off unless cdk.json turns it on)."""
    from pipeline.registry import enabled

    assert PipelineSettings().crm_leads is False
    assert "crm" in {c.name for c in enabled(local_deployment(LocalSettings(), FAKES).registry_settings())}
    off = local_deployment(LocalSettings(crm_leads=False), FAKES)
    assert off.crm_leads is False
    assert "crm" not in {c.name for c in enabled(off.registry_settings())}
    configured = LocalSettings(deployment=PipelineSettings(crm_leads=True), crm_leads=False)
    assert local_deployment(configured, FAKES).crm_leads is True


def test_a_configured_bedrock_model_is_kept_and_no_ai_switches_the_consumer_off() -> None:
    configured = PipelineSettings(bedrock_model_id="amazon.nova-lite-v1:0")

    assert local_deployment(LocalSettings(deployment=configured), FAKES).bedrock_model_id == (
        "amazon.nova-lite-v1:0"
    )
    without_ai = LocalSettings(deployment=configured, ai_consumer=False)
    assert local_deployment(without_ai, FAKES).bedrock_model_id is None


def test_the_crm_stand_ins_are_connected_with_their_demo_maps_unless_the_deployment_maps_its_own() -> None:
    demo = local_deployment(LocalSettings(), FAKES)
    assert demo.bitrix24_stages == parse_status_map(LOCAL_BITRIX24_STAGES, "bitrix24_stages").to_json()
    assert demo.amocrm_statuses == parse_status_map(LOCAL_AMOCRM_STATUSES, "amocrm_statuses").to_json()

    own = PipelineSettings.from_context({"bitrix24_stages": {"2": {"C2:NEW": "new"}}})
    assert local_deployment(LocalSettings(deployment=own), FAKES).bitrix24_stages == '{"2":{"C2:NEW":"new"}}'

    unconnected = local_deployment(LocalSettings(deployment=own, crm_sources=False), FAKES)
    assert (unconnected.bitrix24_stages, unconnected.amocrm_statuses) == (None, None)


def test_the_demo_maps_name_statuses_the_sms_rules_send_for() -> None:
    """`make local`'s deals and leads can be moved into a status with an SMS rule."""
    from pipeline.sms.rules import load_rules

    rules = load_rules()
    for demo in (LOCAL_BITRIX24_STAGES, LOCAL_AMOCRM_STATUSES):
        statuses = {status for stages in demo.values() for status in stages.values()}
        assert {"ready_for_pickup", "shipped"} <= statuses
        assert all(rules.sends_for(status) for status in ("ready_for_pickup", "shipped"))


def test_the_deployment_needs_the_stand_in_of_its_gateway() -> None:
    with pytest.raises(ValueError, match="'end_user_messaging' URL"):
        local_deployment(LocalSettings(), {"sms": "http://127.0.0.1:1"})
    with pytest.raises(ValueError, match="'sms' URL"):
        local_deployment(LocalSettings(sms_gateway="http"), {"end_user_messaging": "http://127.0.0.1:1"})


@pytest.mark.parametrize(
    ("function", "environment", "extra"),
    [
        ("webhook", {"EVENTS_TOPIC_ARN": "arn"}, {"AWS_ENDPOINT_URL_SNS": FAKES["sns"]}),
        # A consumer that publishes (a CRM source's) goes through the SNS proxy too: its events are explained.
        (
            "bitrix24",
            {"CONSUMER_NAME": "bitrix24", "EVENTS_TOPIC_ARN": "arn"},
            {"AWS_ENDPOINT_URL_SNS": FAKES["sns"]},
        ),
        ("sms", {"SMS_GATEWAY": "http"}, {"SMS_LOOKUP_SETTLE_SECONDS": "10"}),
        ("reconciler", {"SMS_GATEWAY": "http"}, {"SMS_LOOKUP_SETTLE_SECONDS": "10"}),
        (
            "sms",
            {"SMS_GATEWAY": "end_user_messaging"},
            {
                "SMS_LOOKUP_SETTLE_SECONDS": "10",
                "AWS_ENDPOINT_URL_PINPOINT_SMS_VOICE_V2": FAKES["end_user_messaging"],
            },
        ),
        (
            "reconciler",
            {"SMS_GATEWAY": "end_user_messaging"},
            {
                "SMS_LOOKUP_SETTLE_SECONDS": "10",
                "AWS_ENDPOINT_URL_PINPOINT_SMS_VOICE_V2": FAKES["end_user_messaging"],
            },
        ),
        ("sms_events", {"SMS_GATEWAY": "end_user_messaging"}, {}),  # it only records events
        ("store", {"CONSUMER_NAME": "store"}, {}),
    ],
)
def test_the_overlay_adds_the_local_endpoints(
    function: str, environment: dict[str, str], extra: dict[str, str]
) -> None:
    overlay = local_overlay(function, environment, aws_endpoint=MOTO, fakes=FAKES)

    assert overlay == {**EVERY_FUNCTION, **extra}


def test_the_overlay_disables_tracing_only_where_the_stack_traces() -> None:
    untraced = {"CONSUMER_NAME": "store", "POWERTOOLS_TRACE_DISABLED": "true"}

    overlay = local_overlay("store", untraced, aws_endpoint=MOTO, fakes=FAKES)

    assert "POWERTOOLS_TRACE_DISABLED" not in overlay
    assert overlay == {k: v for k, v in EVERY_FUNCTION.items() if k != "POWERTOOLS_TRACE_DISABLED"}


def test_the_overlay_never_changes_what_the_stack_sets() -> None:
    with pytest.raises(ValueError, match="TELEGRAM_API_BASE"):
        local_overlay(
            "autoreply", {"TELEGRAM_API_BASE": "https://api.telegram.org"}, aws_endpoint=MOTO, fakes=FAKES
        )


def test_the_local_runtime_never_loads_the_cdk() -> None:
    """It reads the stack's settings and environments from modules that import no CDK (nor Node)."""
    code = (
        "import sys, local.runtime, local.resources, local.overlay, infra.config, infra.environment\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('aws_cdk', 'constructs', 'jsii'))\n"
        "print(loaded)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"
