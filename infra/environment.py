"""Every function's environment variables, built here once for the CDK stack and the local runtime.

Resource identifiers come in as plain strings: the stack passes CloudFormation tokens, the local
runtime the names, URLs and ARNs of what it created in moto. Everything else comes from the
deployment settings (`infra.config`) and the registry. No CDK import, so the local runtime runs
its functions with exactly the environment they get in AWS (plus its documented local overlay,
`local.environment`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from infra.config import (
    TELEGRAM_CIDRS,
    PipelineSettings,
    Problem,
    SettingsError,
    validation_problems,
)
from infra.naming import stack_scoped_name
from pipeline import deadline, pacing, phones
from pipeline.bot_api import TIMEOUT_SECONDS as BOT_API_TIMEOUT_SECONDS
from pipeline.broadcast import PAID_ENV as BROADCAST_PAID_ENV
from pipeline.crm.contract import CRM_AUTH_ENV
from pipeline.crm.order_events import TOPIC_ENV
from pipeline.crm.sweep import OVERLAP_ENV as SWEEP_OVERLAP_ENV
from pipeline.crm.sweep import PERIOD_ENV as SWEEP_PERIOD_ENV
from pipeline.crm.sweep import SOURCES_ENV as SWEEP_SOURCES_ENV
from pipeline.observability import TRACE_DISABLED_ENV
from pipeline.phones import DEFAULT_REGION_ENV
from pipeline.registry import TUNING, TUNING_ENV, Consumer, enabled, secret_env_var, table_env_var
from pipeline.replies import REPLIES_ENV, RepliesError, parse_replies, team_replies
from pipeline.sms.gateways import HTTP_SECRET
from pipeline.sms.rules import MAX_AGE_ENV, RULES_ENV, load_rules, rules_file
from pipeline.sms.settings import ENVIRONMENT_VARIABLES, SmsSettings
from pipeline.telegram import BOT_USERNAME_ENV
from pipeline.validation import Invalid
from pipeline.worker import ALARM_TOPIC_ENV, WorkerSettings
from pipeline.worker import ENVIRONMENT_VARIABLES as WORKER_VARIABLES

# Logical table name of the idempotency journal every worker uses (and the SMS journal).
JOURNAL = "journal"
# The consumer that sends SMS; the reconciler and delivery-event handler exist with it.
SMS_CONSUMER = "sms"
# The consumer that answers with the team's texts (`pipeline.replies`).
AUTOREPLY_CONSUMER = "autoreply"
# End User Messaging's longest configuration set name.
SMS_CONFIGURATION_SET_NAME_MAX = 64
# The webhook's secrets, by the logical names whose `secret_env_var` is its env contract.
TELEGRAM_SECRET = "telegram"  # noqa: S105 - a logical name, not a value
CRM_SECRET = "crm"  # noqa: S105 - a logical name, not a value
CRM_TOKEN_SECRET = "crm_token"  # noqa: S105 - a logical name, not a value
# Worker environment variables taken from a deployment setting, by the context key they come from.
WORKER_SETTINGS = {"IDEMPOTENCY_TTL_SECONDS": "idempotency_ttl_seconds"}
# Registry `environment` values a function parses, by variable, with the parser the function
# itself uses (raising ValueError): refused at synth, not on every message.
FUNCTION_SETTING_PARSERS: dict[str, Callable[[str], object]] = {REPLIES_ENV: parse_replies}


@dataclass(frozen=True)
class FunctionSpec:
    """A function that is not a registry consumer: Powertools service name, handler and limits."""

    service_name: str
    handler: str
    timeout_seconds: int
    memory_mb: int


# The webhook validates and publishes once, then answers; Telegram waits up to 60 s but retries
# slow answers, so a short timeout keeps a stuck call from piling up duplicates.
WEBHOOK = FunctionSpec("webhook", "webhook.app.lambda_handler", timeout_seconds=10, memory_mb=512)
# A run handles up to SMS_RECONCILE_BATCH_SIZE (100) records, each lookup bounded by the HTTP
# gateway's timeout; overlapping runs are harmless (every journal write is conditional).
RECONCILER = FunctionSpec("reconciler", "reconciler.app.lambda_handler", timeout_seconds=300, memory_mb=256)
SMS_EVENTS = FunctionSpec("sms_events", "sms_events.app.lambda_handler", timeout_seconds=30, memory_mb=256)
# A run reads each connected CRM's history since its cursor, page by page at the CRM's rate
# limit, for as long as its timeout allows; the cursor is saved after every page, so the next
# run goes on from there (pipeline.crm.sweep).
CRM_SWEEP = FunctionSpec("crm_sweep", "crm_sweep.app.lambda_handler", timeout_seconds=120, memory_mb=256)
# The CRMs whose history the sweep reads: each is connected when its consumer exists (the
# registry's `requires_setting`, its status map).
SWEPT_CRMS = ("bitrix24", "amocrm")


# The HTTP API's routes, all to the webhook (`infra.constructs.ingress`; `local.apigw` locally).
TELEGRAM_PATH = "/telegram/webhook"
CRM_PATH = "/crm/events"
# The CRM route whose last segment is the static token (senders that cannot set a header).
CRM_TOKEN_PATH = f"{CRM_PATH}/{{token}}"
# CRMs posting their own webhooks, routed only where connected: Bitrix24 (token in the body) and
# amoCRM (the crm_token in the path: it can neither sign nor set a header).
BITRIX24_PATH = "/crm/bitrix24"
AMOCRM_PATH = "/crm/amocrm/{token}"
# Logical name of the secret holding Bitrix24's application token (the portal issues it).
BITRIX24_APP_TOKEN_SECRET = "bitrix24_app_token"  # noqa: S105 - a logical name, not a value
# An HTTP SMS gateway's inbound-message callback (STOP/START into the suppression list,
# `webhook.sms_inbound`): its token in the path, as a gateway's console takes only a URL.
SMS_INBOUND_PATH = "/sms/inbound/{token}"
SMS_INBOUND_SECRET = "sms_inbound_token"  # noqa: S105 - a logical name, not a value


def sms_inbound_route(settings: PipelineSettings) -> bool:
    """Whether the API has the inbound STOP route: with the `sms` consumer on an HTTP gateway
    (End User Messaging keeps its own opt-out list and handles STOP itself)."""
    if settings.sms_gateway != "http":
        return False
    return any(consumer.name == SMS_CONSUMER for consumer in enabled(settings.registry_settings()))


def webhook_secret_names(settings: PipelineSettings) -> tuple[str, ...]:
    """The secrets the webhook checks requests against: the static CRM token only where it is
    accepted (`crm_token_needed`), Bitrix24's application token only where Bitrix24 is connected."""
    names = [TELEGRAM_SECRET, CRM_SECRET]
    if settings.crm_token_needed:
        names.append(CRM_TOKEN_SECRET)
    if settings.bitrix24_stages:
        names.append(BITRIX24_APP_TOKEN_SECRET)
    if sms_inbound_route(settings):
        names.append(SMS_INBOUND_SECRET)
    return tuple(names)


def webhook_paths(settings: PipelineSettings) -> tuple[str, ...]:
    """The paths the deployment's API routes (POST): the CRM sources' only where connected."""
    paths = [TELEGRAM_PATH, CRM_PATH, CRM_TOKEN_PATH]
    if settings.bitrix24_stages:
        paths.append(BITRIX24_PATH)
    if settings.amocrm_statuses:
        paths.append(AMOCRM_PATH)
    if sms_inbound_route(settings):
        paths.append(SMS_INBOUND_PATH)
    return tuple(paths)


def webhook_routes(settings: PipelineSettings) -> tuple[str, ...]:
    """API Gateway route keys of `webhook_paths`."""
    return tuple(f"POST {path}" for path in webhook_paths(settings))


@dataclass(frozen=True)
class FunctionEnvironments:
    """The environment of each kind of function of one deployment (settings + stack name)."""

    settings: PipelineSettings
    stack_name: str

    def powertools(self, service_name: str) -> dict[str, str]:
        # Tracing off (the `tracing` setting): Powertools' own switch, which
        # `pipeline.observability.service_tracer` reads too (no X-Ray SDK import then).
        tracing = {} if self.settings.tracing else {TRACE_DISABLED_ENV: "true"}
        return {
            "POWERTOOLS_SERVICE_NAME": service_name,
            "POWERTOOLS_METRICS_NAMESPACE": self.settings.metrics_namespace,
            "POWERTOOLS_LOG_LEVEL": self.settings.log_level,
            **tracing,
            **consumer_tuning(),
        }

    def webhook(
        self,
        *,
        topic_arn: str,
        telegram_secret_id: str,
        crm_secret_id: str,
        crm_token_secret_id: str | None = None,
        bitrix24_app_token_secret_id: str | None = None,
        sms_inbound_token_secret_id: str | None = None,
        journal_table: str | None = None,
    ) -> dict[str, str]:
        """`crm_token_secret_id` where the CRM token is accepted (`crm_token_needed`),
        `bitrix24_app_token_secret_id` where Bitrix24 is connected (`bitrix24_stages`), the
        inbound SMS token and the journal (its suppression list) where the inbound STOP route is
        (`sms_inbound_route`)."""
        settings = self.settings
        optional = {}
        if settings.crm_token_needed:
            if not crm_token_secret_id:
                raise ValueError(
                    "crm_auth accepts tokens or amoCRM is connected: the webhook needs the crm_token secret"
                )
            optional[secret_env_var(CRM_TOKEN_SECRET)] = crm_token_secret_id
        if settings.bitrix24_stages:
            if not bitrix24_app_token_secret_id:
                raise ValueError("bitrix24_stages is set: the webhook needs the bitrix24_app_token secret")
            optional[secret_env_var(BITRIX24_APP_TOKEN_SECRET)] = bitrix24_app_token_secret_id
        if sms_inbound_route(settings):
            if not sms_inbound_token_secret_id or not journal_table:
                raise ValueError(
                    "an HTTP SMS gateway's inbound route needs the sms_inbound_token secret and the journal"
                )
            optional[secret_env_var(SMS_INBOUND_SECRET)] = sms_inbound_token_secret_id
            optional["JOURNAL_TABLE"] = journal_table
        return {
            **optional,
            **self.powertools(WEBHOOK.service_name),
            "EVENTS_TOPIC_ARN": topic_arn,
            secret_env_var(TELEGRAM_SECRET): telegram_secret_id,
            secret_env_var(CRM_SECRET): crm_secret_id,
            # Which CRM authentication the webhook accepts (signature, token or either).
            CRM_AUTH_ENV: settings.crm_auth,
            "TELEGRAM_BOT_ID": settings.telegram_bot_id,
            "SECRET_ROTATION_GRACE_SECONDS": str(settings.secret_rotation_grace_seconds),
            # HTTP APIs have no resource policy: the webhook itself refuses Telegram-route calls
            # from outside these CIDRs (comma-separated; empty = no IP check).
            "TELEGRAM_IP_ALLOWLIST": ",".join(TELEGRAM_CIDRS) if settings.telegram_ip_allowlist else "",
            # Where national CRM phone forms are read ("" = international forms only).
            DEFAULT_REGION_ENV: settings.phone_default_region or "",
        }

    def worker(
        self,
        consumer: Consumer,
        *,
        queue_url: str,
        dlq_url: str,
        tables: Mapping[str, str],
        secrets: Mapping[str, str],
        topic_arn: str | None = None,
        alarm_topic_arn: str | None = None,
    ) -> dict[str, str]:
        """`tables` and `secrets` map logical names to table names and secret ids (at least the
        consumer's own); `topic_arn`, the events topic, for a consumer that publishes;
        `alarm_topic_arn`, the alarm topic, for an ordered one (its notice per dead letter)."""
        environment = {
            **self.powertools(consumer.name),
            "CONSUMER_NAME": consumer.name,
            "QUEUE_URL": queue_url,
            "DLQ_URL": dlq_url,
            "JOURNAL_TABLE": tables[JOURNAL],
            **{name: str(getattr(self.settings, key)) for name, key in WORKER_SETTINGS.items()},
        }
        environment.update({table_env_var(name): tables[name] for name in consumer.tables})
        used = consumer.used_secrets(self.settings.registry_settings())
        environment.update({secret_env_var(name): secrets[name] for name in used})
        if consumer.requires_setting:
            environment[consumer.requires_setting.upper()] = str(
                self.settings.registry_settings()[consumer.requires_setting]
            )
        if consumer.topic_publisher:
            if not topic_arn:
                raise ValueError(
                    f"the {consumer.name} consumer publishes: its environment needs the topic ARN"
                )
            environment[TOPIC_ENV] = topic_arn
        if consumer.publishes:
            # It validates the order events it publishes as the webhook does (`pipeline.crm.contract`).
            environment[DEFAULT_REGION_ENV] = self.settings.phone_default_region or ""
            environment[MAX_AGE_ENV] = str(self.settings.sms_max_age_minutes * 60)
        if consumer.ordered:
            if not alarm_topic_arn:
                raise ValueError(
                    f"the {consumer.name} consumer is ordered: its environment needs the alarm topic ARN"
                )
            environment[ALARM_TOPIC_ENV] = alarm_topic_arn
        if consumer.name == AUTOREPLY_CONSUMER:
            # The team's texts (team/autoreply.json), read here as the SMS rules are.
            environment[REPLIES_ENV] = autoreply_texts()
        check_function_settings(consumer)
        environment.update(consumer.environment)
        if consumer.sends_to_telegram:
            environment.update(self.telegram_pacing(consumer))
        if consumer.broadcasts:
            environment[BROADCAST_PAID_ENV] = "true" if self.settings.allow_paid_broadcast else ""
        if consumer.name == SMS_CONSUMER:
            environment.update(self.sms(consumer))
        if consumer.source == "telegram" and self.settings.telegram_bot_username:
            # Each Telegram consumer tells this bot's commands from another bot's ("/start@other").
            environment[BOT_USERNAME_ENV] = self.settings.telegram_bot_username
        self.check_worker_environment(environment, consumer)
        return environment

    def telegram_pacing(self, consumer: Consumer) -> dict[str, str]:
        """The consumer's share of the bot's `telegram_messages_per_second` (`pipeline.pacing`),
        refused when one environment could not send two messages in one invocation: each would
        send one and hand the rest of its batch back."""
        rate = self.settings.telegram_messages_per_second
        if not (consumer.broadcasts and self.settings.allow_paid_broadcast):
            # Only messages sent with allow_paid_broadcast pass Telegram's free rate: replies (and
            # an unpaid broadcast) stay within it, however far the setting was raised for paid ones.
            rate = min(rate, pacing.TELEGRAM_MESSAGES_PER_SECOND)
        part = self.settings.broadcast_share if consumer.broadcasts else 1.0
        share = pacing.send_rate(consumer.max_concurrency, rate, part)
        room = min(
            pacing.MAX_WAIT_SECONDS, consumer.timeout_seconds - deadline.needed(BOT_API_TIMEOUT_SECONDS)
        )
        if not share > 0 or 1 / share > room:
            why = (
                f"too slow for the {consumer.name} consumer: its {consumer.max_concurrency} environments'"
                f" share, {share:g} a second, spaces messages more than the {room:g} s a message may"
                " wait in an invocation"
            )
            raise SettingsError([Problem("telegram_messages_per_second", why, rate)])
        return pacing.paced_environment(consumer.max_concurrency, rate, part)

    def check_worker_environment(self, environment: Mapping[str, str], consumer: Consumer) -> None:
        """Fail the synth (or the local start), not every message, on an environment
        `pipeline.worker_settings.WorkerSettings` would refuse; a variable built from a deployment
        setting is named by its context key, any other by itself."""

        def named(loc: tuple[int | str, ...]) -> str:
            variable = WORKER_VARIABLES[str(loc[0])]
            key = WORKER_SETTINGS.get(variable)
            if key is not None and variable not in consumer.environment:
                return key
            return f"{variable} (of the {consumer.name} worker)"

        try:
            WorkerSettings.from_environment(environment)
        except Invalid as error:
            given = {
                named((field,)): environment.get(variable) for field, variable in WORKER_VARIABLES.items()
            }
            raise SettingsError(validation_problems(error, named, given)) from None

    # -- SMS: the worker, the reconciler and the delivery-event handler -----------------------------
    @property
    def sms_configuration_set(self) -> str | None:
        """The End User Messaging configuration set every SMS is sent with: the configured one, or
        the one the stack creates, named (not generated) so its ARN is known without a reference.
        None with an HTTP gateway."""
        if self.settings.sms_gateway != "end_user_messaging":
            return None
        return self.settings.sms_configuration_set or stack_scoped_name(
            self.stack_name, "-sms", SMS_CONFIGURATION_SET_NAME_MAX
        )

    def sms(self, consumer: Consumer) -> dict[str, str]:
        """SMS settings, identical for the worker, the reconciler and `sms_events`.

        Retry delays follow the consumer's retry policy; the registry's `environment` (attempts,
        lease) comes next; the deployment settings (gateway, sender, deadline) win over both.
        """
        settings = self.settings
        environment = {
            "SMS_RETRY_BASE_SECONDS": str(consumer.retry.base_delay_seconds),
            "SMS_RETRY_MAX_SECONDS": str(consumer.retry.max_delay_seconds),
            # The team's rules and texts (team/sms_rules.json), read here: no file of theirs ships
            # in a layer, and a changed text is a changed function configuration.
            RULES_ENV: team_sms_rules(),
            **consumer.environment,
            "SMS_GATEWAY": settings.sms_gateway,
            "SMS_MESSAGE_TYPE": settings.sms_message_type,
            "SMS_RECONCILE_DEADLINE_HOURS": f"{settings.sms_reconcile_deadline_hours:g}",
            # The one SMS age: a notification older at send time ends `expired` (unless its rule
            # sets its own), as the CRM sources count a transition seen that late too old.
            MAX_AGE_ENV: str(settings.sms_max_age_minutes * 60),
        }
        optional = {
            "SMS_ORIGINATION_IDENTITY": settings.sms_origination_identity,
            "SMS_CONFIGURATION_SET": self.sms_configuration_set,
            "SMS_HTTP_BASE_URL": settings.sms_http_base_url if settings.sms_gateway == "http" else None,
        }
        environment.update({name: value for name, value in optional.items() if value})
        check_sms_environment(environment, consumer)
        return environment

    def reconciler(self, sms: Consumer, *, journal_table: str, secrets: Mapping[str, str]) -> dict[str, str]:
        """The SMS consumer's settings on its journal; with an HTTP gateway also its token's
        secret, to look sends up and resend. No queue of its own."""
        environment = {
            **self.powertools(RECONCILER.service_name),
            **self.sms(sms),
            "JOURNAL_TABLE": journal_table,
        }
        if self.settings.sms_gateway == "http":
            environment[secret_env_var(HTTP_SECRET)] = secrets[HTTP_SECRET]
        return environment

    def swept_crms(self) -> tuple[str, ...]:
        """The connected CRMs the catch-up sweep reads (none: no sweep at all)."""
        connected = {consumer.name for consumer in enabled(self.settings.registry_settings())}
        return tuple(name for name in SWEPT_CRMS if name in connected)

    def crm_sweep(
        self,
        *,
        topic_arn: str,
        journal_table: str,
        secrets: Mapping[str, str],
        crms: Sequence[str] | None = None,
    ) -> dict[str, str]:
        """The sweep: each connected CRM's API secret, its cursor's table, the events topic.
        `crms`: those swept, by default every connected one (the local runtime may run fewer)."""
        crms = self.swept_crms() if crms is None else tuple(crms)
        return {
            **self.powertools(CRM_SWEEP.service_name),
            SWEEP_SOURCES_ENV: ",".join(crms),
            "JOURNAL_TABLE": journal_table,
            TOPIC_ENV: topic_arn,
            MAX_AGE_ENV: str(self.settings.sms_max_age_minutes * 60),
            SWEEP_OVERLAP_ENV: str(self.settings.crm_sweep_overlap_seconds),
            SWEEP_PERIOD_ENV: str(self.settings.crm_sweep_minutes * 60),
            **{secret_env_var(f"{crm}_api"): secrets[f"{crm}_api"] for crm in crms},
        }

    def sms_events(self, sms: Consumer, *, journal_table: str) -> dict[str, str]:
        """End User Messaging delivery events into the SMS journal (exists only with that gateway)."""
        return {**self.powertools(SMS_EVENTS.service_name), **self.sms(sms), "JOURNAL_TABLE": journal_table}


def consumer_tuning() -> dict[str, str]:
    """The team's tuning of the consumers (`team/consumers.toml`) for every function: each reads
    the registry, and its consumers (its own, and the retry schedules the retention bound is
    made of) must be the ones the stack built. Nothing when there is none."""
    if not TUNING:
        return {}
    return {TUNING_ENV: json.dumps(TUNING, ensure_ascii=False, separators=(",", ":"), sort_keys=True)}


def autoreply_texts() -> str:
    """The team's autoreply texts, compact, as AUTOREPLY_REPLIES carries them; refused, at synth
    or the local start, as the function would refuse them, naming the file."""
    try:
        return team_replies()
    except RepliesError as error:
        raise SettingsError([Problem("", str(error))]) from None


def team_sms_rules() -> str:
    """The team's SMS rules file (`pipeline.sms.rules.rules_file`), compact, as `SMS_RULES_JSON`
    carries it; its own text if it is not JSON (the check below names the problem)."""
    path = rules_file()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        problem = Problem(f"{path}", f"cannot read the SMS rules file: {error.strerror}")
        raise SettingsError([problem]) from None
    try:
        return json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))
    except ValueError:
        return text


def check_sms_environment(environment: Mapping[str, str], consumer: Consumer) -> SmsSettings:
    """Fail the synth (or the local start), not the first SMS, on settings `pipeline.sms.settings`
    would refuse.

    Also keeps the journal in charge of retries: it must give up (SMS_MAX_ATTEMPTS) before SQS
    does (max_receive_count), and a claim's lease must outlive the worker's timeout.
    """
    variables = {field: name for field, name in ENVIRONMENT_VARIABLES.items() if name in environment}
    whose = f"(of the {consumer.name} consumer)"

    def named(loc: tuple[int | str, ...]) -> str:
        return f"{variables.get(str(loc[0]), loc[0])} {whose}" if loc else f"SMS settings {whose}"

    fields = {field: environment[name] for field, name in variables.items()}
    try:
        settings = SmsSettings.parse({**fields, "journal_table": "synth-check"})
    except Invalid as error:
        raise SettingsError(
            validation_problems(error, named, {named((f,)): environment[n] for f, n in variables.items()})
        ) from None
    # The rules the functions load, refused here if invalid.
    source = environment.get(RULES_ENV)
    rules_name = RULES_ENV if source and source.strip() else f"{rules_file()} (no {RULES_ENV})"
    try:
        rules = load_rules(source)
    except Invalid as error:
        raise SettingsError(
            Problem(f"{rules_name} {whose}", f"{'.'.join(map(str, p['loc'])) or 'rules'}: {p['msg']}")
            for p in error.errors()
        ) from None
    except OSError as error:
        problem = Problem(f"{rules_name} {whose}", f"cannot read the rules file: {error.strerror}", source)
        raise SettingsError([problem]) from None
    problems = [
        Problem(
            f"{rules_name} {whose}",
            f"rule {sized.rule!r} ({sized.language}) comes to {sized.size.parts} {sized.size.encoding}"
            f" parts ({sized.size.units} units with its fields at their longest), over its max_parts"
            f" {rules.max_parts}: shorten it, or see `bin/ops sms preview`",
        )
        for sized in rules.sizes()
        if sized.size.parts > rules.max_parts
    ]
    problems += [
        Problem(
            f"{rules_name} {whose}", f"language_by_country: {region!r} is not a region with phone numbers"
        )
        for region in rules.language_by_country
        if not phones.is_known_region(region)
    ]
    if settings.max_attempts >= consumer.retry.max_receive_count:
        problems.append(
            Problem(
                f"SMS_MAX_ATTEMPTS {whose}",
                f"must be below the queue's max_receive_count ({consumer.retry.max_receive_count})",
                environment.get("SMS_MAX_ATTEMPTS", settings.max_attempts),
            )
        )
    if settings.lease_seconds <= consumer.timeout_seconds:
        problems.append(
            Problem(
                f"SMS_LEASE_SECONDS {whose}",
                f"must exceed the worker timeout ({consumer.timeout_seconds} s)",
                environment.get("SMS_LEASE_SECONDS", settings.lease_seconds),
            )
        )
    if problems:
        raise SettingsError(problems)
    return settings


def check_function_settings(consumer: Consumer) -> None:
    """Refuse a registry `environment` value its function would refuse at run time
    (FUNCTION_SETTING_PARSERS), naming the variable and the consumer."""
    problems = []
    for variable, parse in FUNCTION_SETTING_PARSERS.items():
        if variable not in consumer.environment:
            continue
        try:
            parse(consumer.environment[variable])
        except ValueError as error:
            why = str(error).removeprefix(f"{variable} ")
            name = f"{variable} (registry environment of the {consumer.name} consumer)"
            problems.append(Problem(name, why, consumer.environment[variable]))
    if problems:
        raise SettingsError(problems)
