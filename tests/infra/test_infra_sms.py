"""SMS infrastructure around the `sms` consumer: gateway grant, reconciler, delivery events.

Three synths cover the three ways it deploys: `default` (End User Messaging, the stack makes the
configuration set), `full` (End User Messaging with a given pool and configuration set) and
`custom` (an HTTP gateway: no End User Messaging resources at all).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import botocore
import cfnlint
import pytest
from aws_lambda_powertools import Metrics
from moto import mock_aws
from runtime_modules import imported
from synthesized import BASE_CONTEXT, SMS_CONFIGURATION_SET, SMS_HTTP_BASE_URL, SMS_POOL_ID, Synthesized
from template_queries import function_env, of_type, props, ref_name, role_permissions, xray_grant

from infra.application import build_app, settings_error_message
from infra.config import PipelineSettings
from infra.constructs.sms import END_USER_MESSAGING_REGIONS, SEND_TEXT_MESSAGE_RESOURCE_TYPES, SmsSupport
from infra.environment import SMS_CONSUMER, SettingsError, check_sms_environment
from infra.paths import PROJECT_ROOT
from pipeline import aws
from pipeline.registry import by_name
from pipeline.sms.journal import Clock, Draft, Finish, Journal, State, iso
from pipeline.sms.orders import Move, OrderState

# What a function reading a secret calls (`pipeline.secrets`): never DescribeSecret.
SECRET_READ = {"secretsmanager:GetSecretValue"}
DLQ_SEND = {"sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"}
FOURTEEN_DAYS = 14 * 24 * 3600
SMS = by_name(SMS_CONSUMER)
DEFAULT_CONFIGURATION_SET = "TelegramCrmPipeline-sms"


def sms_voice(resource: str) -> str:
    """An sms-voice ARN in this stack's account and region, as `ref_name` renders it."""
    return f"arn:${{AWS::Partition}}:sms-voice:${{AWS::Region}}:${{AWS::AccountId}}:{resource}"


def _sms(synth: Synthesized) -> SmsSupport:
    assert synth.stack.sms is not None
    return synth.stack.sms


def _ids(synth: Synthesized) -> dict[str, str]:
    sms = _sms(synth)
    stack = synth.stack
    ids = {
        "worker": synth.logical_id(stack.pipelines[SMS_CONSUMER].worker.function),
        "worker_role": synth.logical_id(stack.pipelines[SMS_CONSUMER].worker.role),
        "reconciler": synth.logical_id(sms.reconciler.function),
        "reconciler_role": synth.logical_id(sms.reconciler.role),
        "reconciler_logs": synth.logical_id(sms.reconciler.log_group),
        "journal": synth.logical_id(stack.tables.journal),
    }
    if "sms_gateway" in stack.consumer_secrets.by_name:  # with the HTTP gateway only
        ids["gateway_secret"] = synth.logical_id(stack.consumer_secrets.by_name["sms_gateway"])
    if sms.delivery_events and sms.delivery_events_handler:
        ids.update(
            events=synth.logical_id(sms.delivery_events_handler.function),
            events_role=synth.logical_id(sms.delivery_events_handler.role),
            events_logs=synth.logical_id(sms.delivery_events_handler.log_group),
            topic=synth.logical_id(sms.delivery_events.topic),
            key=synth.logical_id(sms.delivery_events.key),
            failed_dlq=synth.logical_id(sms.delivery_events_dlqs["failed"]),
            undelivered_dlq=synth.logical_id(sms.delivery_events_dlqs["undelivered"]),
        )
    return ids


TEAM_RULES = PROJECT_ROOT / "team" / "sms_rules.json"


def _sms_settings(env: dict[str, Any]) -> dict[str, Any]:
    return {
        name: value
        for name, value in env.items()
        if name.startswith("SMS_") and name != "SMS_GATEWAY_SECRET_ID"
    }


# -- the settings every SMS function reads ---------------------------------------------------------
def _expected_sms_settings(**deployment: str) -> dict[str, str]:
    return {
        "SMS_RETRY_BASE_SECONDS": str(SMS.retry.base_delay_seconds),
        "SMS_RETRY_MAX_SECONDS": str(SMS.retry.max_delay_seconds),
        "SMS_MAX_ATTEMPTS": SMS.environment["SMS_MAX_ATTEMPTS"],
        "SMS_LEASE_SECONDS": SMS.environment["SMS_LEASE_SECONDS"],
        # The deployment's one SMS age (`sms_max_age_minutes`): a notification past it is `expired`.
        "SMS_MAX_AGE_SECONDS": str(PipelineSettings.model_fields["sms_max_age_minutes"].default * 60),
        # The team's rules and texts, read from their file at synth (no rules ship in a layer).
        "SMS_RULES_JSON": json.dumps(
            json.loads(TEAM_RULES.read_text()), ensure_ascii=False, separators=(",", ":")
        ),
        **deployment,
    }


@pytest.mark.parametrize(
    ("synth_name", "expected"),
    [
        (
            "default_synth",
            _expected_sms_settings(
                SMS_GATEWAY="end_user_messaging",
                SMS_MESSAGE_TYPE="TRANSACTIONAL",
                SMS_RECONCILE_DEADLINE_HOURS="24",
                SMS_CONFIGURATION_SET=DEFAULT_CONFIGURATION_SET,
            ),
        ),
        (
            "full_synth",
            _expected_sms_settings(
                SMS_GATEWAY="end_user_messaging",
                SMS_MESSAGE_TYPE="TRANSACTIONAL",
                SMS_RECONCILE_DEADLINE_HOURS="24",
                SMS_CONFIGURATION_SET=SMS_CONFIGURATION_SET,
                SMS_ORIGINATION_IDENTITY=SMS_POOL_ID,
            ),
        ),
        (
            "custom_synth",
            _expected_sms_settings(
                SMS_GATEWAY="http",
                SMS_HTTP_BASE_URL=SMS_HTTP_BASE_URL,
                SMS_MESSAGE_TYPE="PROMOTIONAL",
                SMS_RECONCILE_DEADLINE_HOURS="6",
            ),
        ),
    ],
)
def test_every_sms_function_reads_the_same_sms_settings(
    synth_name: str, expected: dict[str, str], request: pytest.FixtureRequest
) -> None:
    synth: Synthesized = request.getfixturevalue(synth_name)
    ids = _ids(synth)
    functions = ["worker", "reconciler", *(["events"] if "events" in ids else [])]
    for function in functions:
        env = function_env(synth.resources, ids[function])
        assert _sms_settings(env) == expected, function
        assert ref_name(env["JOURNAL_TABLE"]) == ids["journal"]
    # What pipeline.sms.settings makes of them at run time (as the functions do, from os.environ).
    assert check_sms_environment(expected, SMS).gateway == expected["SMS_GATEWAY"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"SMS_MAX_ATTEMPTS": str(SMS.retry.max_receive_count)},
            "must be below the queue's max_receive_count",
        ),
        ({"SMS_LEASE_SECONDS": str(SMS.timeout_seconds)}, "must exceed the worker timeout"),
        ({"SMS_MESSAGE_TYPE": "MARKETING"}, "SMS_MESSAGE_TYPE"),
    ],
)
def test_sms_settings_the_functions_would_refuse_fail_the_synth(change: dict[str, str], message: str) -> None:
    environment = {**_expected_sms_settings(SMS_GATEWAY="end_user_messaging"), **change}
    with pytest.raises(ValueError, match=message):
        check_sms_environment(environment, SMS)


def _rules_json(template: object, **extra: object) -> str:
    rule = {"name": "ready", "status": "ready_for_pickup", "template": template}
    return json.dumps({"schema_version": 2, **extra, "rules": [rule]}, ensure_ascii=False)


# 40 + 20 units of fields and 170 of text: 230 UCS-2 units, 4 parts of 67.
LONG_RUSSIAN = "{customer_name}, ваш заказ {order_id} готов к выдаче. " + "Ждём вас в магазине. " * 6


def test_a_template_over_the_part_limit_fails_the_synth_with_its_count() -> None:
    environment = {
        **_expected_sms_settings(SMS_GATEWAY="end_user_messaging"),
        "SMS_RULES_JSON": _rules_json(LONG_RUSSIAN, fallback_language="ru"),
    }
    with pytest.raises(
        ValueError, match=r"rule 'ready' \(ru\) comes to 4 UCS-2 parts .* over its max_parts 3"
    ):
        check_sms_environment(environment, SMS)
    # A limit the shop raised admits it.
    raised = _rules_json(LONG_RUSSIAN, fallback_language="ru", max_parts=4)
    check_sms_environment({**environment, "SMS_RULES_JSON": raised}, SMS)


def test_the_part_limit_counts_fields_at_their_longest_not_the_template_alone() -> None:
    # 150 characters of GSM text alone: one part; with a name (any script: UCS-2) of 40: 197
    # UCS-2 units, three parts.
    template = "Dear {customer_name}, " + "x" * 150
    environment = {
        **_expected_sms_settings(SMS_GATEWAY="end_user_messaging"),
        "SMS_RULES_JSON": _rules_json(template, max_parts=2),
    }
    with pytest.raises(ValueError, match=r"rule 'ready' \(en\) comes to 3 UCS-2 parts"):
        check_sms_environment(environment, SMS)


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        (_rules_json({"en": "Ready {order_id}"}, languages=["en", "ru"]), "has no text in ru"),
        (_rules_json("Ready {order_id}", languages=["en", "de"]), "has no text in de"),
        (_rules_json({"en": "A", "fr": "B"}), "has a text in fr, not in languages"),
        (_rules_json("Ready", language_by_country={"XX": "en"}), "'XX' is not a region with phone numbers"),
        (_rules_json("Ready", language_by_country={"DE": "de"}), "'de' is not in languages"),
        (_rules_json("Ready", max_price="5"), "max_price"),
    ],
)
def test_a_rule_missing_a_text_of_a_configured_language_fails_the_synth(rules: str, message: str) -> None:
    environment = {**_expected_sms_settings(SMS_GATEWAY="end_user_messaging"), "SMS_RULES_JSON": rules}
    with pytest.raises(ValueError, match=message):
        check_sms_environment(environment, SMS)


def test_a_version_1_rules_file_still_loads_its_single_texts_as_the_fallback_language() -> None:
    rules = json.dumps(
        {"version": 1, "rules": [{"name": "r", "status": "shipped", "template": "Sent {order_id}"}]}
    )
    environment = {**_expected_sms_settings(SMS_GATEWAY="end_user_messaging"), "SMS_RULES_JSON": rules}
    check_sms_environment(environment, SMS)


def test_the_reconciler_is_told_where_the_http_gateway_token_is(custom_synth: Synthesized) -> None:
    ids = _ids(custom_synth)
    env = function_env(custom_synth.resources, ids["reconciler"])
    assert ref_name(env["SMS_GATEWAY_SECRET_ID"]) == ids["gateway_secret"]
    assert env["POWERTOOLS_SERVICE_NAME"] == "reconciler"


# -- who may do what --------------------------------------------------------------------------------
def test_with_end_user_messaging_there_is_no_gateway_token_to_create_read_or_grant(
    default_synth: Synthesized, full_synth: Synthesized
) -> None:
    """Issue 23: the `sms_gateway` secret is the HTTP gateway's token; End User Messaging (the
    default) needs none, so neither the worker nor the reconciler may read one, nor is it made."""
    for synth in (default_synth, full_synth):
        assert "sms_gateway" not in synth.stack.consumer_secrets.by_name
        assert of_type(synth.resources, "AWS::SecretsManager::Secret")
        for function in ("worker", "reconciler"):
            assert "SMS_GATEWAY_SECRET_ID" not in function_env(synth.resources, _ids(synth)[function])
        for role in ("worker_role", "reconciler_role"):
            actions = set().union(*role_permissions(synth.resources, _ids(synth)[role]).values())
            assert not {a for a in actions if a.startswith("secretsmanager:")}


def test_with_the_http_gateway_the_worker_reads_the_gateway_token(custom_synth: Synthesized) -> None:
    ids = _ids(custom_synth)
    env = function_env(custom_synth.resources, ids["worker"])
    assert ref_name(env["SMS_GATEWAY_SECRET_ID"]) == ids["gateway_secret"]
    assert role_permissions(custom_synth.resources, ids["worker_role"])[ids["gateway_secret"]] == SECRET_READ


def test_with_no_sender_configured_the_worker_may_send_from_any_of_the_accounts_identities(
    default_synth: Synthesized,
) -> None:
    ids = _ids(default_synth)
    permissions = role_permissions(default_synth.resources, ids["worker_role"])
    sms_voice_grants = {
        resource: actions for resource, actions in permissions.items() if ":sms-voice:" in resource
    }
    send = {"sms-voice:SendTextMessage"}
    assert sms_voice_grants == {
        sms_voice("phone-number/*"): send,
        sms_voice("pool/*"): send,
        sms_voice("sender-id/*"): send,
        sms_voice("opt-out-list/*"): send,
        sms_voice("protect-configuration/*"): send,
        sms_voice(f"configuration-set/{DEFAULT_CONFIGURATION_SET}"): send,
    }


def test_with_a_given_pool_and_configuration_set_the_worker_may_send_only_through_them(
    full_synth: Synthesized,
) -> None:
    ids = _ids(full_synth)
    permissions = role_permissions(full_synth.resources, ids["worker_role"])
    sms_voice_grants = {
        resource: actions for resource, actions in permissions.items() if ":sms-voice:" in resource
    }
    send = {"sms-voice:SendTextMessage"}
    assert sms_voice_grants == {
        sms_voice(f"pool/{SMS_POOL_ID}"): send,
        sms_voice(f"configuration-set/{SMS_CONFIGURATION_SET}"): send,
        sms_voice("opt-out-list/*"): send,
        sms_voice("protect-configuration/*"): send,
    }


@pytest.mark.parametrize("synth_name", ["default_synth", "full_synth"])
def test_every_send_grant_names_a_resource_type_of_send_text_message(
    synth_name: str, request: pytest.FixtureRequest
) -> None:
    synth: Synthesized = request.getfixturevalue(synth_name)
    ids = _ids(synth)
    for role in ("worker_role", "reconciler_role"):
        granted = [r for r in role_permissions(synth.resources, ids[role]) if ":sms-voice:" in r]
        assert all(resource.startswith(sms_voice("")) for resource in granted), role
        types = {resource.removeprefix(sms_voice("")).split("/")[0] for resource in granted}
        assert types <= set(SEND_TEXT_MESSAGE_RESOURCE_TYPES), role
        assert {"configuration-set", "opt-out-list", "protect-configuration"} <= types, role


def test_with_the_http_gateway_nothing_may_use_end_user_messaging(custom_synth: Synthesized) -> None:
    policies = json.dumps(of_type(custom_synth.resources, "AWS::IAM::Policy"))
    assert "sms-voice" not in policies
    assert not [r for r in custom_synth.resources.values() if r["Type"].startswith("AWS::SMSVOICE::")]
    sms = _sms(custom_synth)
    assert sms.delivery_events is None and sms.delivery_events_handler is None
    handlers = {
        p["Properties"]["Handler"] for p in of_type(custom_synth.resources, "AWS::Lambda::Function").values()
    }
    assert "sms_events.app.lambda_handler" not in handlers


@pytest.mark.parametrize("synth_name", ["default_synth", "full_synth"])
def test_reconciler_may_use_the_journal_its_index_and_send_exactly_as_the_worker_may(
    synth_name: str, request: pytest.FixtureRequest
) -> None:
    """The reconciler sends too (operator resends, orphans, proven-not-received resends): without
    the worker's End User Messaging grant, every one of them would end `failed` in AWS."""
    synth: Synthesized = request.getfixturevalue(synth_name)
    ids = _ids(synth)
    worker_sends = {
        resource: actions
        for resource, actions in role_permissions(synth.resources, ids["worker_role"]).items()
        if ":sms-voice:" in resource
    }
    assert worker_sends and set().union(*worker_sends.values()) == {"sms-voice:SendTextMessage"}
    assert role_permissions(synth.resources, ids["reconciler_role"]) == {
        ids["journal"]: {"dynamodb:GetItem", "dynamodb:UpdateItem"},
        f"${{{ids['journal']}}}/index/by_state": {"dynamodb:Query"},
        ids["reconciler_logs"]: {"logs:CreateLogStream", "logs:PutLogEvents"},
        **xray_grant(synth.stack.settings.tracing),
        **worker_sends,
    }


def test_with_the_http_gateway_the_reconciler_may_also_read_the_gateway_token(
    custom_synth: Synthesized,
) -> None:
    ids = _ids(custom_synth)
    assert role_permissions(custom_synth.resources, ids["reconciler_role"]) == {
        ids["journal"]: {"dynamodb:GetItem", "dynamodb:UpdateItem"},
        f"${{{ids['journal']}}}/index/by_state": {"dynamodb:Query"},
        ids["gateway_secret"]: SECRET_READ,
        ids["reconciler_logs"]: {"logs:CreateLogStream", "logs:PutLogEvents"},
        **xray_grant(custom_synth.stack.settings.tracing),
    }


@pytest.mark.parametrize("synth_name", ["default_synth", "full_synth"])
def test_sms_events_may_update_journal_records_and_dead_letter_only(
    synth_name: str, request: pytest.FixtureRequest
) -> None:
    synth: Synthesized = request.getfixturevalue(synth_name)
    ids = _ids(synth)
    assert role_permissions(synth.resources, ids["events_role"]) == {
        ids["journal"]: {"dynamodb:GetItem", "dynamodb:UpdateItem"},
        ids["failed_dlq"]: DLQ_SEND,
        ids["events_logs"]: {"logs:CreateLogStream", "logs:PutLogEvents"},
        **xray_grant(synth.stack.settings.tracing),
    }


# -- the reconciler's schedule ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("synth_name", "rate"), [("default_synth", "rate(5 minutes)"), ("custom_synth", "rate(10 minutes)")]
)
def test_reconciler_runs_on_the_configured_schedule_without_retries(
    synth_name: str, rate: str, request: pytest.FixtureRequest
) -> None:
    synth: Synthesized = request.getfixturevalue(synth_name)
    ids = _ids(synth)
    ((rule_id, rule),) = of_type(synth.resources, "AWS::Events::Rule").items()
    properties = rule["Properties"]
    assert properties["ScheduleExpression"] == rate
    assert properties["State"] == "ENABLED"
    (target,) = properties["Targets"]
    assert ref_name(target["Arn"]) == ids["reconciler"]
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 0}
    (invoke,) = [
        p["Properties"]
        for p in of_type(synth.resources, "AWS::Lambda::Permission").values()
        if ref_name(p["Properties"]["FunctionName"]) == ids["reconciler"]
    ]
    assert invoke["Principal"] == "events.amazonaws.com"
    assert ref_name(invoke["SourceArn"]) == rule_id
    (config,) = [
        c["Properties"]
        for c in of_type(synth.resources, "AWS::Lambda::EventInvokeConfig").values()
        if ref_name(c["Properties"]["FunctionName"]) == ids["reconciler"]
    ]
    # A failed run is simply the next scheduled run's work.
    assert config["MaximumRetryAttempts"] == 0
    assert props(synth.resources, ids["reconciler"])["Handler"] == "reconciler.app.lambda_handler"


# -- delivery events ------------------------------------------------------------------------------
def _topic_statements(synth: Synthesized, topic_id: str) -> list[dict[str, Any]]:
    (policy,) = [
        p
        for p in of_type(synth.resources, "AWS::SNS::TopicPolicy").values()
        if [ref_name(t) for t in p["Properties"]["Topics"]] == [topic_id]
    ]
    statements: list[dict[str, Any]] = policy["Properties"]["PolicyDocument"]["Statement"]
    return statements


@pytest.mark.parametrize(
    ("synth_name", "configuration_set"),
    [("default_synth", DEFAULT_CONFIGURATION_SET), ("full_synth", SMS_CONFIGURATION_SET)],
)
def test_only_end_user_messaging_may_publish_to_the_encrypted_tls_only_events_topic(
    synth_name: str, configuration_set: str, request: pytest.FixtureRequest
) -> None:
    synth: Synthesized = request.getfixturevalue(synth_name)
    ids = _ids(synth)
    assert ref_name(props(synth.resources, ids["topic"])["KmsMasterKeyId"]) == ids["key"]
    statements = _topic_statements(synth, ids["topic"])
    (deny,) = [s for s in statements if s["Effect"] == "Deny"]
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    (allow,) = [s for s in statements if s["Effect"] == "Allow"]
    assert allow["Principal"] == {"Service": "sms-voice.amazonaws.com"}
    assert allow["Action"] == "sns:Publish"
    assert allow["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    assert ref_name(allow["Condition"]["ArnLike"]["aws:SourceArn"]) == sms_voice(
        f"configuration-set/{configuration_set}"
    )
    key = props(synth.resources, ids["key"])
    assert key["EnableKeyRotation"] is True
    (key_statement,) = [
        s for s in key["KeyPolicy"]["Statement"] if s["Principal"] == {"Service": "sms-voice.amazonaws.com"}
    ]
    assert set(key_statement["Action"]) == {"kms:Decrypt", "kms:GenerateDataKey*"}
    assert key_statement["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    assert ref_name(key_statement["Condition"]["ArnLike"]["aws:SourceArn"]) == sms_voice("*")


@pytest.mark.parametrize("synth_name", ["default_synth", "full_synth"])
def test_sms_events_is_subscribed_with_a_dlq_for_undelivered_and_for_failed_events(
    synth_name: str, request: pytest.FixtureRequest
) -> None:
    synth: Synthesized = request.getfixturevalue(synth_name)
    ids = _ids(synth)
    (subscription,) = [
        s["Properties"]
        for s in of_type(synth.resources, "AWS::SNS::Subscription").values()
        if ref_name(s["Properties"]["TopicArn"]) == ids["topic"]
    ]
    assert subscription["Protocol"] == "lambda"
    assert ref_name(subscription["Endpoint"]) == ids["events"]
    assert ref_name(subscription["RedrivePolicy"]["deadLetterTargetArn"]) == ids["undelivered_dlq"]
    (invoke,) = [
        p["Properties"]
        for p in of_type(synth.resources, "AWS::Lambda::Permission").values()
        if ref_name(p["Properties"]["FunctionName"]) == ids["events"]
    ]
    assert invoke["Principal"] == "sns.amazonaws.com"
    assert ref_name(invoke["SourceArn"]) == ids["topic"]
    (config,) = [
        c["Properties"]
        for c in of_type(synth.resources, "AWS::Lambda::EventInvokeConfig").values()
        if ref_name(c["Properties"]["FunctionName"]) == ids["events"]
    ]
    assert config["MaximumRetryAttempts"] == 2
    assert ref_name(config["DestinationConfig"]["OnFailure"]["Destination"]) == ids["failed_dlq"]
    policies = of_type(synth.resources, "AWS::SQS::QueuePolicy").values()
    for dlq in ("failed_dlq", "undelivered_dlq"):
        queue = props(synth.resources, ids[dlq])
        assert queue["MessageRetentionPeriod"] == FOURTEEN_DAYS
        assert queue["SqsManagedSseEnabled"] is True
        (policy,) = [p for p in policies if {"Ref": ids[dlq]} in p["Properties"]["Queues"]]
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        assert [s["Condition"] for s in statements if s["Effect"] == "Deny"] == [
            {"Bool": {"aws:SecureTransport": "false"}}
        ]
    # SNS may put undelivered events into their DLQ, for this topic only.
    (undelivered_policy,) = [
        p for p in policies if {"Ref": ids["undelivered_dlq"]} in p["Properties"]["Queues"]
    ]
    (allow,) = [
        s for s in undelivered_policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Allow"
    ]
    assert allow["Principal"] == {"Service": "sns.amazonaws.com"}
    assert ref_name(allow["Condition"]["ArnEquals"]["aws:SourceArn"]) == ids["topic"]
    assert props(synth.resources, ids["events"])["Handler"] == "sms_events.app.lambda_handler"


def test_the_stack_makes_the_configuration_set_and_points_its_events_at_the_topic(
    default_synth: Synthesized,
) -> None:
    ids = _ids(default_synth)
    ((set_id, configuration_set),) = of_type(
        default_synth.resources, "AWS::SMSVOICE::ConfigurationSet"
    ).items()
    properties = configuration_set["Properties"]
    assert properties["ConfigurationSetName"] == DEFAULT_CONFIGURATION_SET
    (destination,) = properties["EventDestinations"]
    assert destination["Enabled"] is True
    assert destination["MatchingEventTypes"] == ["TEXT_ALL"]
    assert ref_name(destination["SnsDestination"]["TopicArn"]) == ids["topic"]
    # Created only once End User Messaging may publish, and before the worker can send with it.
    topic_policy = next(
        logical_id
        for logical_id, p in of_type(default_synth.resources, "AWS::SNS::TopicPolicy").items()
        if [ref_name(t) for t in p["Properties"]["Topics"]] == [ids["topic"]]
    )
    assert {ids["key"], topic_policy} <= set(configuration_set["DependsOn"])
    assert set_id in default_synth.resources[ids["worker"]]["DependsOn"]


def test_the_stack_makes_its_own_opt_out_list_with_the_configuration_set(default_synth: Synthesized) -> None:
    """Issue 43: End User Messaging's own opt-out list is part of the SMS configuration (STOP is
    handled by AWS; a listed number's send ends `suppressed`). Nothing calls it: no grant."""
    ((_, opt_outs),) = of_type(default_synth.resources, "AWS::SMSVOICE::OptOutList").items()
    assert opt_outs["Properties"]["OptOutListName"] == DEFAULT_CONFIGURATION_SET.replace(
        "-sms", "-sms-opt-outs"
    )


def test_a_given_configuration_set_is_used_not_created(full_synth: Synthesized) -> None:
    assert of_type(full_synth.resources, "AWS::SMSVOICE::ConfigurationSet") == {}
    assert of_type(full_synth.resources, "AWS::SMSVOICE::OptOutList") == {}
    outputs = full_synth.template.to_json()["Outputs"]
    assert outputs["SmsConfigurationSet"]["Value"] == SMS_CONFIGURATION_SET


def test_outputs_tell_the_operator_where_delivery_events_go(default_synth: Synthesized) -> None:
    ids = _ids(default_synth)
    outputs = default_synth.template.to_json()["Outputs"]
    assert ref_name(outputs["SmsEventsTopicArn"]["Value"]) == ids["topic"]
    assert outputs["SmsConfigurationSet"]["Value"] == DEFAULT_CONFIGURATION_SET
    assert ref_name(outputs["SmsEventsFailedDlqUrl"]["Value"]) == ids["failed_dlq"]
    assert ref_name(outputs["SmsEventsUndeliveredDlqUrl"]["Value"]) == ids["undelivered_dlq"]
    assert ref_name(outputs["SmsReconcilerName"]["Value"]) == ids["reconciler"]


# -- the deployed shape against the real code -----------------------------------------------------
@pytest.fixture
def deployed_journal(default_synth: Synthesized, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The journal table exactly as the template defines it (keys, index), on moto; the
    reconciler's environment exactly as the template sets it, the table name aside."""
    ids = _ids(default_synth)
    for name, value in {
        "AWS_DEFAULT_REGION": "eu-central-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "POWERTOOLS_TRACE_DISABLED": "1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    env = function_env(default_synth.resources, ids["reconciler"])
    assert ref_name(env.pop("JOURNAL_TABLE")) == ids["journal"]
    for name, value in {**env, "JOURNAL_TABLE": "journal"}.items():
        monkeypatch.setenv(name, value)
    table = props(default_synth.resources, ids["journal"])
    with mock_aws():
        aws.reset_clients()
        aws.client("dynamodb").create_table(
            TableName="journal",
            KeySchema=table["KeySchema"],
            AttributeDefinitions=table["AttributeDefinitions"],
            GlobalSecondaryIndexes=table["GlobalSecondaryIndexes"],
            BillingMode=table["BillingMode"],
        )
        yield "journal"
        aws.reset_clients()


def _unknown_notification(journal: Journal) -> str:
    now = datetime.now(UTC)
    draft = Draft(
        key="0" * 64,
        event_type="order.status_changed",
        order_id="crm:A-1001",
        transition=f"at:{iso(now)}|ready_for_pickup|paid",
        crm_event_id="evt-1",
        channel="sms",
        recipient="+375291234567",
        body="Your order A-1001 is ready for pickup",
        rule="ready_for_pickup",
        order_status="ready_for_pickup",
        previous_status="paid",
        occurred_at=now,
        received_at=now,
        correlation_id="corr-1",
    )
    first = OrderState.first(Move(draft.order_id, draft.order_status, "paid", now, now))
    assert journal.record_entry(first, None, draft)
    assert journal.claim(draft.key, "worker-1", from_states=(State.PENDING,)) is not None
    finished = journal.finish(draft.key, "worker-1", Finish(State.UNKNOWN, {"outcome": "unknown"}))
    assert finished is not None and finished.state is State.UNKNOWN
    return draft.key


def test_the_reconciler_as_deployed_finds_unknowns_through_the_index_and_emits_the_alarmed_metrics(
    default_synth: Synthesized, deployed_journal: str
) -> None:
    with imported("pipeline.sms.service", "pipeline.sms.reconcile") as (service, reconciler):
        clock = Clock()
        # The template's SMS settings, read and validated as the function does at run time.
        runtime = service.SmsRuntime.from_env(clock=clock)
        assert runtime.settings.journal_table == deployed_journal
        key = _unknown_notification(runtime.journal)
        clock.advance(timedelta(hours=runtime.settings.reconcile_deadline_hours, minutes=1).total_seconds())
        metrics = Metrics()
        metrics.clear_metrics()
        try:
            report = reconciler.reconcile(runtime)
            # As Lambda flushes them: namespace and `service` from the function's environment.
            emitted = Metrics().serialize_metric_set()
        finally:
            metrics.clear_metrics()
    assert (report.unknown_count, report.past_deadline) == (1, 1)
    assert report.oldest_unknown_age_seconds > runtime.settings.reconcile_deadline_hours * 3600
    assert [k for k, _ in runtime.journal.keys_in_state(State.UNKNOWN)] == [key]
    (directive,) = emitted["_aws"]["CloudWatchMetrics"]
    emitted_dimensions = {name: emitted[name] for name in directive["Dimensions"][0]}
    emitted_names = {metric["Name"] for metric in directive["Metrics"]}
    alarmed = [
        a["Properties"]
        for a in of_type(default_synth.resources, "AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("MetricName", "").startswith("SmsUnknown")
    ]
    assert len(alarmed) == 2
    for alarm in alarmed:
        assert alarm["Namespace"] == directive["Namespace"]
        assert alarm["MetricName"] in emitted_names
        assert {d["Name"]: d["Value"] for d in alarm["Dimensions"]} == emitted_dimensions


# -- regions ---------------------------------------------------------------------------------------
def _build_in(region: str, monkeypatch: pytest.MonkeyPatch, **context: str) -> None:
    monkeypatch.setenv("CDK_DEFAULT_REGION", region)
    build_app({**BASE_CONTEXT, **context}, nag=False)


@pytest.mark.parametrize("region", ["ap-southeast-5", "cn-north-1"])
def test_end_user_messaging_in_a_region_without_it_fails_the_synth_in_one_line_naming_the_way_out(
    region: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(SettingsError) as refused:
        _build_in(region, monkeypatch)
    [line] = settings_error_message(refused.value).splitlines()
    assert line.startswith(f"sms_gateway: end_user_messaging is not available in region {region}; ")
    assert "deploy with -c sms_gateway=http" in line
    # The HTTP gateway needs no End User Messaging, so it deploys there.
    _build_in(region, monkeypatch, sms_gateway="http", sms_http_base_url=SMS_HTTP_BASE_URL)


def test_end_user_messaging_synthesizes_in_a_region_that_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    _build_in("eu-central-1", monkeypatch)


def test_the_end_user_messaging_regions_have_the_api_and_the_cloudformation_resources() -> None:
    """The list stays within what the installed botocore and cfn-lint know (each lags AWS a bit)."""
    endpoints = json.loads((Path(botocore.__file__).parent / "data" / "endpoints.json").read_text())
    api = {
        region
        for partition in endpoints["partitions"]
        for region in partition["services"].get("sms-voice", {}).get("endpoints", {})
    }
    providers = Path(cfnlint.__file__).parent / "data" / "schemas" / "providers"
    cloudformation = {
        schema.stem
        for schema in providers.glob("*.json")
        if "AWS::SMSVOICE::ConfigurationSet" in schema.read_text(encoding="utf-8")
    }
    assert api & cloudformation >= END_USER_MESSAGING_REGIONS
