"""The CRM history sweep (`infra.constructs.crm_sweep`): where a CRM is connected, one function on
a schedule, allowed exactly its cursor items, publishing and the connected CRMs' API secrets."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from synthesized import Synthesized
from template_queries import function_env, of_type, props, ref_name, role_permissions, xray_grant

from infra.config import PipelineSettings
from infra.constructs.crm_sweep import CrmSweep


def _sweep(synth: Synthesized) -> CrmSweep:
    assert synth.stack.crm_sweep is not None
    return synth.stack.crm_sweep


def test_without_a_connected_crm_there_is_no_sweep(default_synth: Synthesized) -> None:
    assert default_synth.stack.crm_sweep is None
    handlers = {
        props(default_synth.resources, f)["Handler"]
        for f in of_type(default_synth.resources, "AWS::Lambda::Function")
    }
    assert "crm_sweep.app.lambda_handler" not in handlers


def test_the_sweep_reads_both_connected_crms_with_their_own_secrets(full_synth: Synthesized) -> None:
    sweep = _sweep(full_synth)
    stack = full_synth.stack
    env = function_env(full_synth.resources, full_synth.logical_id(sweep.function.function))
    assert env["CRM_SWEEP_SOURCES"] == "bitrix24,amocrm"
    assert env["SMS_MAX_AGE_SECONDS"] == str(stack.settings.sms_max_age_minutes * 60) == "7200"
    assert env["CRM_SWEEP_OVERLAP_SECONDS"] == str(stack.settings.crm_sweep_overlap_seconds) == "60"
    assert env["CRM_SWEEP_PERIOD_SECONDS"] == str(stack.settings.crm_sweep_minutes * 60)
    for name in ("bitrix24_api", "amocrm_api"):
        assert ref_name(env[f"{name.upper()}_SECRET_ID"]) == full_synth.logical_id(
            stack.consumer_secrets.by_name[name]
        )
    assert ref_name(env["EVENTS_TOPIC_ARN"]) == full_synth.logical_id(stack.events.topic)


def test_the_sweep_may_touch_only_its_cursors_the_topic_and_the_crm_secrets(full_synth: Synthesized) -> None:
    sweep = _sweep(full_synth)
    stack = full_synth.stack
    secrets = stack.consumer_secrets.by_name
    assert role_permissions(full_synth.resources, full_synth.logical_id(sweep.function.role)) == {
        full_synth.logical_id(stack.tables.journal): {"dynamodb:GetItem", "dynamodb:PutItem"},
        full_synth.logical_id(stack.events.topic): {"sns:Publish"},
        full_synth.logical_id(stack.events.key): {"kms:Decrypt", "kms:GenerateDataKey"},
        full_synth.logical_id(secrets["bitrix24_api"]): {"secretsmanager:GetSecretValue"},
        full_synth.logical_id(secrets["amocrm_api"]): {"secretsmanager:GetSecretValue"},
        full_synth.logical_id(sweep.function.log_group): {"logs:CreateLogStream", "logs:PutLogEvents"},
        **xray_grant(stack.settings.tracing),
    }


def test_the_sweep_runs_every_crm_sweep_minutes_without_retries(full_synth: Synthesized) -> None:
    function_id = full_synth.logical_id(_sweep(full_synth).function.function)
    rules: dict[str, Any] = {
        rule_id: rule["Properties"]
        for rule_id, rule in of_type(full_synth.resources, "AWS::Events::Rule").items()
        if any(ref_name(t["Arn"]) == function_id for t in rule["Properties"]["Targets"])
    }
    (rule,) = rules.values()
    assert rule["ScheduleExpression"] == f"rate({full_synth.stack.settings.crm_sweep_minutes} minutes)"
    assert rule["Targets"][0]["RetryPolicy"] == {"MaximumRetryAttempts": 0}


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"sms_max_age_minutes": "9"}, "sms_max_age_minutes"),
        ({"sms_max_age_minutes": "1441"}, "sms_max_age_minutes"),
        ({"crm_sweep_minutes": "0"}, "crm_sweep_minutes"),
        ({"crm_sweep_minutes": "30", "sms_max_age_minutes": "45"}, "at least twice crm_sweep_minutes"),
    ],
)
def test_an_age_the_sweep_could_not_honour_fails_the_synth(context: dict[str, str], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        PipelineSettings.from_context(context)


def test_a_sweep_behind_by_more_than_the_sms_age_limit_is_alarmed(full_synth: Synthesized) -> None:
    """Its lag metric past sms_max_age_minutes: a catch-up not converging loses SMS."""
    alarms = [
        props(full_synth.resources, alarm)
        for alarm in of_type(full_synth.resources, "AWS::CloudWatch::Alarm")
        if props(full_synth.resources, alarm).get("MetricName") == "CrmSweepLagSeconds"
    ]
    assert len(alarms) == 1
    [alarm] = alarms
    assert alarm["Threshold"] == full_synth.stack.settings.sms_max_age_minutes * 60
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["Statistic"] == "Maximum"
    assert alarm["AlarmActions"]


def test_without_a_connected_crm_no_sweep_alarm(default_synth: Synthesized) -> None:
    assert not [
        alarm
        for alarm in of_type(default_synth.resources, "AWS::CloudWatch::Alarm")
        if props(default_synth.resources, alarm).get("MetricName") == "CrmSweepLagSeconds"
    ]
