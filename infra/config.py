"""Deployment settings, read from CDK context (`cdk deploy -c key=value` or cdk.json's "context").

Every knob has a default here and only here, so `python app.py` with no context deploys a
working pipeline. Values given with `-c` arrive as strings; pydantic's lax mode converts them.

This module imports no CDK (nor Node): the local runtime reads the same settings from cdk.json
through it. The CDK-only views of these values (RetentionDays, log level and removal policy
enums, reading a construct's context) live in `infra.settings`.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

from infra.paths import FUNCTIONS_DIR
from pipeline import pacing, phones
from pipeline.crm.contract import DEFAULT_CRM_AUTH, CrmAuth, accepts_token
from pipeline.crm.status_map import parse_status_map
from pipeline.registry import CONSUMERS, enabled
from pipeline.retention import IDEMPOTENCY_TTL_SECONDS, check_idempotency_ttl
from pipeline.telegram_bot.reference import ApplicationReference
from pipeline.validation import Refusals


@functools.cache
def powertools_parameter_name(version: str) -> str:
    """Public SSM parameter whose value is the Powertools layer ARN for our runtime and architecture
    (the stack reads it at deploy time; `bin/ops doctor` checks that the region has it)."""
    return f"/aws/service/powertools/python/arm64/python3.13/{version}"


def application_refusals(reference: str, functions_dir: str) -> tuple[str, ...]:
    """What the bot function would refuse when it builds this Application (a non-persistent
    conversation, arbitrary callback data: `pipeline.telegram_bot.engine.build_refusals`), found
    by building it here as the function will. Best effort: a build that fails for another reason
    (it needs the function's environment) is left to the function, which dead-letters each
    update with that reason."""
    if functions_dir not in sys.path:
        sys.path.append(functions_dir)  # where the function imports it from (its code asset)
    try:
        from pipeline.telegram_bot.engine import build_refusals

        return tuple(build_refusals(ApplicationReference.parse(reference)))
    except Exception:
        return ()


LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]

# The retention periods CloudWatch Logs accepts, in days.
# fmt: off
LOG_RETENTION_DAYS = (
    1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653,
)
# fmt: on

# The stack name of the default stage (and of every deployment made before stages existed).
DEFAULT_STACK_NAME = "TelegramCrmPipeline"
# -- stages ------------------------------------------------------------------------------------
# One deployment of the pipeline (`cdk deploy -c stage=prod`); several share an account and region.
DEFAULT_STAGE = "dev"
# Short lowercase letters and digits: a stage ends every name made from it (stack, topics,
# dashboards, the metric namespace, the SMS configuration set) and a path of `make local`'s.
STAGE_PATTERN = r"^[a-z][a-z0-9]{0,15}$"
# cdk.json's per-stage settings, laid over the others: {"stages": {"prod": {"alarms": "full"}}}.
STAGES_KEY = "stages"
# CloudFormation's longest stack name.
STACK_NAME_MAX = 128
# `make local`'s state (stack.json, logs, persisted queues and tables), relative to the project.
LOCAL_STATE_DIR = Path(".local")


def local_state_dir(stage: str) -> Path:
    """`make local`'s state folder of a stage, relative to the project: `.local` for the default
    stage (where it always was), `.local/stages/<stage>` for another (beside `.local/demo`)."""
    return LOCAL_STATE_DIR if stage == DEFAULT_STAGE else LOCAL_STATE_DIR / "stages" / stage


def valid_stage(stage: str) -> str:
    """`stage` if it is a stage name (STAGE_PATTERN); ValueError saying what one is."""
    if re.fullmatch(STAGE_PATTERN, stage) is None:
        raise ValueError(
            f"stage {stage!r}: a stage name is 1-16 lowercase letters and digits, starting with a letter"
        )
    return stage


def _true_or_false(value: Any) -> Any:
    """`-c tracing=yes` must not pass for true nor quietly for false: only true/false are read."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError("must be true or false")


# A switch from cdk.json (a JSON boolean) or `-c` (the text "true" or "false").
ContextBool = Annotated[bool, BeforeValidator(_true_or_false)]

# What SnapStart may be switched on for: the webhook (its API calls an alias) and the queue
# consumers (their event source mappings do); the scheduled functions and the SMS delivery
# events' subscriber are called by triggers not built for an alias, and run rarely.
SNAPSTART_WEBHOOK = "webhook"
SNAPSTART_FUNCTIONS = (SNAPSTART_WEBHOOK, *(c.name for c in CONSUMERS))

# Telegram's webhook source ranges (https://core.telegram.org/resources/cidr.txt, IPv4).
TELEGRAM_CIDRS = ("149.154.160.0/20", "91.108.4.0/22")

# What SendTextMessage accepts as OriginationIdentity except a bare phone number (an IAM grant
# can name a number only by its id or ARN): an ARN, a phone number or pool id, or a sender id.
ORIGINATION_IDENTITY = re.compile(
    r"^(arn:aws[a-z-]*:sms-voice:[a-z0-9-]+:\d{12}:(phone-number|pool|sender-id)/\S+"
    r"|phone-number-[0-9a-f]+|pool-[0-9a-f]+|[A-Za-z0-9_-]{1,11})$"
)

# Context keys whose blank value means "not set".
OPTIONAL_TEXT_SETTINGS = (
    "bedrock_model_id",
    "sms_origination_identity",
    "sms_configuration_set",
    "sms_http_base_url",
    "alarm_email",
    "telegram_bot_username",
    "bot_application",
)
# The field holding context keys of registry consumers this model does not declare.
CONSUMER_SETTINGS = "consumer_settings"
# What a context key of this app looks like: an identifier, dotted ones included (`alarm_email.x`
# is a misspelt key, not the CDK's). The CDK's own keys never do (`@aws-cdk/...` feature flags,
# `aws:cdk:...`, `cdk-...`, `acknowledged-issue-numbers`, lookups `availability-zones:...`), so
# only keys like this are checked against the known ones; the others are the CDK's business.
APP_CONTEXT_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_.]*")


def is_app_key(key: str) -> bool:
    """Whether a context key is one this app reads or misspelt (APP_CONTEXT_KEY, whole)."""
    return APP_CONTEXT_KEY.fullmatch(key) is not None


def assignment(word: str) -> tuple[str, str]:
    """`KEY=VALUE` as the CDK CLI's `-c` and `bin/ops configure` take it: the value may hold "=" or
    be empty, the key may not, nor hold a blank or control character (`tracing =true` would set
    a key no setting reads). ValueError: the caller adds how to write it."""
    key, equals, value = word.partition("=")
    if not key or not equals:
        raise ValueError(f"{word!r} is not KEY=VALUE")
    if not key.isprintable() or any(character.isspace() for character in key):
        raise ValueError(f"{word!r}: the key {key!r} holds a blank or control character")
    return key, value


# A refused value is shown cut to this many characters (settings hold no secrets, but a value
# pasted by mistake should not fill the terminal).
SHOWN_VALUE_CHARS = 40


class PipelineSettings(BaseModel):
    """The context keys this app reads; anything else in the context (feature flags) is ignored."""

    # Every number finite: `inf` passes `gt=0` and would reach the template as Infinity.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    # The deployment this synth is (DEFAULT_STAGE, or a key of cdk.json's "stages", whose
    # settings are laid over the others): it names the stack and everything in it.
    stage: str = Field(default=DEFAULT_STAGE, pattern=STAGE_PATTERN)
    # The default stage's CloudFormation stack name; any other stage's is `<stack_name>-<stage>`
    # (`stage_stack_name`). CloudFormation's rule (the CDK refuses any other name at synth).
    stack_name: str = Field(
        default=DEFAULT_STACK_NAME, max_length=STACK_NAME_MAX, pattern=r"^[A-Za-z][A-Za-z0-9-]*$"
    )
    # Version of the AWS-managed Powertools layer (resolved from its public SSM parameter);
    # keep equal to the aws-lambda-powertools pin in requirements.txt. "latest" is accepted.
    powertools_version: str = Field(default="3.37.0", pattern=r"^(latest|\d+\.\d+\.\d+)$")
    log_retention_days: int = 30
    log_level: LogLevel = "INFO"
    # HTTP API stage throttling: steady requests per second and burst.
    api_rate_limit: float = Field(default=50, gt=0)
    api_burst_limit: int = Field(default=100, ge=0)
    telegram_bot_id: str = Field(default="default", min_length=1)
    # The bot's global rate, messages a second, shared by its sending consumers' environments
    # (`pipeline.pacing`): Telegram's 30 by default; up to 1000 with paid broadcasts, which then
    # only the broadcast uses (replies stay within Telegram's free 30, `infra.environment`).
    telegram_messages_per_second: float = Field(
        default=pacing.TELEGRAM_MESSAGES_PER_SECOND, gt=0, le=pacing.TELEGRAM_MAX_MESSAGES_PER_SECOND
    )
    # The share of that rate a broadcast uses (`pipeline.broadcast`): interactive replies keep the
    # rest, so users talking to the bot during a broadcast still get answers.
    broadcast_share: float = Field(default=pacing.BROADCAST_SHARE, gt=0, lt=1)
    # Broadcast messages sent with `allow_paid_broadcast` (Telegram Stars, up to 1000 a second:
    # raise telegram_messages_per_second with it).
    allow_paid_broadcast: ContextBool = False
    # The bot's own username (without "@"): the autoreply answers "/start@<it>" and "/start" but
    # not "/start@other_bot" (groups with several bots). Unset: whatever bot a command names.
    telegram_bot_username: str | None = Field(default=None, pattern=r"^[A-Za-z][A-Za-z0-9_]{4,31}$")
    secret_rotation_grace_seconds: int = Field(default=3600, ge=0)
    # How POST /crm/events is authenticated: "signature" (HMAC X-Signature), "token" (the static
    # crm_token secret in a header or the URL path), or "signature_or_token" (either).
    crm_auth: CrmAuth = DEFAULT_CRM_AUTH
    # Idempotency records outlive every redelivery, DLQ redrives included (pipeline.retention).
    idempotency_ttl_seconds: int = IDEMPOTENCY_TTL_SECONDS
    # "retain" keeps tables, log groups and the topic key when the stack is deleted; "destroy"
    # (for development stacks) deletes them with it.
    removal_policy: Literal["retain", "destroy"] = "retain"
    # Enables the `crm` consumer: each new Telegram contact becomes a lead in the CRM the
    # `crm_api` secret names (created with it). Off, a Telegram-only deploy has no CRM to fail on.
    crm_leads: ContextBool = False
    # Enables the `ai` consumer; a Bedrock model id such as "anthropic.claude-3-haiku-20240307-v1:0".
    bedrock_model_id: str | None = None
    # Enables the `bot` consumer (and turns the canned `autoreply` off): the user's
    # python-telegram-bot Application, "package.module:callable" under functions/, the callable
    # taking the pre-configured ApplicationBuilder and returning the built Application.
    bot_application: str | None = None
    # -- SMS (the `sms` consumer, its reconciler and delivery events; see infra.constructs.sms) --
    # "end_user_messaging" (AWS End User Messaging SMS, pipeline.sms.settings' default) or "http"
    # (a generic HTTP gateway at sms_http_base_url, token in the sms_gateway secret).
    sms_gateway: Literal["end_user_messaging", "http"] = "end_user_messaging"
    # End User Messaging sender: an ARN, a phone-number-/pool- id, or a sender id. Unset: the
    # service picks one of the account's identities (and the grant covers all of them).
    sms_origination_identity: str | None = None
    # An existing configuration set (name or ARN) whose event destination the operator points at
    # the stack's SmsEventsTopicArn. Unset: the stack creates one wired to that topic.
    sms_configuration_set: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_:/-]{1,256}$")
    sms_message_type: Literal["TRANSACTIONAL", "PROMOTIONAL"] = "TRANSACTIONAL"
    sms_http_base_url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    sms_reconcile_minutes: int = Field(default=5, ge=1, le=1440)
    sms_reconcile_deadline_hours: float = Field(default=24, gt=0, le=24 * 14)
    # Alarm when an `unknown` SMS outcome has stayed unresolved this long.
    sms_unknown_alarm_minutes: int = Field(default=60, ge=5)
    # -- CRM transitions (the bitrix24/amocrm consumers and the catch-up sweep; pipeline.crm.sync) --
    # A CRM transition first seen later than this after it happened is recorded and counted
    # (CrmTransitionsTooOld, alarmed), never texted: an SMS "your order is ready" a day late is
    # worse than none. At least two sweep periods, so the sweep always finds a lost webhook's move
    # in time; at most a day.
    sms_max_age_minutes: int = Field(default=120, ge=10, le=1440)
    # How often the catch-up sweep reads each connected CRM's history (no sweep without a CRM).
    crm_sweep_minutes: int = Field(default=5, ge=1, le=60)
    # How far back each sweep re-reads what it had read, for history records that became visible
    # late (written before a record the sweep already read, committed after); both CRMs.
    crm_sweep_overlap_seconds: int = Field(default=60, ge=0, le=3600)
    # -- operations -------------------------------------------------------------------------------
    # Which alarms the stack makes (infra.constructs.monitoring.ESSENTIAL_ALARMS): "full", every
    # alarm; "essential", the few a small bot needs (dead letters, webhook errors, SMS unknowns),
    # for a bill at rest within the account's free alarm metrics.
    alarms: Literal["full", "essential"] = "full"
    # Where alarm notifications are e-mailed (SNS asks the address to confirm first).
    alarm_email: str | None = Field(default=None, pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
    # Accept Telegram webhook calls only from Telegram's published ranges (TELEGRAM_CIDRS).
    telegram_ip_allowlist: ContextBool = False
    # X-Ray: active tracing of every function (and the events topic), with its write grants and
    # Powertools Tracer capturing. Off by default: tracing every invocation is more than half the
    # bill per million updates (bench/cost.py), and the X-Ray SDK is the largest part of a cold
    # start's imports; off, the functions never import it (pipeline.observability.service_tracer).
    tracing: ContextBool = False
    # Lambda SnapStart on these functions (comma-separated: "webhook", or a deployed queue
    # consumer's name, e.g. "webhook,autoreply"): each publishes a version, its trigger calls it
    # through the alias `live`, and a cold start restores a snapshot of the init instead of
    # running it. Off everywhere by default: each snapshot is billed all month (`bench bill`
    # prints the price; on the reply path it does not fit the fixed monthly goals, docs/perf.md).
    snapstart: tuple[str, ...] = ()
    # -- CRM phone numbers ----------------------------------------------------------------------
    # Region (ISO 3166 alpha-2, e.g. "BY") in which the webhook reads national phone forms
    # ("8 029 123-45-67"); unset: only international (+...) forms are accepted (pipeline.phones).
    phone_default_region: str | None = None
    # -- CRMs connected by their own webhooks (pipeline.crm.status_map) ----------------------------
    # Bitrix24 deal stages as order statuses, {CATEGORY_ID: {STAGE_ID: status}}: set, POST
    # /crm/bitrix24 takes the portal's outgoing webhook and the `bitrix24` consumer reads deals.
    bitrix24_stages: str | None = None
    # amoCRM lead statuses as order statuses, {pipeline_id: {status_id: status}}: set, POST
    # /crm/amocrm/<crm_token> takes the account's webhook and the `amocrm` consumer reads leads.
    amocrm_statuses: str | None = None

    @field_validator("bitrix24_stages", "amocrm_statuses", mode="before")
    @classmethod
    def _status_map(cls, value: Any, info: ValidationInfo) -> Any:
        """A JSON object (cdk.json) or its text (`cdk -c`), kept as canonical JSON: what the
        consumer's environment gets."""
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        return parse_status_map(value, str(info.field_name)).to_json()

    @field_validator("bot_application")
    @classmethod
    def _importable_application(cls, value: str | None) -> str | None:
        """The function would fail every update on a reference it cannot import: refuse it here."""
        if value is None:
            return None
        reference = ApplicationReference.parse(value)
        if reference.module_file(FUNCTIONS_DIR) is None:
            raise ValueError(f"bot_application: no module {reference.module!r} under functions/")
        problems = application_refusals(str(reference), str(FUNCTIONS_DIR))
        if problems:
            raise ValueError(f"bot_application: {reference} refused: {'; '.join(problems)}")
        return str(reference)

    @field_validator("phone_default_region", mode="before")
    @classmethod
    def _known_phone_region(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        region = value.strip().upper()
        if region and not phones.is_known_region(region):
            raise ValueError("phone_default_region must be an ISO 3166 alpha-2 region code, e.g. BY")
        return region or None

    # Context values for any other registry `requires_setting` key (a consumer added later that
    # is switched on by a key this model does not declare).
    consumer_settings: dict[str, str] = Field(default_factory=dict)

    @field_validator("snapstart", mode="before")
    @classmethod
    def _snapstart_functions(cls, value: Any) -> Any:
        """A comma-separated text (`-c snapstart=webhook,autoreply`) or a JSON list (cdk.json):
        names SnapStart can serve (the webhook, the queue consumers: their triggers can call an
        alias), each once."""
        if isinstance(value, str):
            value = [name.strip() for name in value.split(",") if name.strip()]
        if not isinstance(value, list | tuple) or not all(isinstance(name, str) for name in value):
            raise ValueError('snapstart must name functions, comma-separated: e.g. "webhook,autoreply"')
        unknown = sorted(set(value) - set(SNAPSTART_FUNCTIONS))
        if unknown:
            raise ValueError(
                f"snapstart: {', '.join(unknown)} cannot have SnapStart here; it is offered for"
                f" {', '.join(SNAPSTART_FUNCTIONS)}"
            )
        repeated = sorted(name for name in set(value) if value.count(name) > 1)
        if repeated:
            raise ValueError(f"snapstart names {', '.join(repeated)} more than once")
        return tuple(value)

    @field_serializer("snapstart")
    def _snapstart_as_context(self, value: tuple[str, ...]) -> str:
        """As `-c snapstart=...` writes it, so `to_context()` reads back the same."""
        return ",".join(value)

    @field_validator("log_retention_days")
    @classmethod
    def _known_retention(cls, value: int) -> int:
        if value not in LOG_RETENTION_DAYS:
            raise ValueError(f"log_retention_days must be one of {list(LOG_RETENTION_DAYS)}")
        return value

    _idempotency_ttl_long_enough = field_validator("idempotency_ttl_seconds")(check_idempotency_ttl)

    @field_validator(*OPTIONAL_TEXT_SETTINGS, mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        if isinstance(value, str):
            return value.strip() or None
        return value

    @field_validator("sms_origination_identity")
    @classmethod
    def _nameable_identity(cls, value: str | None) -> str | None:
        if value is not None and not ORIGINATION_IDENTITY.match(value):
            raise ValueError(
                "sms_origination_identity must be an ARN, a phone-number-/pool- id or a sender id "
                "(for a phone number give its id or ARN, so the IAM grant can name it)"
            )
        return value

    @model_validator(mode="after")
    def _stage_stack_name_fits(self) -> PipelineSettings:
        if len(self.stage_stack_name) > STACK_NAME_MAX:
            raise ValueError(
                f"stack_name: {self.stack_name!r} with the stage ({self.stage_stack_name!r}) is longer than"
                f" CloudFormation's {STACK_NAME_MAX} characters"
            )
        return self

    @property
    def stage_stack_name(self) -> str:
        """The CloudFormation stack of this stage, which every physical name and the metric
        namespace derive from: `stack_name` for the default stage (the name a deployment made
        before stages existed keeps), `<stack_name>-<stage>` for any other."""
        return self.stack_name if self.stage == DEFAULT_STAGE else f"{self.stack_name}-{self.stage}"

    @property
    def metrics_namespace(self) -> str:
        """Where this stage's functions write their Powertools metrics (POWERTOOLS_METRICS_NAMESPACE)
        and its alarms and dashboards read them: its stack name, so no two stages (nor stacks) of
        an account and region mix their metrics."""
        return self.stage_stack_name

    @model_validator(mode="after")
    def _sms_gateway_is_complete(self) -> PipelineSettings:
        if self.sms_gateway == "http" and not self.sms_http_base_url:
            raise ValueError("sms_gateway=http needs sms_http_base_url")
        return self

    @model_validator(mode="after")
    def _max_age_outlasts_two_sweeps(self) -> PipelineSettings:
        # A lost webhook's move is found by the next sweep, or the one after if it ran mid-move:
        # a shorter age would record it as too old instead of texting it.
        if self.sms_max_age_minutes < 2 * self.crm_sweep_minutes:
            raise ValueError(
                f"sms_max_age_minutes ({self.sms_max_age_minutes}) must be at least twice"
                f" crm_sweep_minutes ({self.crm_sweep_minutes}): the sweep must find a lost"
                " webhook's transition before it is too old to text"
            )
        return self

    @model_validator(mode="after")
    def _snapstart_on_deployed_functions(self) -> PipelineSettings:
        deployed = {SNAPSTART_WEBHOOK, *(c.name for c in enabled(self.registry_settings()))}
        absent = [name for name in self.snapstart if name not in deployed]
        if absent:
            raise ValueError(
                f"snapstart names {', '.join(absent)}, which this deployment does not have"
                " (a consumer that needs a setting is deployed only with it)"
            )
        return self

    @classmethod
    def undeclared_consumer_keys(cls) -> list[str]:
        """Registry `requires_setting` keys that are not fields (read into `consumer_settings`)."""
        return sorted({c.requires_setting for c in CONSUMERS if c.requires_setting} - set(cls.model_fields))

    @classmethod
    def context_keys(cls) -> list[str]:
        """Every context key the settings are read from."""
        declared = [name for name in cls.model_fields if name != CONSUMER_SETTINGS]
        return [*declared, *cls.undeclared_consumer_keys()]

    @classmethod
    def unknown_context_keys(cls, context: Mapping[str, Any]) -> list[str]:
        """Keys that look like this app's (APP_CONTEXT_KEY) but that it does not read: a typo
        (`alarm_emial`) would otherwise deploy silently without the setting."""
        known = {*cls.context_keys(), STAGES_KEY}
        return sorted(key for key in context if is_app_key(key) and key not in known)

    @classmethod
    def suggestion(cls, key: str) -> str | None:
        """The known context key closest to a mistyped one, if any is close."""
        known = {name.lower(): name for name in (*cls.context_keys(), STAGES_KEY)}
        close = difflib.get_close_matches(key.lower(), known, n=1, cutoff=0.6)
        return known[close[0]] if close else None

    @classmethod
    def from_context(cls, context: Mapping[str, Any]) -> PipelineSettings:
        """Read every known key from a context mapping; absent (None) keys keep their defaults.

        The context may hold the CDK's own keys (ignored); an unknown key that looks like this
        app's is refused (pydantic's `extra_forbidden`, next to any refused value, so one run
        reports every problem; `settings_problems` adds the closest known key). The stage's
        block of "stages" (`stage_context`) is laid over the other keys first."""
        context = stage_context(context)
        declared = {
            name: context.get(name)
            for name in cls.model_fields
            if name != CONSUMER_SETTINGS and context.get(name) is not None
        }
        consumer_settings = {
            key: str(context.get(key) or "").strip() for key in cls.undeclared_consumer_keys()
        }
        unknown = {key: context[key] for key in cls.unknown_context_keys(context) if key != CONSUMER_SETTINGS}
        return cls.model_validate(
            {
                **unknown,
                **declared,
                CONSUMER_SETTINGS: {key: value for key, value in consumer_settings.items() if value},
            }
        )

    def to_context(self) -> dict[str, Any]:
        """These settings as context keys: `from_context(s.to_context()) == s` (e.g. to synthesize
        the stack the local runtime stands for)."""
        declared = self.model_dump(exclude={CONSUMER_SETTINGS}, exclude_none=True)
        return {**declared, **self.consumer_settings}

    def non_default_settings(self) -> dict[str, Any]:
        """The settings that differ from their defaults, as context keys (the synth summary's)."""
        defaults = type(self)().to_context()
        return {key: value for key, value in self.to_context().items() if defaults.get(key) != value}

    @property
    def crm_token_needed(self) -> bool:
        """Whether the webhook checks the static `crm_token`: where `crm_auth` accepts tokens, or
        amoCRM is connected (its webhook URL carries the token). Elsewhere no secret is created."""
        return accepts_token(self.crm_auth) or bool(self.amocrm_statuses)

    def registry_settings(self) -> dict[str, Any]:
        """The mapping `pipeline.registry.enabled()` reads `requires_setting` keys from."""
        return {**self.model_dump(exclude={CONSUMER_SETTINGS}), **self.consumer_settings}


def stage_context(context: Mapping[str, Any]) -> dict[str, Any]:
    """The context this stage is synthesized from: its block of "stages" laid over the other keys
    (of cdk.json and `-c` alike), "stages" itself left out. SettingsError for a block that is no
    object of settings, a block that names a stage, or a stage that has no block while others have
    one (`-c stage=prdo` would deploy a whole new stack)."""
    given = {key: value for key, value in context.items() if key != STAGES_KEY}
    stages = context.get(STAGES_KEY)
    if isinstance(stages, str):  # `-c stages=...` arrives as text
        try:
            stages = json.loads(stages) if stages.strip() else None
        except json.JSONDecodeError as error:
            raise SettingsError([Problem(STAGES_KEY, f"not JSON ({error.msg})", stages)]) from None
    if not stages:
        return given
    if not isinstance(stages, Mapping) or not all(isinstance(block, Mapping) for block in stages.values()):
        raise SettingsError([Problem(STAGES_KEY, 'must map each stage to its settings, {"prod": {...}}')])
    problems = [
        Problem(f"{STAGES_KEY}.{name}", f"a stage name is lowercase letters and digits ({STAGE_PATTERN})")
        for name in stages
        if not isinstance(name, str) or re.fullmatch(STAGE_PATTERN, name) is None
    ]
    problems += [
        Problem(f"{STAGES_KEY}.{name}.{key}", "a stage's settings cannot choose the stage")
        for name, block in stages.items()
        for key in block
        if key in ("stage", STAGES_KEY)
    ]
    stage = str(given.get("stage") or DEFAULT_STAGE)
    if stage not in stages and stage != DEFAULT_STAGE:
        known = ", ".join(sorted({DEFAULT_STAGE, *map(str, stages)}))
        problems.append(Problem("stage", f"no such stage in cdk.json's {STAGES_KEY} (known: {known})", stage))
    if problems:
        raise SettingsError(problems)
    return {**given, **stages.get(stage, {})}


# -- refused settings, one line each ---------------------------------------------------------------
_NOT_GIVEN = object()


def shown_value(value: Any) -> str:
    """A refused value as printed: its repr (quotes and escapes make blanks and control
    characters visible), cut to SHOWN_VALUE_CHARS."""
    text = repr(value)
    return text if len(text) <= SHOWN_VALUE_CHARS else f"{text[: SHOWN_VALUE_CHARS - 3]}..."


@dataclass(frozen=True)
class Problem:
    """One refused setting: what names it (a context key, or a function's variable and whose it
    is), why, and the value given."""

    name: str
    why: str
    value: Any = _NOT_GIVEN

    def __str__(self) -> str:
        why = self.why.removeprefix("Value error, ")
        # Messages written for the model often start with the key they are about.
        if self.name and why.startswith(f"{self.name} "):
            why = why.removeprefix(self.name).lstrip(" :")
        line = f"{self.name}: {why}" if self.name else why
        return line if self.value is _NOT_GIVEN else f"{line} (given {shown_value(self.value)})"


class SettingsError(ValueError):
    """Settings refused before deploying (a context key, or a function setting a function would
    refuse at run time); `str()` is one line per problem."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(problem) for problem in self.problems))


def validation_problems(
    error: Refusals,
    name: Callable[[tuple[int | str, ...]], str] | None = None,
    values: Mapping[str, Any] | None = None,
) -> list[Problem]:
    """A refusal (pydantic's, or `pipeline.validation.Invalid`) as Problems. `name(loc)` names the
    setting a location stands for (default: the location itself); `values`, when given, are what
    was given by that name (default: pydantic's input)."""
    problems = []
    for detail in error.errors():
        loc = tuple(detail["loc"])
        label = name(loc) if name else ".".join(str(part) for part in loc)
        if values is not None:
            value = values.get(label, _NOT_GIVEN)
        else:
            value = detail.get("input", _NOT_GIVEN) if loc else _NOT_GIVEN
        problems.append(Problem(label, str(detail["msg"]), value))
    return problems


def settings_problems(error: ValidationError) -> list[Problem]:
    """`PipelineSettings`' refusals as Problems, an unknown key with the closest known one."""
    problems = []
    for problem, detail in zip(validation_problems(error), error.errors(), strict=True):
        if detail["type"] == "extra_forbidden":
            close = PipelineSettings.suggestion(problem.name)
            hint = f"did you mean `{close}`?" if close else "see the table in docs/configuration.md"
            problem = Problem(problem.name, f"not a setting of this app; {hint}", problem.value)
        problems.append(problem)
    return problems


def settings_error_lines(error: ValidationError | SettingsError) -> list[str]:
    """One line per refused setting, `key: why (given <value>)`: `PipelineSettings`' refusals
    (an unknown key with the closest known one) or a function setting refused while building
    the functions' environments."""
    problems = error.problems if isinstance(error, SettingsError) else settings_problems(error)
    return [str(problem) for problem in problems]
