"""Settings come from CDK context (with defaults), drive the template, and app.py synthesizes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, get_args

import aws_cdk as cdk
import pytest
from pydantic import ValidationError
from synthesized import (
    ALARM_EMAIL,
    BASE_CONTEXT,
    CUSTOM_CONTEXT,
    SMS_CONFIGURATION_SET,
    SMS_HTTP_BASE_URL,
    SMS_POOL_ID,
    Synthesized,
    run_app,
)
from template_queries import function_env, of_type, props, ref_name

import infra.application
import infra.config
from infra.application import build_app, context_arguments, project_context, synth_summary
from infra.config import SHOWN_VALUE_CHARS, LogLevel, SettingsError, settings_error_lines, shown_value
from infra.constructs.consumers import subscription_filters
from infra.environment import FUNCTION_SETTING_PARSERS, FunctionEnvironments, check_sms_environment
from infra.paths import CDK_JSON, PROJECT_ROOT
from infra.region import synth_region_summary
from infra.settings import LAMBDA_LOG_LEVELS, PipelineSettings, cdk_removal_policy, settings_from_node
from local.settings import LocalSettings
from pipeline.registry import CONSUMERS, Consumer, by_name, enabled
from pipeline.replies import REPLIES_ENV, parse_replies
from pipeline.retention import IDEMPOTENCY_TTL_SECONDS
from pipeline.sms.rules import RULES_ENV

# The default deployment's consumers: every one without a required setting, in registry order (by folder name)
# (a consumer `make consumer` adds is on by default), and the five gated ones off: issue 23, a
# Telegram-only deploy has no `crm` consumer (nor its secret) failing on a CRM it has not got.
DEFAULT_CONSUMERS_LINE = (
    f"  consumers on: {', '.join(c.name for c in CONSUMERS if c.requires_setting is None)};"
    " off: ai (no bedrock_model_id), amocrm (no amocrm_statuses), bitrix24 (no bitrix24_stages),"
    " bot (no bot_application), crm (crm_leads=false)"
)


def _settings(context: dict[str, object]) -> PipelineSettings:
    return settings_from_node(cdk.App(context=context).node)


def test_defaults_apply_without_context() -> None:
    settings = _settings({})
    assert (settings.log_retention_days, settings.api_rate_limit, settings.api_burst_limit) == (30, 50, 100)
    assert settings.powertools_version == "3.37.0"
    assert settings.idempotency_ttl_seconds == IDEMPOTENCY_TTL_SECONDS
    assert cdk_removal_policy(settings) == cdk.RemovalPolicy.RETAIN
    assert settings.bedrock_model_id is None
    # pipeline.sms.settings' default gateway; the stack makes the configuration set.
    assert (settings.sms_gateway, settings.sms_origination_identity, settings.sms_configuration_set) == (
        "end_user_messaging",
        None,
        None,
    )
    assert (settings.sms_reconcile_minutes, settings.sms_unknown_alarm_minutes) == (5, 60)
    assert settings.alarm_email is None
    assert settings.telegram_ip_allowlist is False


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("log_retention_days", "31"),
        ("api_rate_limit", "0"),
        ("removal_policy", "snapshot"),
        ("powertools_version", "3.37"),
        ("log_level", "VERBOSE"),
        ("sms_gateway", "fake"),  # in-memory: a deployed fake would drop every SMS
        ("sms_origination_identity", "+4915112345678"),  # a bare number: IAM cannot name it
        ("sms_reconcile_minutes", "0"),
        ("sms_http_base_url", "ftp://sms.example.org"),
        ("alarm_email", "ops-at-example.org"),
        ("telegram_ip_allowlist", "sometimes"),
        ("phone_default_region", "XX"),  # not a region
        ("phone_default_region", "UK"),  # the ISO code is GB
        ("phone_default_region", "BLR"),  # alpha-3
        ("crm_auth", "none"),  # the CRM route is never unauthenticated
        ("crm_auth", "Token"),
        ("bitrix24_stages", "NEW=new"),  # not JSON
        ("bitrix24_stages", "{}"),  # connects nothing
        ("bitrix24_stages", '{"0": ["NEW"]}'),  # stages without statuses
        ("bitrix24_stages", '{"0": {"NEW": ""}}'),
        ("bitrix24_stages", '{"0": {"NEW": "ready\\nfor pickup"}}'),  # a control character
        ("amocrm_statuses", '{"7001": {"70013": 5}}'),
        ("amocrm_statuses", '{"7001 main": {"70013": "ready"}}'),  # not an id
    ],
)
def test_invalid_context_is_rejected_naming_the_key(key: str, value: str) -> None:
    with pytest.raises(ValidationError, match=key):
        _settings({key: value})


def test_the_synth_refuses_an_unknown_phone_region_naming_the_key() -> None:
    with pytest.raises(ValidationError, match="phone_default_region"):
        build_app({"aws:cdk:bundling-stacks": [], "phone_default_region": "ZZ"}, nag=False)


@pytest.mark.parametrize(("given", "read"), [("BY", "BY"), (" by ", "BY"), ("", None), (None, None)])
def test_the_phone_region_is_an_upper_case_region_code_or_unset(given: str | None, read: str | None) -> None:
    assert _settings({"phone_default_region": given}).phone_default_region == read


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("bot.examples.lead_bot", "must be 'package.module:callable'"),
        ("bot/examples/lead_bot.py:build", "must be 'package.module:callable'"),
        ("bot.examples.no_such_bot:build", "no module 'bot.examples.no_such_bot' under functions/"),
    ],
)
def test_the_synth_refuses_a_bot_application_the_function_could_not_import(value: str, why: str) -> None:
    with pytest.raises(ValidationError) as refused:
        build_app({"aws:cdk:bundling-stacks": [], "bot_application": value}, nag=False)
    assert why in str(refused.value)


def test_a_bot_application_is_a_module_under_functions_and_a_blank_one_is_unset() -> None:
    assert _settings({"bot_application": " bot.examples.lead_bot:build "}).bot_application == (
        "bot.examples.lead_bot:build"
    )
    assert _settings({"bot_application": "  "}).bot_application is None


def test_a_refused_status_map_names_the_pipeline_and_stage_and_fails_the_synth() -> None:
    with pytest.raises(ValidationError) as refused:
        build_app({"aws:cdk:bundling-stacks": [], "bitrix24_stages": {"2": {"C2:NEW": ""}}}, nag=False)
    assert "bitrix24_stages[2][C2:NEW] must name an order status" in str(refused.value)


def test_a_status_map_is_read_from_json_or_its_text_as_the_same_canonical_json() -> None:
    as_object = _settings({"amocrm_statuses": {"7001": {"70013": "ready_for_pickup", 142: "completed"}}})
    as_text = _settings({"amocrm_statuses": '{"7001": {"142": "completed", "70013": "ready_for_pickup"}}'})
    assert (
        as_object.amocrm_statuses
        == as_text.amocrm_statuses
        == ('{"7001":{"142":"completed","70013":"ready_for_pickup"}}')
    )
    assert _settings({"amocrm_statuses": "  "}).amocrm_statuses is None


def test_crm_auth_defaults_to_the_signature_and_accepts_the_token_modes() -> None:
    assert _settings({}).crm_auth == "signature"
    for mode in ("signature", "token", "signature_or_token"):
        assert _settings({"crm_auth": mode}).crm_auth == mode


def test_the_synth_refuses_an_unknown_crm_auth_naming_the_key() -> None:
    with pytest.raises(ValidationError, match="crm_auth"):
        build_app({"aws:cdk:bundling-stacks": [], "crm_auth": "hmac"}, nag=False)


def test_the_http_sms_gateway_needs_its_url() -> None:
    with pytest.raises(ValidationError, match="sms_gateway=http needs sms_http_base_url"):
        _settings({"sms_gateway": "http"})
    assert _settings({"sms_gateway": "http", "sms_http_base_url": SMS_HTTP_BASE_URL}).sms_gateway == "http"


@pytest.mark.parametrize(
    "identity",
    [
        "arn:aws:sms-voice:eu-central-1:123456789012:phone-number/phone-number-0123abcd",
        "phone-number-0123456789abcdef0123456789abcdef",
        "pool-0123456789abcdef0123456789abcdef",
        "MyShop",
    ],
)
def test_origination_identities_iam_can_name_are_accepted(identity: str) -> None:
    assert _settings({"sms_origination_identity": f" {identity} "}).sms_origination_identity == identity


def test_blank_optional_texts_are_unset() -> None:
    settings = _settings({"alarm_email": " ", "sms_configuration_set": "", "sms_origination_identity": " "})
    assert (settings.alarm_email, settings.sms_configuration_set, settings.sms_origination_identity) == (
        None,
        None,
        None,
    )


def test_a_blank_bedrock_model_keeps_the_ai_consumer_off() -> None:
    settings = _settings({"bedrock_model_id": "  "})
    assert settings.bedrock_model_id is None
    assert "ai" not in [c.name for c in enabled(settings.registry_settings())]


def test_a_consumer_gated_on_an_undeclared_setting_is_enabled_by_its_context_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gated = Consumer(name="mailer", description="test", filter_policy={}, requires_setting="smtp_host")
    monkeypatch.setattr(infra.config, "CONSUMERS", (gated,))
    assert enabled(_settings({}).registry_settings(), [gated]) == ()
    settings = _settings({"smtp_host": "mail.example.org"})
    assert enabled(settings.registry_settings(), [gated]) == (gated,)


def test_the_cdk_and_a_plain_context_read_the_same_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The local runtime reads cdk.json without the CDK (`PipelineSettings.from_context`)."""
    gated = Consumer(name="mailer", description="test", filter_policy={}, requires_setting="smtp_host")
    monkeypatch.setattr(infra.config, "CONSUMERS", (gated,))
    context = {**CUSTOM_CONTEXT, "smtp_host": "mail.example.org", "@aws-cdk/core:someFlag": True}

    settings = PipelineSettings.from_context(context)

    assert settings == _settings(context)
    assert (settings.telegram_bot_id, settings.consumer_settings) == (
        "shopbot",
        {"smtp_host": "mail.example.org"},
    )
    assert PipelineSettings.from_context(settings.to_context()) == settings


def test_every_log_level_has_its_lambda_level() -> None:
    assert set(LAMBDA_LOG_LEVELS) == set(get_args(LogLevel))


def test_filter_rules_pass_through_unchanged_including_exists() -> None:
    policy: dict[str, list[Any]] = {
        "source": ["telegram"],
        "command": [{"exists": True}],
        "chat_type": ["private", "group"],
    }
    filters = subscription_filters(policy)
    assert {key: f.conditions for key, f in filters.items()} == policy


def test_context_values_reach_the_template(custom_synth: Synthesized) -> None:
    resources = custom_synth.resources
    stack = custom_synth.stack
    assert {
        g["Properties"]["RetentionInDays"] for g in of_type(resources, "AWS::Logs::LogGroup").values()
    } == {90}
    (stage,) = of_type(resources, "AWS::ApiGatewayV2::Stage").values()
    assert stage["Properties"]["DefaultRouteSettings"] == {
        "ThrottlingRateLimit": 10,
        "ThrottlingBurstLimit": 20,
    }
    parameters = custom_synth.template.to_json()["Parameters"]
    assert any(p.get("Default", "").endswith("/python3.13/3.38.0") for p in parameters.values())
    for table in of_type(resources, "AWS::DynamoDB::Table").values():
        assert table["DeletionPolicy"] == "Delete"
    webhook_env = function_env(resources, custom_synth.logical_id(stack.ingress.webhook.function))
    assert webhook_env["TELEGRAM_BOT_ID"] == "shopbot"
    assert webhook_env["SECRET_ROTATION_GRACE_SECONDS"] == "600"
    assert webhook_env["PHONE_DEFAULT_REGION"] == "BY"
    for pipeline in stack.pipelines.values():
        function_id = custom_synth.logical_id(pipeline.worker.function)
        assert (
            function_env(resources, function_id)["IDEMPOTENCY_TTL_SECONDS"]
            == CUSTOM_CONTEXT["idempotency_ttl_seconds"]
        )
        assert props(resources, function_id)["LoggingConfig"]["ApplicationLogLevel"] == "DEBUG"
        assert function_env(resources, function_id)["POWERTOOLS_LOG_LEVEL"] == "DEBUG"
    assert "ai" not in stack.pipelines


def test_apps_built_in_code_carry_the_cdk_json_feature_flags(default_synth: Synthesized) -> None:
    flags = {k: v for k, v in project_context().items() if k.startswith("@aws-cdk")}
    assert flags, "cdk.json must pin the feature flags"
    node = default_synth.stack.node
    assert {k: node.try_get_context(k) for k in flags} == flags


def test_cdk_json_runs_app_py_with_the_project_venv() -> None:
    command = json.loads(CDK_JSON.read_text())["app"].split()
    assert command[-1] == "app.py"
    assert (PROJECT_ROOT / command[-1]).is_file()
    assert command[0] == ".venv/bin/python"


@pytest.mark.slow
def test_app_py_synthesizes_the_stack(tmp_path: Path) -> None:
    # Run from another directory: app.py must find the registry and assets on its own. As the
    # CDK CLI passes `-c`, bundling is skipped: no pip install of the phonenumbers layer (no network).
    result = run_app(tmp_path, BASE_CONTEXT, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    # The summary, to stderr, after the synth.
    assert DEFAULT_CONSUMERS_LINE in result.stderr.splitlines()
    assert not list(tmp_path.glob("asset.*/python/phonenumbers")), "the layer was bundled"
    template = json.loads((tmp_path / "TelegramCrmPipeline.template.json").read_text())
    assert json.loads((tmp_path / "validation-report.json").read_text())["pluginReports"] == []
    handlers = {r["Properties"].get("Handler") for r in template["Resources"].values()}
    assert "webhook.app.lambda_handler" in handlers
    assert ref_name(template["Outputs"]["WebhookUrl"]["Value"]).endswith("/telegram/webhook")


# -- failing fast, one line per problem ------------------------------------------------------------
def _refusal_lines(context: dict[str, object]) -> list[str]:
    with pytest.raises(ValidationError) as raised:
        _settings(context)
    return settings_error_lines(raised.value)


def test_an_unknown_key_is_refused_with_the_closest_known_one() -> None:
    assert _refusal_lines({"alarm_emial": "ops@example.org"}) == [
        "alarm_emial: not a setting of this app; did you mean `alarm_email`? (given 'ops@example.org')"
    ]
    # Case and underscores are forgiven in the suggestion, not in the key.
    [line] = _refusal_lines({"alarmEmail": "ops@example.org"})
    assert "did you mean `alarm_email`?" in line
    [line] = _refusal_lines({"frobnicate": "1"})
    assert line == "frobnicate: not a setting of this app; see the table in docs/configuration.md (given '1')"


@pytest.mark.parametrize("key", ["tracing", "telegram_ip_allowlist"])
@pytest.mark.parametrize("given", ["yes", "1", "on", "no"])
def test_a_switch_is_true_or_false_never_a_word_pydantic_would_guess(key: str, given: str) -> None:
    assert _refusal_lines({key: given}) == [f"{key}: must be true or false (given '{given}')"]


@pytest.mark.parametrize(
    ("given", "read"), [("true", True), (" False ", False), (True, True), (False, False)]
)
def test_a_switch_reads_cdk_json_booleans_and_the_text_of_minus_c(given: object, read: bool) -> None:
    assert _settings({"tracing": given}).tracing is read


def test_every_problem_is_reported_at_once_naming_key_value_and_what_is_allowed() -> None:
    lines = _refusal_lines({"removal_policy": "snapshot", "log_level": "VERBOSE", "stack_nmae": "Shop"})
    assert sorted(lines) == [
        "log_level: Input should be 'DEBUG', 'INFO', 'WARNING', 'ERROR' or 'CRITICAL' (given 'VERBOSE')",
        "removal_policy: Input should be 'retain' or 'destroy' (given 'snapshot')",
        "stack_nmae: not a setting of this app; did you mean `stack_name`? (given 'Shop')",
    ]


@pytest.mark.parametrize(
    "key",
    [
        "@aws-cdk/core:aNewFeatureFlag",
        "aws:cdk:bundling-stacks",
        "aws:cdk:enable-path-metadata",
        "cdk-version",
        "acknowledged-issue-numbers",
        "availability-zones:account=123456789012:region=eu-central-1",
        "assets-ecr-repository-name",
    ],
)
def test_the_cdk_s_own_context_keys_are_left_alone(key: str) -> None:
    assert _settings({key: "anything"}) == PipelineSettings()


def test_a_registry_requires_setting_key_is_known(monkeypatch: pytest.MonkeyPatch) -> None:
    gated = Consumer(name="mailer", description="test", filter_policy={}, requires_setting="smtp_host")
    monkeypatch.setattr(infra.config, "CONSUMERS", (gated,))
    assert _settings({"smtp_host": "mail.example.org"}).consumer_settings == {"smtp_host": "mail.example.org"}
    assert "did you mean `smtp_host`?" in _refusal_lines({"smtp_hots": "mail.example.org"})[0]


def test_a_misspelt_key_in_cdk_json_is_refused_too(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    document = json.loads(CDK_JSON.read_text())
    document["context"]["alarm_emial"] = "ops@example.org"
    cdk_json = tmp_path / "cdk.json"
    cdk_json.write_text(json.dumps(document))
    monkeypatch.setattr(infra.application, "CDK_JSON", cdk_json)
    with pytest.raises(ValidationError, match="alarm_emial"):
        build_app(BASE_CONTEXT, nag=False)
    # The local runtime reads cdk.json with the same model.
    with pytest.raises(ValidationError, match="alarm_emial"):
        LocalSettings.from_cdk_json(cdk_json)


def test_a_refused_value_is_shown_short() -> None:
    [line] = _refusal_lines({"sms_http_base_url": "ftp://" + "x" * 200})
    shown = line.rsplit("(given ", 1)[1]
    assert len(shown) <= SHOWN_VALUE_CHARS + 1
    assert shown.endswith("...)")
    assert shown_value(" ") == "' '"  # a blank stays visible


def test_a_refusal_of_the_whole_model_is_one_line_without_a_value() -> None:
    assert _refusal_lines({"sms_gateway": "http"}) == ["sms_gateway=http needs sms_http_base_url"]


def test_a_bad_autoreply_table_fails_the_synth_naming_the_variable() -> None:
    """The synth parses the registry's AUTOREPLY_REPLIES with the function's own parser."""
    assert FUNCTION_SETTING_PARSERS[REPLIES_ENV] is parse_replies
    environments = FunctionEnvironments(PipelineSettings(), stack_name="Test")
    for raw, why in [("{not json", "is not valid JSON"), ('{"start": "no slash"}', "must map")]:
        consumer = replace(by_name("autoreply"), environment={REPLIES_ENV: raw})
        with pytest.raises(SettingsError) as raised:
            environments.worker(
                consumer,
                queue_url="q",
                dlq_url="d",
                tables={"journal": "j"},
                secrets={"telegram_bot_token": "s"},
            )
        [line] = str(raised.value).splitlines()
        assert line.startswith(f"AUTOREPLY_REPLIES (registry environment of the autoreply consumer): {why}")
        assert line.endswith(f"(given {raw!r})")
    good = replace(by_name("autoreply"), environment={REPLIES_ENV: '{"/start": "Hi!"}'})
    env = environments.worker(
        good, queue_url="q", dlq_url="d", tables={"journal": "j"}, secrets={"telegram_bot_token": "s"}
    )
    assert env[REPLIES_ENV] == '{"/start": "Hi!"}'


@pytest.mark.parametrize(
    ("environment", "line"),
    [
        (
            {"SMS_MAX_ATTEMPTS": "0"},
            "SMS_MAX_ATTEMPTS (of the sms consumer): Input should be greater than or equal to 1 (given '0')",
        ),
        (
            {"SMS_MAX_ATTEMPTS": "10"},
            "SMS_MAX_ATTEMPTS (of the sms consumer): must be below the queue's max_receive_count (10)"
            " (given '10')",
        ),
        (
            {"SMS_LEASE_SECONDS": "30"},
            "SMS_LEASE_SECONDS (of the sms consumer): must exceed the worker timeout (30 s) (given '30')",
        ),
        (
            {RULES_ENV: '{"rules": "none"}'},
            "SMS_RULES_JSON (of the sms consumer): rules: Input should be a valid array",
        ),
    ],
)
def test_sms_settings_a_function_would_refuse_fail_the_synth_one_line_each(
    environment: dict[str, str], line: str
) -> None:
    sms = by_name("sms")
    with pytest.raises(SettingsError) as raised:
        check_sms_environment({**sms.environment, **environment}, sms)
    assert str(raised.value) == line


def test_the_synth_summary_says_what_will_be_deployed(
    default_synth: Synthesized, custom_synth: Synthesized, full_synth: Synthesized
) -> None:
    default = synth_summary(default_synth.stack)
    assert default[1:] == [
        DEFAULT_CONSUMERS_LINE,
        "  SMS gateway: end_user_messaging, sender any origination identity of the account,"
        " configuration set TelegramCrmPipeline-sms (created by the stack)",
        "  alarm e-mail: none: alarms notify the topic only",
        "  account: any account (environment-agnostic: the deploy's credentials choose it)",
        f"  region: {synth_region_summary(None)}",
        "  tracing: off",
        "  settings not at their default: none",
        "  removal policy: retain (cdk destroy keeps the retained resources; see Teardown in docs/deploy.md)",
    ]
    custom = "\n".join(synth_summary(custom_synth.stack))
    assert "SMS gateway: http, host sms.example.org\n" in custom  # the host only, never a path or query
    assert "removal policy: destroy" in custom
    changed = custom.split("settings not at their default: ")[1].splitlines()[0]
    assert "log_level=DEBUG, log_retention_days=90" in changed  # sorted by key
    assert "sms_http_base_url=sms.example.org" in changed  # by host, as the gateway line
    assert "telegram_bot_id=shopbot" in changed
    full = "\n".join(synth_summary(full_synth.stack))
    assert "off: autoreply (bot_application is set)\n" in full  # the bot answers instead
    assert f"alarm e-mail: {ALARM_EMAIL}" in full
    assert "tracing: on (X-Ray, every function and the events topic)" in full
    assert "tracing=true" in full
    assert f"sender {SMS_POOL_ID}, configuration set {SMS_CONFIGURATION_SET} (given)" in full


def test_an_in_process_synth_prints_no_summary(capfd: pytest.CaptureFixture[str]) -> None:
    build_app(BASE_CONTEXT, nag=False)
    assert "consumers on" not in capfd.readouterr().err


@pytest.mark.slow
def test_app_py_honours_minus_c_as_the_cdk_cli_does(tmp_path: Path) -> None:
    """Run directly, `python app.py -c ...` once ignored every -c: a bad value "synthesized"."""
    refused = run_app(tmp_path, {}, args=("-c", "aws:cdk:bundling-stacks=[]", "-c", "log_retention_days=31"))
    applied = run_app(tmp_path, {}, args=("--context", "aws:cdk:bundling-stacks=[]", "-c", "tracing=true"))

    assert refused.returncode == 1
    assert "log_retention_days: must be one of" in refused.stderr
    assert applied.returncode == 0, applied.stderr
    assert "  tracing: on (X-Ray" in applied.stderr


def test_app_py_refuses_an_argument_it_would_ignore() -> None:
    assert context_arguments(["-c", "a=1", "--context", "b=x=y", "--context=c="]) == {
        "a": "1",
        "b": "x=y",
        "c": "",
    }
    for argv in (["--frobnicate"], ["-c"], ["-c", "novalue"], ["synth"]):
        with pytest.raises(ValueError, match=r"usage: python app.py \[-c KEY=VALUE\]"):
            context_arguments(argv)


@pytest.mark.parametrize("spelled", ["[]", " [] ", ""])
def test_bundling_stacks_from_the_cdk_cli_is_read_as_the_list_it_spells(spelled: str) -> None:
    """The CDK CLI passes `-c aws:cdk:bundling-stacks=[]` as text, on which the CDK itself fails."""
    _, stack = build_app({"aws:cdk:bundling-stacks": spelled}, nag=False)

    assert stack.bundling_required is False


@pytest.mark.slow
def test_app_py_refuses_bad_settings_in_one_line_each(tmp_path: Path) -> None:
    result = run_app(
        tmp_path, {**BASE_CONTEXT, "alarm_emial": "ops@example.org", "log_retention_days": "31"}, timeout=120
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[0] == "invalid deployment settings:"
    assert sorted(lines[1:]) == [
        "alarm_emial: not a setting of this app; did you mean `alarm_email`? (given 'ops@example.org')",
        f"log_retention_days: must be one of {list(infra.config.LOG_RETENTION_DAYS)} (given '31')",
    ]


def test_the_synth_refuses_a_bot_application_that_would_drop_steps_saying_what_to_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 22: built at synth as the function builds it (pipeline.telegram_bot.inspection)."""

    (tmp_path / "synth_unsafe_bot.py").write_text(
        "from tests.unit.consumers.unsafe_bots import not_persistent as build  # noqa: F401\n"
    )
    monkeypatch.setattr(infra.config, "FUNCTIONS_DIR", tmp_path)
    with pytest.raises(ValidationError) as refused:
        _settings({"bot_application": "synth_unsafe_bot:build"})
    assert (
        "bot_application: synth_unsafe_bot:build refused: ConversationHandler survey (group 0) is not "
        "persistent"
    ) in str(refused.value)
    assert "give it name=... and persistent=True" in str(refused.value)


def test_the_bots_global_rate_is_one_setting_split_into_each_sending_consumers_environment_share() -> None:
    """`telegram_messages_per_second` (Telegram's 30 by default) reaches each sending consumer as
    its environments' share (`pipeline.pacing`): 80% of 10 a second over autoreply's 5 is 1.6."""
    from pipeline.pacing import HEADROOM, SEND_RATE_ENV, TELEGRAM_MESSAGES_PER_SECOND

    autoreply = by_name("autoreply")
    assert _settings({}).telegram_messages_per_second == TELEGRAM_MESSAGES_PER_SECOND
    environments = FunctionEnvironments(_settings({"telegram_messages_per_second": 10}), "Paced")
    environment = environments.worker(
        autoreply,
        queue_url="https://sqs.invalid/q",
        dlq_url="https://sqs.invalid/dlq",
        tables={name: f"{name}-table" for name in autoreply.tables},
        secrets={name: f"{name}-secret" for name in autoreply.secrets},
    )
    assert float(environment[SEND_RATE_ENV]) == pytest.approx(HEADROOM * 10 / autoreply.max_concurrency)


def test_raising_the_bots_rate_for_paid_broadcasts_leaves_replies_within_telegrams_free_rate() -> None:
    """Regression: `telegram_messages_per_second` raised to 400 for `allow_paid_broadcast` (as the
    docs say) paced autoreply to 64 messages a second per environment, 320 together: Telegram
    answers 429 past 30 a second to messages sent without allow_paid_broadcast (the Telegram
    stand-in too, `local.fakes.telegram_limits`), and a 429 stops the whole bot, broadcast too."""
    from pipeline.pacing import HEADROOM, SEND_RATE_ENV, TELEGRAM_MESSAGES_PER_SECOND

    def rate(name: str, context: dict[str, Any]) -> float:
        consumer = by_name(name)
        environment = FunctionEnvironments(_settings(context), "Paced").worker(
            consumer,
            queue_url="https://sqs.invalid/q",
            dlq_url="https://sqs.invalid/dlq",
            tables={table: f"{table}-table" for table in consumer.tables},
            secrets={secret: f"{secret}-secret" for secret in consumer.secrets},
            topic_arn="arn:aws:sns:eu-central-1:123456789012:events",
            alarm_topic_arn="arn:aws:sns:eu-central-1:123456789012:alarms",
        )
        return float(environment[SEND_RATE_ENV]) * consumer.max_concurrency

    paid = {"telegram_messages_per_second": 400, "allow_paid_broadcast": True}
    assert rate("autoreply", paid) == pytest.approx(HEADROOM * TELEGRAM_MESSAGES_PER_SECOND)
    assert rate("bot", paid) == pytest.approx(HEADROOM * TELEGRAM_MESSAGES_PER_SECOND)
    assert rate("broadcast", paid) == pytest.approx(HEADROOM * 0.8 * 400)
    # Unpaid, a broadcast is a free message like the others.
    unpaid = {"telegram_messages_per_second": 400}
    assert rate("broadcast", unpaid) == pytest.approx(HEADROOM * 0.8 * TELEGRAM_MESSAGES_PER_SECOND)


@pytest.mark.parametrize(
    ("rate", "why"),
    [
        (1001, "less than or equal to 1000"),  # Telegram's ceiling, with paid broadcasts
        (0, "greater than 0"),
        # 0.08 a second per environment: messages 12.5 s apart, longer than a message may wait.
        (0.5, "too slow for the autoreply consumer: its 5 environments' share, 0.08 a second"),
    ],
)
def test_the_synth_refuses_a_global_rate_telegram_would_refuse_or_too_slow_to_pace(
    rate: float, why: str
) -> None:
    with pytest.raises((ValidationError, SettingsError)) as refused:
        build_app({"aws:cdk:bundling-stacks": [], "telegram_messages_per_second": rate}, nag=False)
    assert "telegram_messages_per_second" in str(refused.value) and why in str(refused.value)
