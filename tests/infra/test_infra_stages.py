"""Issue 41 stages: `dev` and `prod` synthesized for one account and region share no physical
name, export, or metric namespace; every alarm and metric reads its own stage's; settings per stage."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from synthesized import BASE_CONTEXT, Synthesized, full_context, synthesize

from infra.config import PipelineSettings, SettingsError, settings_error_lines
from infra.naming import stack_scoped_name

REGION = "eu-central-1"
# Every property that names the resource holding it (not another one, like a Permission's
# FunctionName), by resource type; the types without one here get CloudFormation's names.
NAME_PROPERTIES = {
    "AWS::SNS::Topic": "TopicName",
    "AWS::SQS::Queue": "QueueName",
    "AWS::DynamoDB::Table": "TableName",
    "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::CloudWatch::Alarm": "AlarmName",
    "AWS::CloudWatch::Dashboard": "DashboardName",
    "AWS::Lambda::Function": "FunctionName",
    "AWS::Lambda::LayerVersion": "LayerName",
    "AWS::IAM::Role": "RoleName",
    "AWS::SecretsManager::Secret": "Name",
    "AWS::SSM::Parameter": "Name",
    "AWS::ApiGatewayV2::Api": "Name",
    "AWS::Events::Rule": "Name",
    "AWS::KMS::Alias": "AliasName",
    "AWS::SMSVOICE::ConfigurationSet": "ConfigurationSetName",
    "AWS::SMSVOICE::OptOutList": "OptOutListName",
}
# The context of both stages: every consumer and feature, the stack's own SMS configuration set.
STAGES_CONTEXT = {
    **{key: value for key, value in full_context().items() if key != "sms_configuration_set"},
    "stages": {"prod": {"alarms": "full", "api_rate_limit": "200"}, "qa": {}},
}


@pytest.fixture(scope="module")
def stages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Synthesized]:
    return {
        stage: synthesize(tmp_path_factory.mktemp(f"cdk-{stage}"), {**STAGES_CONTEXT, "stage": stage})
        for stage in ("dev", "prod")
    }


def resolved(value: Any, stack_name: str) -> str | None:
    """A name as CloudFormation will make it in REGION; None for a reference to a resource (whose
    name CloudFormation generates after the stack's)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        pseudo = {"AWS::Region": REGION, "AWS::StackName": stack_name}
        texts = [part if isinstance(part, str) else pseudo.get(part.get("Ref")) for part in parts]
        return None if None in texts else separator.join(texts)  # type: ignore[arg-type]
    return None


def physical_names(synth: Synthesized) -> dict[str, str]:
    """The names the stack gives its resources itself (logical id -> name)."""
    names = {}
    for logical_id, resource in synth.resources.items():
        key = NAME_PROPERTIES.get(resource["Type"])
        value = resource.get("Properties", {}).get(key) if key else None
        name = resolved(value, synth.stack.stack_name) if value is not None else None
        if name is not None:
            names[logical_id] = name
    return names


def test_each_stage_is_its_own_stack_dev_keeping_todays_name(stages: dict[str, Synthesized]) -> None:
    assert stages["dev"].stack.stack_name == "TelegramCrmPipeline"
    assert stages["prod"].stack.stack_name == "TelegramCrmPipeline-prod"
    assert {path.name for path in stages["prod"].outdir.glob("*.template.json")} == {
        "TelegramCrmPipeline-prod.template.json"
    }


def test_two_stages_share_no_physical_name_export_or_output(stages: dict[str, Synthesized]) -> None:
    dev, prod = physical_names(stages["dev"]), physical_names(stages["prod"])

    # The names the stack gives: the events topic, the dashboards, the API, the configuration set.
    assert set(dev) == set(prod)
    assert {stages["dev"].resources[i]["Type"] for i in dev} >= {
        "AWS::SNS::Topic",
        "AWS::CloudWatch::Dashboard",
        "AWS::ApiGatewayV2::Api",
        "AWS::SMSVOICE::ConfigurationSet",
    }
    assert set(dev.values()).isdisjoint(prod.values())
    for logical_id, name in prod.items():
        assert name.startswith("TelegramCrmPipeline-prod"), (logical_id, name)
    # Everything else is named by CloudFormation (after the stack, or with a random suffix).
    for synth in stages.values():
        template = synth.template.to_json()
        exports = [o["Export"] for o in template.get("Outputs", {}).values() if "Export" in o]
        assert exports == []


def custom_metrics(synth: Synthesized) -> set[tuple[str, str]]:
    """(namespace, metric) of every metric not in an AWS/ namespace that an alarm or a dashboard
    reads, SEARCH expressions included."""
    found: set[tuple[str, str]] = set()

    def alarm_metrics(properties: dict[str, Any]) -> list[dict[str, Any]]:
        single = [properties] if "Namespace" in properties else []
        stats = [m["MetricStat"]["Metric"] for m in properties.get("Metrics", []) if "MetricStat" in m]
        return single + stats

    for resource in synth.resources.values():
        properties = resource.get("Properties", {})
        if resource["Type"] == "AWS::CloudWatch::Alarm":
            found |= {(m["Namespace"], m["MetricName"]) for m in alarm_metrics(properties)}
        if resource["Type"] == "AWS::CloudWatch::Dashboard":
            body = "".join(p for p in properties["DashboardBody"]["Fn::Join"][1] if isinstance(p, str))
            found |= set(re.findall(r'\["([^"\[\]{},]+)","([A-Za-z0-9]+)"', body.replace('\\"', '"')))
            found |= set(re.findall(r"SEARCH\('\{([^,]+),[^}]*\} MetricName=\\?\"(\w+)", body))
    return {(namespace, name) for namespace, name in found if not namespace.startswith("AWS/")}


def test_every_alarm_and_metric_reads_its_own_stages_namespace(stages: dict[str, Synthesized]) -> None:
    namespaces = {}
    for stage, synth in stages.items():
        metrics = custom_metrics(synth)
        assert len(metrics) > 15  # the alarms' and dashboards' own metrics were found
        namespaces[stage] = {namespace for namespace, _ in metrics}
        # The one source: what every function's Powertools writes to.
        for resource in synth.resources.values():
            if resource["Type"] == "AWS::Lambda::Function":
                variables = resource["Properties"]["Environment"]["Variables"]
                assert {variables["POWERTOOLS_METRICS_NAMESPACE"]} == namespaces[stage]
    assert namespaces == {"dev": {"TelegramCrmPipeline"}, "prod": {"TelegramCrmPipeline-prod"}}


def test_every_aws_metric_alarm_watches_a_resource_of_its_own_stack(stages: dict[str, Synthesized]) -> None:
    for synth in stages.values():
        account_wide = []
        for resource in synth.resources.values():
            properties = resource.get("Properties", {})
            if resource["Type"] != "AWS::CloudWatch::Alarm" or not properties.get("Namespace", "").startswith(
                "AWS/"
            ):
                continue
            if "Dimensions" not in properties:
                account_wide.append((properties["Namespace"], properties["MetricName"]))
                continue
            # A Ref/GetAtt: the stage's own function, queue or API (with its "$default" API stage).
            assert any(isinstance(d["Value"], dict) for d in properties["Dimensions"]), properties
        # The one deliberate exception: Lambda throttles only when the account's regional
        # concurrency runs out, which every stage of the account shares, so each stage hears it.
        assert account_wide == [("AWS/Lambda", "Throttles")]


def test_a_stages_settings_are_laid_over_the_others(stages: dict[str, Synthesized]) -> None:
    dev, prod = stages["dev"].stack.settings, stages["prod"].stack.settings
    assert (dev.api_rate_limit, prod.api_rate_limit) == (50, 200)
    assert prod.alarm_email == dev.alarm_email  # a key the block does not set keeps the top-level value


# -- settings, without a synth ---------------------------------------------------------------------
def refusal(context: dict[str, Any]) -> list[str]:
    with pytest.raises((SettingsError, ValueError)) as error:
        PipelineSettings.from_context(context)
    return settings_error_lines(error.value)  # type: ignore[arg-type]


@pytest.mark.parametrize("stage", ["Prod", "prod-1", "1prod", "pr od", "p" * 17])
def test_a_stage_name_that_is_none_is_refused_at_synth(stage: str) -> None:
    assert any(line.startswith("stage:") for line in refusal({"stage": stage}))


def test_a_stage_with_no_block_is_refused_once_stages_are_declared() -> None:
    assert refusal({"stage": "prdo", "stages": {"prod": {}}}) == [
        "stage: no such stage in cdk.json's stages (known: dev, prod) (given 'prdo')"
    ]
    # Without a "stages" block any stage name goes (a developer's own stack).
    assert PipelineSettings.from_context({"stage": "alice"}).stage_stack_name == "TelegramCrmPipeline-alice"
    # `-c stages=...` arrives as JSON text.
    text = json.dumps({"prod": {"alarms": "essential"}})
    assert PipelineSettings.from_context({"stage": "prod", "stages": text}).alarms == "essential"


def test_a_stage_block_is_checked_like_the_rest() -> None:
    assert refusal({"stage": "prod", "stages": {"prod": {"alarms": "most"}}})[0].startswith("alarms:")
    assert refusal({"stages": {"prod": {"stage": "dev"}}}) == [
        "stages.prod.stage: a stage's settings cannot choose the stage"
    ]
    assert refusal({"stages": {"Prod": {}}})[0].startswith("stages.Prod:")
    assert refusal({"stages": ["prod"]})[0].startswith("stages:")


def test_a_long_stack_name_never_loses_the_stage_from_a_bounded_name() -> None:
    base = "A" * 100
    dev, prod = (PipelineSettings(stack_name=base, stage=s).stage_stack_name for s in ("dev", "prod"))
    names = {stack_scoped_name(stack, "-sms", 64) for stack in (dev, prod)}
    assert len(names) == 2 and all(len(name) <= 64 and name.endswith("-sms") for name in names)
    assert refusal({"stack_name": "A" * 125, "stage": "prod"})[0].startswith("stack_name:")


def test_the_default_stage_needs_no_context() -> None:
    settings = PipelineSettings.from_context(BASE_CONTEXT)
    assert (settings.stage, settings.stage_stack_name, settings.metrics_namespace) == (
        "dev",
        "TelegramCrmPipeline",
        "TelegramCrmPipeline",
    )
