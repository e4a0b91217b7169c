"""Everything the local runtime does differently from AWS, in one place.

The functions' environments are built by `infra.environment`, the builder the CDK stack uses,
from the deployment settings cdk.json gives (`infra.config`). On top of that, locally:

1. The deployment is changed where AWS has no local stand-in (`local_deployment`):
   - the SMS gateway is the deployment's (End User Messaging by default, as in the stack, with
     its configuration set and `sms_events`), unless `LocalSettings.sms_gateway` picks another
     (`python -m local --sms-gateway http`); the HTTP gateway is the SMS fake;
   - the `ai` consumer runs with LOCAL_BEDROCK_MODEL_ID when no `bedrock_model_id` is configured
     (the Bedrock fake answers any model), or not at all with `python -m local --no-ai`;
   - the `bot` consumer runs the example bot (LOCAL_BOT_APPLICATION) when no `bot_application`
     is configured, and with it the canned `autoreply` stands down as in a deployment with a bot;
     `python -m local --no-bot` leaves the bot off (and the autoreply on);
   - the `crm` consumer runs (`crm_leads`) on the CRM stand-in, or as the deployment says with
     `python -m local --no-crm-leads`;
   - no Telegram IP allow-list: local callers are on loopback, never in Telegram's ranges;
   - Bitrix24 and amoCRM are connected to their stand-ins, with LOCAL_BITRIX24_STAGES and
     LOCAL_AMOCRM_STATUSES (the stand-ins' demo pipelines) where the deployment maps none, or
     not at all with `python -m local --no-crm-sources`.
2. Each function's environment gets the local overlay (`local_overlay`), which only adds keys:
   the endpoints of moto and the fakes (SNS, for those that publish to the events topic: the
   fault proxy, which also explains each event's routing; for the functions that send SMS through End User
   Messaging, `AWS_ENDPOINT_URL_PINPOINT_SMS_VOICE_V2`: its stand-in), no X-Ray (there is no
   daemon: POWERTOOLS_TRACE_DISABLED, unless the stack already sets it, its `tracing` setting
   being off), a short SMS lookup settle time, and for the bot LOCAL_CRASH_HOOKS: the Telegram
   stand-in may then ask it to die right after a journaled Bot API answer (`POST
   /_crash_after`, local.fakes.telegram), which is how the e2e tests crash it mid-conversation.

`tests/infra/test_infra_local_parity.py` checks that nothing else differs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from infra.config import PipelineSettings
from infra.environment import RECONCILER, SMS_CONSUMER, WEBHOOK
from pipeline.crm.order_events import TOPIC_ENV as EVENTS_TOPIC_ENV  # who has it publishes there
from pipeline.observability import TRACE_DISABLED_ENV
from pipeline.telegram_bot.reference import CRASH_HOOKS_ENV

if TYPE_CHECKING:
    from local.settings import LocalSettings

LOCAL_BEDROCK_MODEL_ID = "anthropic.claude-3-haiku-20240307-v1:0"
# The example bot of functions/bot/examples (a conversation that ends in a CRM lead).
LOCAL_BOT_APPLICATION = "bot.examples.lead_bot:build"
BOT_CONSUMER = "bot"
# The demo pipelines of the CRM stand-ins, in the statuses of team/sms_rules.json: Bitrix24's
# default deal category (its system stages), and an amoCRM pipeline with the system statuses
# 142 (won) and 143 (lost).
LOCAL_BITRIX24_STAGES = {
    "0": {
        "NEW": "new",
        "PREPARATION": "processing",
        "PREPAYMENT_INVOICE": "awaiting_payment",
        "EXECUTING": "ready_for_pickup",
        # A custom stage (Bitrix24 names them UC_*): the pickup shelf, the same status as EXECUTING.
        "UC_PICKUP": "ready_for_pickup",
        "FINAL_INVOICE": "shipped",
        "WON": "completed",
        "LOSE": "cancelled",
        "APOLOGY": "cancelled",
    }
}
LOCAL_AMOCRM_PIPELINE = 7001
LOCAL_AMOCRM_STATUSES = {
    str(LOCAL_AMOCRM_PIPELINE): {
        "70011": "new",
        "70012": "processing",
        "70013": "ready_for_pickup",
        "70014": "shipped",
        "142": "completed",
        "143": "cancelled",
    }
}
# Seconds an `unknown` SMS must age before a lookup miss counts as proof it never arrived; AWS
# keeps pipeline.sms.settings' default (120 s), locally rehearsed gateway hangs resolve sooner.
LOCAL_SMS_LOOKUP_SETTLE_SECONDS = "10"
# botocore's service-specific endpoint variable for `pinpoint-sms-voice-v2` (service id
# "Pinpoint SMS Voice V2"): only End User Messaging calls go to its stand-in.
END_USER_MESSAGING_ENDPOINT = "AWS_ENDPOINT_URL_PINPOINT_SMS_VOICE_V2"
# The functions that send SMS (the worker, and the reconciler's resends).
SMS_SENDERS = frozenset({SMS_CONSUMER, RECONCILER.service_name})


def local_deployment(settings: LocalSettings, fakes: Mapping[str, str]) -> PipelineSettings:
    """The deployment settings the local runtime runs with (see the module docstring, 1.)."""
    deployment = settings.deployment
    gateway = settings.sms_gateway or deployment.sms_gateway
    stand_in = "sms" if gateway == "http" else "end_user_messaging"
    if stand_in not in fakes:
        raise ValueError(
            f"the local runtime sends SMS ({gateway}) through a stand-in: `fakes` needs a {stand_in!r} URL"
        )
    model_id = (deployment.bedrock_model_id or LOCAL_BEDROCK_MODEL_ID) if settings.ai_consumer else None
    changes: dict[str, object] = {
        "sms_gateway": gateway,
        "bedrock_model_id": model_id,
        "bot_application": (deployment.bot_application or LOCAL_BOT_APPLICATION)
        if settings.bot_consumer
        else None,
        "crm_leads": deployment.crm_leads or settings.crm_leads,
        "telegram_ip_allowlist": False,
        "bitrix24_stages": (deployment.bitrix24_stages or LOCAL_BITRIX24_STAGES)
        if settings.crm_sources
        else None,
        "amocrm_statuses": (deployment.amocrm_statuses or LOCAL_AMOCRM_STATUSES)
        if settings.crm_sources
        else None,
    }
    if gateway == "http":
        changes["sms_http_base_url"] = fakes["sms"]
    return PipelineSettings.model_validate({**deployment.model_dump(), **changes})


def local_overlay(
    function: str, environment: Mapping[str, str], *, aws_endpoint: str, fakes: Mapping[str, str]
) -> dict[str, str]:
    """What a function gets locally on top of `environment`, its environment from the stack's
    builder (see the module docstring, 2.). Never changes a key the stack sets."""
    overlay = {
        "AWS_ENDPOINT_URL": aws_endpoint,
        "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": fakes["bedrock"],
        "TELEGRAM_API_BASE": fakes["telegram"],
    }
    if TRACE_DISABLED_ENV not in environment:
        # A stack that traces (the `tracing` setting); there is no X-Ray daemon locally.
        overlay[TRACE_DISABLED_ENV] = "1"
    if function == WEBHOOK.service_name or EVENTS_TOPIC_ENV in environment:
        # Those that publish to the events topic (the webhook, the CRM sources' consumers) go
        # through the fault proxy, which also explains each event's routing; the other workers
        # and operators see moto unchanged.
        overlay["AWS_ENDPOINT_URL_SNS"] = fakes["sns"]
    if function == BOT_CONSUMER:
        overlay[CRASH_HOOKS_ENV] = "1"
    if function in SMS_SENDERS and "SMS_GATEWAY" in environment:
        overlay["SMS_LOOKUP_SETTLE_SECONDS"] = LOCAL_SMS_LOOKUP_SETTLE_SECONDS
        if environment["SMS_GATEWAY"] == "end_user_messaging":
            overlay[END_USER_MESSAGING_ENDPOINT] = fakes["end_user_messaging"]
    overridden = sorted(set(overlay) & set(environment))
    if overridden:
        raise ValueError(f"the local overlay must not change what the stack sets: {overridden}")
    return overlay
